"""CTD generation records each accepted pair's MTC from a fixed reference detector and, on request, its benign
counterpart (TAG paper Tables 1-4): `unveil generate` on scripted models and the tiny Stable Diffusion pipeline.

The reference detector is the scripted TAG detector of the evaluation fixtures: a text containing LAYER1 is found
one layer below the roots, MTC 1 - 0.5 * 0.5 = 0.75. The benign rewriter is scripted too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.ctd import PairExtras, complete_pair
from tests.graphs.test_ctd import base_script, cli_args, erasure, merge, panel_rules, read_lines, write_script

DETECTOR = Path(__file__).parent.parent / "fixtures" / "eval" / "scripts" / "detect.json"
BENIGN_TEXT = "Baking day: the flour is extra fine this week, perfect for a sponge cake."


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return "diffusers:" + build_tiny_sd(tmp_path_factory.mktemp("tiny_sd") / "sd")


def script_with_benign() -> dict:
    answer = erasure("A")
    answer["caption"] = answer["caption"].replace("CAPTION-A:", "CAPTION-A: LAYER1")
    return merge(
        base_script([{"when": "", "then": answer}]),
        panel_rules("A"),
        {"benign_rewriter": [{"when": "", "then": {"text": BENIGN_TEXT, "removed_cue": "ask me for the good stuff"}}]},
    )


def test_generate_records_reference_mtc_and_a_benign_counterpart(tmp_path, tiny_sd):
    from datasets import load_dataset

    from agents.gateway import set_gateway
    from evaluation.datasets import load_detection
    from unveil.cli import main

    spec = write_script(tmp_path, script_with_benign())
    out = tmp_path / "ds"
    try:
        rc = main(
            cli_args(
                out,
                spec,
                tiny_sd,
                "--review",
                "auto",
                "--mtc-reference",
                f"scripted:{DETECTOR}",
                "--mtc-l-max",
                "2",
                "--benign",
                "--export",
                n=1,
            )
        )
    finally:
        set_gateway(None)
    assert rc == 0
    (rec,) = read_lines(out / "samples.jsonl")
    assert rec["status"] == "accepted"
    assert rec["mtc"] == pytest.approx(0.75)
    assert rec["mtc_reference"]["model"] == f"scripted:{DETECTOR}" and rec["mtc_reference"]["l_max"] == 2
    assert rec["benign"] == {
        "id": "drugs-00000-benign",
        "text": BENIGN_TEXT,
        "removed_cue": "ask me for the good stuff",
        "model": spec,
    }
    # the extra calls are counted in the record's usage (spending caps see them)
    roles = rec["usage"]["by_role"]
    assert roles["benign_rewriter"]["calls"] == 1 and roles["pair_judge"]["calls"] >= 1 and roles["eraser"]["calls"]

    toxic, benign = read_lines(out / "dataset.jsonl")
    assert (toxic["id"], toxic["label"], toxic["mtc"]) == ("drugs-00000", 1, pytest.approx(0.75))
    assert (benign["id"], benign["label"], benign["mtc"]) == ("drugs-00000-benign", 0, None)
    assert benign["text"] == BENIGN_TEXT and benign["image"] == toxic["image"]
    assert benign["counterpart_of"] == "drugs-00000" and toxic["counterpart_of"] is None

    # the evaluation reads both: Tables 1-2 take the toxic one with its reference MTC, Table 4 both
    both = load_detection(out / "dataset.jsonl", "ctd")
    assert [(it.record["label"], it.record["mtc"]) for it in both] == [(1, pytest.approx(0.75)), (0, None)]
    # ... with the detector that assigned the MTC, so an evaluation can tell it from the detectors it scores
    assert both[0].record["mtc_reference"]["model"] == f"scripted:{DETECTOR}"
    assert len(load_detection(out / "dataset.jsonl", "ctd", include_benign=False)) == 1

    ds = load_dataset(
        "parquet", data_files=str(out / "export" / "data.parquet"), split="train", cache_dir=str(tmp_path / "hf")
    )
    rows = {r["id"]: r for r in ds}
    assert rows["drugs-00000"]["label"] == 1 and rows["drugs-00000"]["mtc"] == pytest.approx(0.75)
    assert rows["drugs-00000-benign"]["label"] == 0 and rows["drugs-00000-benign"]["mtc"] is None
    assert rows["drugs-00000-benign"]["counterpart_of"] == "drugs-00000"
    assert rows["drugs-00000-benign"]["image"].size == rows["drugs-00000"]["image"].size


async def test_nothing_is_added_unless_asked_and_only_to_accepted_pairs(tmp_path):
    rec = {"id": "s1", "status": "accepted", "image": "images/x.png", "text": "t", "usage": {}}
    assert await complete_pair(rec, tmp_path, PairExtras()) is rec
    dropped = {"id": "s2", "status": "dropped", "image": None, "text": "t"}
    assert await complete_pair(dropped, tmp_path, PairExtras(benign_model="scripted:x.json")) is dropped


def test_the_benign_rewriter_role_is_accepted_by_generate(tmp_path):
    from unveil.cli import build_parser
    from unveil.commands.generate import build_context, pair_extras

    args = build_parser().parse_args(
        [
            "generate",
            "--category",
            "drugs",
            "--n",
            "1",
            "--out",
            str(tmp_path),
            "--model",
            "scripted:a.json",
            "--role-model",
            "benign_rewriter=scripted:b.json",
            "--benign",
            "--mtc-reference",
            "scripted:d.json",
        ]
    )
    ctx = build_context(args, tmp_path)
    extras = pair_extras(args, ctx)
    assert extras.benign_model == "scripted:b.json" and extras.mtc_reference == "scripted:d.json"
    args = build_parser().parse_args(
        ["generate", "--category", "drugs", "--n", "1", "--out", str(tmp_path), "--model", "scripted:a.json"]
    )
    assert not pair_extras(args, build_context(args, tmp_path)).active
    assert json.dumps(PairExtras().__dict__)  # plain values, so a distributed engine can ship them
