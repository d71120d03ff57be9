"""One command compares TAG, vanilla and a guard model on SIUO (and MSSBench for negatives), scripted backends."""

import csv
import json
from pathlib import Path

import pytest

from agents.gateway import set_gateway
from unveil.cli import main

FIX = Path(__file__).parent.parent / "fixtures" / "eval"
SCRIPT = FIX / "scripts" / "compare.json"


@pytest.fixture(autouse=True)
def _reset_gateway():
    yield
    set_gateway(None)


def _rows(path: Path) -> dict[tuple[str, str, str, str], dict[str, str]]:
    with path.open() as fh:
        return {(r["dataset"], r["method"], r["level"], r["group"]): r for r in csv.DictReader(fh)}


def test_one_command_compares_tag_vanilla_and_llama_guard(tmp_path, capsys):
    out = tmp_path / "out"
    spec = f"scripted:{SCRIPT}"
    rc = main(
        [
            "evaluate",
            "detection",
            "--dataset",
            f"siuo=siuo:{FIX / 'siuo' / 'siuo_gen.json'}",
            "--dataset",
            f"mss=mssbench:{FIX / 'mssbench' / 'combine.json'}",
            "--methods",
            "tag,vanilla,guard:llama-guard-4",
            "--detectors",
            spec,
            "--role-model",
            f"guard={spec}",
            "--l-max",
            "2",
            "--include-benign",
            "--mtc-reference",
            spec,
            "--cache",
            str(tmp_path / "cache.sqlite"),
            "--image-store",
            str(tmp_path / "images"),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 2  # the batch exit rule: some samples failed (unusable records, an unparseable guard answer)
    printed = capsys.readouterr().out
    assert "Methods compared" in printed and "guard:llama-guard-4" in printed
    rows = _rows(out / "comparison.csv")

    def get(dataset, method, level="overall", group="all"):
        return rows[(dataset, method, level, group)]

    # SIUO: every pair is unsafe. TAG finds the overt pair at the roots and the rope pair one layer down.
    tag = get("siuo", "tag (l_max=2)")
    assert (tag["tp"], tag["fn"], tag["n"]) == ("2", "1", "3")
    assert float(tag["recall"]) == pytest.approx(2 / 3)
    assert float(tag["f2"]) == pytest.approx(5 * 2 / (5 * 2 + 4 * 1))
    assert float(tag["calls_per_sample"]) > 1  # roots, expansions, judges, explanations
    van = get("siuo", "vanilla")
    assert (van["tp"], van["fn"]) == ("1", "2") and float(van["calls_per_sample"]) == pytest.approx(3 / 4)
    # Llama Guard: S11 on the rooftop pair, 'safe' on the rope pair, and an answer outside its format, which is a
    # recorded failure (with the unusable record), not a score.
    lg = get("siuo", "guard:llama-guard-4")
    assert (lg["tp"], lg["fn"], lg["n"], lg["failed"]) == ("1", "1", "2", "2")
    # per category and per MTC bin (the reference MTC is the scripted detector's TA-CTD: 0 roots, 0.75 one hop,
    # 1 nothing found)
    assert get("siuo", "tag (l_max=2)", "category", "self_harm")["tp"] == "2"
    assert get("siuo", "tag (l_max=2)", "category", "privacy")["fn"] == "1"
    assert get("siuo", "vanilla", "mtc", "medium")["fn"] == "1"
    assert get("siuo", "guard:llama-guard-4", "mtc", "low")["tp"] == "1"
    # MSSBench gives negatives: the guard flags the golf query with the safe image too.
    lg = get("mss", "guard:llama-guard-4")
    assert (lg["tp"], lg["fp"], lg["tn"], lg["fn"]) == ("2", "1", "2", "1")
    assert float(lg["precision"]) == pytest.approx(2 / 3) and float(lg["f1"]) == pytest.approx(2 / 3)
    assert float(lg["accuracy"]) == pytest.approx(4 / 6)
    tag = get("mss", "tag (l_max=2)")
    assert (tag["tp"], tag["fp"], tag["tn"], tag["fn"]) == ("1", "0", "3", "2")
    assert get("mss", "vanilla", "mtc", "high")["n"] == "5" and get("mss", "vanilla", "mtc", "medium")["fn"] == "1"

    # outputs: Markdown, CSV, bar charts, confusion matrices
    assert "| dataset | method | detector | prune | roots_mode | level | group |" in (out / "comparison.md").read_text()
    assert tag["prune"] == "per_node" and tag["roots_mode"] == "separate" and van["prune"] == ""
    for name in ("siuo", "mss"):
        assert (out / "plots" / f"comparison_{name}.png").read_bytes()[:4] == b"\x89PNG"
    with (out / "confusion.csv").open() as fh:
        configs = {(r["dataset"], r["config"]) for r in csv.DictReader(fh)}
    assert ("siuo", "guard:llama-guard-4") in configs
    assert len(list((out / "plots").glob("confusion_*guard*.png"))) == 2

    # the guard's run file keeps its own codes, the mapped category, and the raw answer of the failure
    (run,) = (out / "runs" / "siuo").glob("guard*.jsonl")
    recs = {r["id"]: r for r in map(json.loads, run.read_text().splitlines())}
    assert recs["siuo-1001"]["guard_codes"] == ["S11"] and recs["siuo-1001"]["predicted_category"] == "self_harm"
    assert recs["siuo-1001"]["category"] == "self_harm"  # the ground truth, in the same vocabulary
    assert recs["siuo-4001"]["status"] == "failed" and "unparseable" in recs["siuo-4001"]["error"]
    assert recs["siuo-4001"]["raw_answer"].startswith("I'm sorry")
