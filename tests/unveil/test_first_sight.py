"""What a newcomer sees first (issue 33, item 7): the demo's category is a category of the vocabulary (an enum in the
schema), its output is labelled as the 135M demo's, the embedded-model note names the spec(s) and roles really in
use, and a server's refusal of a structured-output method is said once per run, on one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.categories import VOCABULARY
from agents.tag.judges import ConfirmedPair, RootVerdict
from tests.faultserver import FaultServer
from tests.graphs.test_langgraph_dev import TAG_SCRIPT
from unveil.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_category_is_an_enum_of_the_vocabulary_and_other_spellings_are_read_onto_it() -> None:
    schema = ConfirmedPair.model_json_schema()
    assert tuple(schema["properties"]["category"]["enum"]) == VOCABULARY
    assert ConfirmedPair(pair_id="p", category="Illegal drugs", reason="r").category == "drugs"
    assert ConfirmedPair(pair_id="p", category="toxic", reason="r").category == "other"
    assert RootVerdict(toxic=False).category == ""
    with pytest.raises(ValueError):
        RootVerdict(toxic=True, category="", reason="r")  # still repaired: a toxic verdict needs a category


def _pairs(tmp_path: Path) -> Path:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"id": "p0", "text": "Text the usual number.", "image_description": "powder"}) + "\n")
    return pairs


def test_a_model_that_answers_toxic_as_the_category_gets_a_category(tmp_path: Path, capsys: Any) -> None:
    script = json.loads(json.dumps(TAG_SCRIPT))
    script["pair_judge"][0]["then"]["toxic_pairs"][0]["category"] = "toxic"
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    out = tmp_path / "out.jsonl"
    argv = ["detect", "--input", str(_pairs(tmp_path)), "--output", str(out), "--no-progress", "--l-max", "3"]
    assert main([*argv, "--model", f"scripted:{path}", "--children", "2"]) == 0
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["finding"]["category"] == "other"


def test_the_embedded_model_note_names_the_specs_and_roles_in_use(capsys: Any) -> None:
    from unveil.commands.common import warn_if_demo

    warn_if_demo({"root_extractor": "transformers:smollm2", "pair_judge": "transformers:smollm2"})
    assert "NOTE: running on the embedded model SmolLM2-135M-Instruct (transformers:smollm2)" in capsys.readouterr().err
    demo = "llamacpp:smollm2"
    warn_if_demo({"root_extractor": demo, "pair_judge": "openai:gpt-4.1", "explainer": demo})
    err = capsys.readouterr().err
    assert "role(s) root_extractor, explainer run on the embedded model" in err and "(llamacpp:smollm2)" in err
    assert "transformers:smollm2" not in err
    warn_if_demo({"pair_judge": "openai:gpt-4.1"})
    assert capsys.readouterr().err == ""


def test_a_structured_method_refusal_is_said_once_per_run_on_one_line(tmp_path: Path, caplog: Any) -> None:
    from tests.faultserver import UnveilAnswers

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(json.dumps({"id": f"p{i}", "text": f"text {i}", "image_description": "a cup"}) + "\n" for i in range(4))
    )
    with FaultServer(UnveilAnswers(), unsupported=("json_schema",)) as server:
        argv = ["detect", "--method", "vanilla", "--input", str(pairs), "--output", str(tmp_path / "o.jsonl")]
        rc = main([*argv, "--model", server.spec(), "--no-progress", "--concurrency", "4", "--cache", "off"])
    assert rc == 0, caplog.text
    warnings = [r.getMessage() for r in caplog.records if "does not support structured method" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "\n" not in warnings[0] and len(warnings[0]) < 400


@pytest.mark.slow(
    reason="its subject is the README's first command in a real process on the embedded 135M model; "
    "tests/unveil/test_detect_cli.py runs the bundled examples' batch in the fast loop"
)
@pytest.mark.timeout(1200)  # the 135M model in a process of its own: minutes on a busy 2-core machine
def test_the_readme_demo_labels_its_output_and_prints_categories(tmp_path: Path) -> None:
    # README's first command, `unveil detect`, on the embedded model, from a fresh working folder (the home's
    # dequantized model is kept: converting it again takes minutes; the response cache is off, so the model runs).
    pytest.importorskip("xgrammar")
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNVEIL_")} | {"PYTHONPATH": str(ROOT)}
    # One of the three bundled pairs, as a file of the same name (the output is named after it), on the demo's own
    # search (no depth flag, as the README's command runs): each pair's lines come from the same code, and the 135M
    # model takes about a minute a pair on 2 cores. A spending cap cannot do this: caps stop calls, not samples, so
    # `--max-calls` cut the first pair itself mid-search. The pair is bleach-drink, the one the pair judge once
    # wrote one id on until the token limit, so that every repair lacked the required reason and the README's first
    # command exited 2: it must complete (this run was test_transformers_lm.py's, a second process with the model
    # for the same search). The bundled examples' batch of three runs in the fast loop (test_detect_cli.py).
    from unveil.commands.inputs import EXAMPLES

    (pair,) = [line for line in EXAMPLES.read_text(encoding="utf-8").splitlines() if '"bleach-drink"' in line]
    (tmp_path / "pairs.jsonl").write_text(pair + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "unveil.cli", "detect", "--no-progress", "--cache", "off", "--input", "pairs.jsonl"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1150,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "NOTE: running on the embedded model SmolLM2-135M-Instruct (transformers:smollm2)" in proc.stderr
    assert "1 done, 0 failed" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    # A batch of --input prints no per-sample lines: the demo's labelled line is printed here from the real record
    # the embedded model made, by the function the bundled demo prints with.
    import contextlib
    import io

    from agents.providers.profiles import is_demo_spec
    from unveil.commands.detect import _print_summary

    (line,) = (tmp_path / "runs" / "detect-tag-pairs.jsonl").read_text(encoding="utf-8").splitlines()
    rec = json.loads(line)
    assert all(is_demo_spec(spec) for spec in rec["models"].values()), rec["models"]
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        _print_summary(rec, rec["id"], demo=True)
    verdicts = [x for x in shown.getvalue().splitlines() if x.startswith("[")]
    assert len(verdicts) == 1 and ("135M demo model" in verdicts[0] or "FAILED" in verdicts[0]), shown.getvalue()
    categories = [x.split(":", 1)[1].strip() for x in shown.getvalue().splitlines() if "  category:" in x]
    assert all(c in VOCABULARY for c in categories), shown.getvalue()
    assert (tmp_path / "runs" / "detect-tag-pairs.jsonl").is_file()
    assert "Loading weights" not in proc.stderr  # --no-progress quiets transformers' bars too
