"""`unveil detect` end to end with the scripted provider: JSON output, the TAG picture, the bundled examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unveil.cli import main

SCRIPT = {
    "root_extractor.image": [{"when": "", "then": {"entities": [{"name": "white powder"}]}}],
    "root_extractor.text": [{"when": "", "then": {"entities": [{"name": "usual number"}]}}],
    "root_judge": [{"when": "", "then": {"toxic": False}}],
    "expander.visual": [
        {
            "when": "",
            "then": {
                "expansions": [
                    {
                        "parent_id": "v0.0",
                        "children": [
                            {"concept": "cocaine", "association": "similarity", "probability": 0.4},
                            {"concept": "flour", "association": "similarity", "probability": 0.6},
                        ],
                    }
                ]
            },
        }
    ],
    "expander.textual": [
        {
            "when": "",
            "then": {
                "expansions": [
                    {
                        "parent_id": "t0.0",
                        "children": [{"concept": "dealer contact", "association": "cultural", "probability": 1.0}],
                    }
                ]
            },
        }
    ],
    "pair_judge": [
        {"when": "", "then": {"toxic_pairs": [{"pair_id": "v1.1|t1.0", "category": "drugs", "reason": "sale"}]}}
    ],
    "explainer": [
        {
            "when": "",
            "then": {
                "explanation": "white powder -> cocaine; usual number -> dealer contact",
                "hidden_meaning": "drug sale",
            },
        }
    ],
}


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return f"scripted:{path}"


def test_single_pair_json_and_render(spec: str, tmp_path: Path, capsys) -> None:
    svg = tmp_path / "tag.svg"
    rc = main(
        [
            "detect",
            "--model",
            spec,
            "--image-description",
            "white powder",
            "--text",
            "text the usual number",
            "--l-max",
            "2",
            "--json",
            "--render",
            str(svg),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["toxic"] is True and out["mtc"] == pytest.approx(0.6)
    assert [s["concept"] for s in out["finding"]["visual"]["path"]] == ["white powder", "cocaine"]
    assert set(out["trees"]) == {"visual", "textual"} and out["models"]["pair_judge"] == spec
    assert out["usage"]["total"]["calls"] == 7 and "expander" in out["usage"]["by_role"]
    text = svg.read_text()
    assert "cocaine" in text and "dealer contact" in text and "MTC" in text


def test_bundled_examples_run_as_a_batch(spec: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["detect", "--model", spec, "--l-max", "2", "--no-progress"]) == 0
    # the default output name carries the model, so another model never resumes the embedded model's file
    output = tmp_path / "runs" / "detect-tag-pairs-scripted-script.json.jsonl"
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert {r["id"] for r in records} == {"flour-phone", "bleach-drink", "garden-picnic"}
    assert all(r["status"] == "ok" and r["toxic"] for r in records)
    printed = capsys.readouterr().out
    assert printed.count("TOXIC") == 3 and "image path: white powder -> cocaine" in printed


def test_single_pair_failure_is_one_redacted_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MY_SERVER_TOKEN", "tok-canary-123456789")
    script = tmp_path / "bad.json"
    script.write_text(
        json.dumps({"root_extractor": [{"__error__": "401 invalid token tok-canary-123456789", "status": 401}]})
    )
    rc = main(["detect", "--model", f"scripted:{script}", "--image-description", "d", "--text", "t"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "unveil detect: error: ModelCallError" in err and "Traceback" not in err
    assert "tok-canary-123456789" not in err and "***" in err


def test_roles_command_lists_every_structured_role(capsys) -> None:
    assert main(["roles"]) == 0
    listed = json.loads(capsys.readouterr().out)
    names = " ".join(listed["structured"])
    for role in (
        "root_extractor",
        "expander.visual",
        "pair_judge",
        "explainer",
        "vanilla_detector",
        "architect",
        "eraser",
        "judge.blind",
        "gatekeeper",
        "labeller",
        "rewriter",
    ):
        assert role in names
    assert all("properties" in schema for schema in listed["structured"].values())
    assert any(k.startswith("refiner") for k in listed["free_text"])


def test_vanillas_summary_names_its_category_for_one_pair_and_a_batch(tmp_path: Path, capsys) -> None:
    from tests.unveil.test_workflow_cli import MODEL

    pair = ["detect", "--method", "vanilla", "--model", MODEL, "--cache", "off", "--image-description", "a street"]
    assert main([*pair, "--text", "OVERT threat"]) == 0
    assert "TOXIC" in (shown := capsys.readouterr().out) and "category: violence" in shown
    # the bundled-examples path prints each record of a batch: there the method's category is `predicted_category`
    from unveil.commands.detect import _print_summary

    _print_summary({"toxic": True, "category": "benign", "predicted_category": "violence", "reason": "r"}, "s0")
    assert "category: violence" in capsys.readouterr().out


def test_detect_help_shows_the_default_output_and_concurrency(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps its help at the terminal's width
    with pytest.raises(SystemExit):
        main(["detect", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default runs/detect-METHOD-INPUT[-PROVIDER-MODEL].jsonl, e.g. runs/detect-tag-pairs.jsonl" in shown
    assert "samples run at once (default 4; 1 on the embedded demo model" in shown


def test_a_missing_api_key_is_explained_to_a_cli_user(capsys, monkeypatch) -> None:
    for key in ("OPENAI_API_KEY", "UNVEIL_MODEL"):
        monkeypatch.delenv(key, raising=False)
    argv = ["detect", "--model", "openai:gpt-4.1", "--text", "x", "--image-description", "y", "--cache", "off"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "set OPENAI_API_KEY in the environment that runs it (the shell you run `unveil` from" in err
    assert "in the server's environment" not in err
