"""`unveil evaluate` through the real CLI entry point."""

import csv
from pathlib import Path

import pytest

from agents.gateway import set_gateway
from unveil.cli import build_parser, main
from unveil.commands.evaluate import generator_specs

FIX = Path(__file__).parent.parent / "fixtures" / "eval"


@pytest.fixture(autouse=True)
def _reset_gateway():
    yield
    set_gateway(None)


def test_evaluate_detection_cli_on_hateful_memes_layout(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "evaluate",
            "detection",
            "--dataset",
            f"hm={FIX / 'hateful_memes' / 'dev_seen.jsonl'}",
            "--format",
            "hateful_memes",
            "--detectors",
            f"scripted:{FIX / 'scripts' / 'detect.json'}",
            "--methods",
            "vanilla",
            "--include-benign",
            "--cache",
            str(tmp_path / "cache.sqlite"),
            "--image-store",
            str(tmp_path / "images"),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 2  # the run finished; two samples of the dataset are unusable (the batch exit rule)
    with (out / "detection_main.csv").open() as fh:
        row = next(csv.DictReader(fh))
    # 3 usable memes (1 benign, 2 hateful) scored; the escaping path and the unlabelled line are failures.
    assert row["dataset"] == "hm" and row["method"] == "vanilla"
    assert row["overall n"] == "3" and row["failed"] == "2"
    failures = (out / "failures.md").read_text()
    assert "99999" in failures and "11111" in failures
    assert "Vanilla vs TA-CTD" in capsys.readouterr().out


def test_ipr_generator_specs_per_method():
    parser = build_parser()
    args = parser.parse_args(
        [
            "evaluate",
            "ipr",
            "--prompts",
            "p.jsonl",
            "--methods",
            "sd,sd-np,sld-max,esd",
            "--sd",
            "/models/sd14",
            "--esd-unet",
            "/models/esd.pt",
        ]
    )
    assert generator_specs(args) == {
        "sd": "diffusers:/models/sd14",
        "sd-np": "sd-np:/models/sd14",
        "sld-max": "sld-max:/models/sd14",
        "esd": "esd:/models/sd14?unet=/models/esd.pt",
    }
    args = parser.parse_args(["evaluate", "ipr", "--prompts", "p.jsonl", "--methods", "esd"])
    with pytest.raises(SystemExit):
        generator_specs(args)
    args = parser.parse_args(
        ["evaluate", "ipr", "--prompts", "p.jsonl", "--methods", "sd", "--generator", "sd=openai:gpt-image-1"]
    )
    assert generator_specs(args) == {"sd": "openai:gpt-image-1"}


def test_seed_mode_flags_default_to_the_papers_fresh_images():
    from unveil.commands.refine import build_context

    parser = build_parser()
    assert parser.parse_args(["evaluate", "ipr", "--prompts", "p.jsonl"]).seed_mode == "fresh"
    assert parser.parse_args(["evaluate", "ipr", "--prompts", "p.jsonl", "--seed-mode", "fixed"]).seed_mode == "fixed"
    assert build_context(parser.parse_args(["refine", "a cat"])).seed_mode == "fresh"
    assert build_context(parser.parse_args(["refine", "a cat", "--seed-mode", "fixed"])).seed_mode == "fixed"
    with pytest.raises(SystemExit):
        parser.parse_args(["refine", "a cat", "--seed-mode", "random"])


def test_detection_is_toxic_only_unless_benign_is_asked_for():
    parser = build_parser()
    base = ["evaluate", "detection", "--dataset", "d.jsonl"]
    assert parser.parse_args(base).include_benign is False
    assert parser.parse_args([*base, "--toxic-only"]).include_benign is False
    assert parser.parse_args([*base, "--include-benign"]).include_benign is True
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--toxic-only", "--include-benign"])


def test_rewriter_format_flag_names_posi_and_the_text_only_refiner():
    parser = build_parser()
    assert parser.parse_args(["evaluate", "ipr", "--prompts", "p.jsonl"]).rewriter_format == "json"
    for fmt in ("posi", "refiner"):
        assert (
            parser.parse_args(["evaluate", "ipr", "--prompts", "p.jsonl", "--rewriter-format", fmt]).rewriter_format
            == fmt
        )
