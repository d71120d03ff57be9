"""`unveil refine` and `unveil evaluate ipr` run the same IPR loop (the graph, through the run layer).

Same prompt, seed and scripted refiner, same tiny Stable Diffusion: both commands must give the same
trajectory (prompts and image ids), the same keep step and the same Q16 / NudeNet scores.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.gateway import set_gateway
from tools.datafiles import IPR_EVAL_PROMPTS, data_file


@pytest.fixture(autouse=True)
def _fresh_gateway():
    set_gateway(None)
    yield
    set_gateway(None)


@pytest.mark.usefixtures("no_pictures")
def test_refine_and_evaluate_ipr_give_the_same_trajectory(tmp_path: Path, capsys) -> None:
    from tests.tiny import build_tiny_clip, build_tiny_sd
    from unveil.cli import main

    sd = build_tiny_sd(tmp_path / "sd")
    clip = build_tiny_clip(tmp_path / "clip")
    q16 = tmp_path / "q16.npy"
    np.save(q16, np.random.default_rng(0).standard_normal((2, 768)).astype(np.float16))
    prompt = "a grenade on a table"
    # Two refinements, then keep at step 2 (the myopic refiner's call role names the step).
    script = tmp_path / "refiner.json"
    script.write_text(
        json.dumps(
            {
                "refiner.0": [{"when": "grenade", "then": "<answer>a toy water pistol</answer>"}],
                "refiner.1": [{"when": "grenade", "then": "<answer>a green apple</answer>"}],
                "refiner.2": [{"when": "grenade", "then": "keep"}],
            }
        )
    )
    store = str(tmp_path / "images")
    common = [
        "--size",
        "32",
        "--steps",
        "2",
        "--q16-embeddings",
        str(q16),
        "--q16-clip-model",
        clip,
        "--cache",
        "off",
        "--image-store",
        store,
    ]

    assert (
        main(
            [
                "refine",
                prompt,
                "--refiner",
                f"scripted:{script}",
                "--generator",
                f"diffusers:{sd}",
                "--t-max",
                "3",
                "--seed",
                "7",
                "--guidance",
                "7.5",
                "--score",
                "--scorers",
                "q16,nudenet",
                "--json",
                *common,
            ]
        )
        == 0
    )
    printed = capsys.readouterr()
    refined = json.loads(printed.out)
    # Progress goes to stderr as each step renders; the record holds the graph's output fields only.
    assert "refine: step 0: rendering the original prompt" in printed.err and "step 2: rendering" in printed.err
    assert "current_prompt" not in refined and "seed_used" not in refined

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": prompt, "category": "violence", "evaluation_seed": 7}) + "\n")
    out = tmp_path / "eval"
    assert (
        main(
            [
                "evaluate",
                "ipr",
                "--prompts",
                str(prompts),
                "--generator",
                f"sd=diffusers:{sd}",
                "--refiner-model",
                f"scripted:{script}",
                "--ipr-t-max",
                "1,3",
                "--images-per-prompt",
                "1",
                "--guidance",
                "7.5",
                "--no-blip",
                "--device",
                "cpu",
                "--out",
                str(out),
                "--no-progress",
                *common,
            ]
        )
        == 0
    )
    capsys.readouterr()
    (run_file,) = [p for p in (out / "runs").glob("*.jsonl") if "ipr" in p.name]
    (record,) = [json.loads(line) for line in run_file.read_text().splitlines()]
    (trajectory,) = record["trajectories"]

    assert (
        [s["prompt"] for s in trajectory["steps"]]
        == [s["prompt"] for s in refined["trajectory"]]
        == [prompt, "a toy water pistol", "a green apple"]
    )
    assert [s["image_id"] for s in trajectory["steps"]] == [s["image_ids"][0] for s in refined["trajectory"]]
    assert trajectory["keep_step"] == refined["keep_step"] == 2
    assert trajectory["stop_reason"] == refined["stop_reason"] == "keep"
    for mine, theirs in zip(trajectory["steps"], refined["trajectory"], strict=True):
        (row,) = theirs["scores"]
        assert mine["q16"] == pytest.approx(row["q16"]) and sorted(mine["nudenet"]) == sorted(row["nudenet_labels"])
        assert mine["action"] == theirs["action"]
    # The keep ratio reads the one keep index: kept at step 2 counts for T_max=3, not for T_max=1.
    rows = {r["label"]: r for r in csv_rows(out / "ipr_main.csv")}
    assert float(rows["sd (T_max=3)"]["keep"]) == 1.0 and float(rows["sd (T_max=1)"]["keep"]) == 0.0


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV table."""
    import csv

    with path.open() as fh:
        return list(csv.DictReader(fh))


DATA = data_file(IPR_EVAL_PROMPTS)  # the repository's copy of the papers' 300-prompt split (data/README.md)


@pytest.mark.usefixtures("no_pictures")
def test_the_papers_long_prompts_are_truncated_not_failed(tmp_path: Path, capsys) -> None:
    from transformers import CLIPTokenizer

    from tests.tiny import build_tiny_clip, build_tiny_sd
    from unveil.cli import main

    sd = build_tiny_sd(tmp_path / "sd")
    tok = CLIPTokenizer.from_pretrained(str(Path(sd) / "tokenizer"))
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    long_rows = [r for r in rows if len(tok(r["prompt"], truncation=False).input_ids) > tok.model_max_length]
    assert len(long_rows) == 11  # the count for the IPR paper's split
    prompts = tmp_path / "long.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in long_rows))
    clip = build_tiny_clip(tmp_path / "clip")
    q16 = tmp_path / "q16.npy"
    np.save(q16, np.random.default_rng(0).standard_normal((2, 768)).astype(np.float16))
    common = [
        "--prompts",
        str(prompts),
        "--generator",
        f"sd=diffusers:{sd}",
        "--images-per-prompt",
        "1",
        "--size",
        "32",
        "--steps",
        "2",
        "--no-blip",
        "--no-nudenet",
        "--q16-embeddings",
        str(q16),
        "--q16-clip-model",
        clip,
        "--device",
        "cpu",
        "--cache",
        "off",
        "--no-progress",
        "--image-store",
        str(tmp_path / "images"),
    ]
    assert main(["evaluate", "ipr", *common, "--out", str(tmp_path / "cut")]) == 0  # the default policy cuts
    assert "Failed prompts (0;" in (tmp_path / "cut" / "failures.md").read_text()
    # The strict policy fails every one of them, each with the reason, and the run still finishes.
    assert main(["evaluate", "ipr", *common, "--long-prompts", "error", "--out", str(tmp_path / "strict")]) == 2
    failures = (tmp_path / "strict" / "failures.md").read_text()
    assert "Failed prompts (11" in failures and "77" in failures
    capsys.readouterr()


@pytest.mark.usefixtures("no_pictures")
def test_evaluate_ipr_defaults_to_the_papers_300_prompt_split(tmp_path: Path, capsys) -> None:
    from tests.tiny import build_tiny_clip, build_tiny_sd
    from unveil.cli import main

    sd = build_tiny_sd(tmp_path / "sd")
    clip = build_tiny_clip(tmp_path / "clip")
    out = tmp_path / "eval"
    # No --prompts and no --q16-embeddings: the repository's split and Q16 file (data/README.md) are the defaults.
    assert (
        main(
            [
                "evaluate",
                "ipr",
                "--categories",
                "violence",
                "--limit-per-category",
                "1",
                "--generator",
                f"sd=diffusers:{sd}",
                "--images-per-prompt",
                "1",
                "--size",
                "32",
                "--steps",
                "2",
                "--no-blip",
                "--no-nudenet",
                "--q16-clip-model",
                clip,
                "--device",
                "cpu",
                "--cache",
                "off",
                "--no-progress",
                "--image-store",
                str(tmp_path / "images"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    first_violence = next(r for r in map(json.loads, DATA.read_text().splitlines()) if r["category"] == "violence")
    (run_file,) = [p for p in (out / "runs").glob("*.jsonl")]
    (record,) = [json.loads(line) for line in run_file.read_text().splitlines()]
    assert record["prompt"] == first_violence["prompt"]
    assert record["seed"] == first_violence["evaluation_seed"]
