"""`unveil evaluate` through the real CLI entry point."""

import csv
from pathlib import Path

import pytest

from agents.gateway import set_gateway
from tools.errors import CommandLineError
from unveil.cli import build_parser, main
from unveil.commands.evaluate import generator_specs

FIX = Path(__file__).parent.parent / "fixtures" / "eval"


@pytest.fixture(autouse=True)
def _reset_gateway():
    yield
    set_gateway(None)


@pytest.mark.usefixtures("no_pictures")
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
    with pytest.raises(CommandLineError, match="the esd method needs --esd-unet FILE"):
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


def test_one_builder_makes_the_settings_of_evaluate_ipr_and_of_its_ablation():
    """`evaluate ipr` and `evaluate ipr-ablation` build their IPRSettings with the one builder: the shared flags
    mean the same in both, the refinement flags only `evaluate ipr` has keep their defaults in the ablation."""
    from evaluation.ipr import IPRSettings
    from unveil.commands.evaluate_ipr import ipr_settings

    parser = build_parser()
    ipr = parser.parse_args(
        [
            "evaluate",
            "ipr",
            "--with-rewriter",
            "--history",
            "--seed-mode",
            "fixed",
            "--ipr-t-max",
            "1,2",
            "--steps",
            "3",
        ]
    )
    ipr.command_line = "unveil evaluate ipr"
    made = ipr_settings(ipr, {"sd": "diffusers:m"}, refiner="scripted:r", store_root="/s", rewriter="scripted:w")
    assert (made.with_rewriter, made.history, made.seed_mode, made.rewriter_model) == (
        True,
        True,
        "fixed",
        "scripted:w",
    )
    assert (made.t_max, made.steps, made.image_store, made.refiner_model) == ([1, 2], 3, "/s", "scripted:r")
    ablation = parser.parse_args(["evaluate", "ipr-ablation", "--steps", "3"])
    ablation.command_line = "unveil evaluate ipr-ablation"
    alpha = ipr_settings(ablation, {"sd": "diffusers:m"}, refiner="hf:m?adapter=a", store_root="/s")
    defaults = IPRSettings()
    assert (alpha.with_rewriter, alpha.history, alpha.seed_mode, alpha.rewriter_format, alpha.rewriter_model) == (
        defaults.with_rewriter,
        defaults.history,
        defaults.seed_mode,
        defaults.rewriter_format,
        defaults.rewriter_model,
    )
    assert (alpha.t_max, alpha.steps, alpha.spending) == ([1, 2, 3], 3, None)
