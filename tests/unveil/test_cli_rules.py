"""Command-line rules that hold across commands: bad combinations refused, the command line beats the
environment, misspelt roles listed, review ids checked, a user-facing --help."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli_args import refusal
from unveil.cli import BUG_EXIT, build_parser, main


@pytest.mark.parametrize(
    "argv, words",
    [
        (["detect", "--image", "x.png"], "--text is missing"),
        (["detect", "--input", "pairs.jsonl", "--render", "tag.png"], "--render draws one pair's TAG"),
        (["detect", "--render", "tag.png"], "--render draws one pair's TAG"),
        (["detect", "--input", "p.jsonl", "--text", "t"], "not both"),
        (["detect", "--text", "t", "--image-description", "d", "--render", "tag"], "must end in .png, .svg, .pdf"),
        (["detect", "--text", "t", "--image-description", "d", "--render", "tag.jpg"], "must end in"),
    ],
)
def test_detect_refuses_what_it_would_ignore(argv: list[str], words: str, capsys) -> None:
    assert words in refusal([*argv, "--cache", "off"], capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["detect", "--text", "t", "--image-description", "d", "--role-model", "pair_jugde=scripted:x.json"],
        ["refine", "a cat", "--role-model", "refinr=scripted:x.json"],
        ["generate", "--category", "drugs", "--n", "1", "--out", "OUT", "--role-model", "eraserr=scripted:x.json"],
        ["evaluate", "ipr", "--prompts", "p.jsonl", "--role-model", "refinr=scripted:x.json"],
    ],
)
def test_a_misspelt_role_lists_the_valid_ones(argv: list[str], tmp_path: Path, capsys) -> None:
    argv = [a.replace("OUT", str(tmp_path / "ds")) for a in argv]
    assert re.search("unknown role.*valid roles: .*", refusal([*argv, "--cache", "off"], capsys))


CANARY = "tok-canary-5f3a9c1e77"  # a URL password: the error report redacts it, a raw SystemExit did not


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["evaluate", "ipr", "--prompts", "p.jsonl", "--methods", "sd", "--generator", f"m@https://u:{CANARY}@h/v1"],
            "expected METHOD=SPEC",
        ),
        (["evaluate", "ipr", "--prompts", "p.jsonl", "--methods", "esd"], "the esd method needs --esd-unet FILE"),
        (["evaluate", "detection", "--dataset", "a=x.jsonl", "--dataset", "a=y.jsonl"], "the name 'a' is used twice"),
        (["evaluate", "detection", "--dataset", "x.jsonl", "--format", "ctd", "--format", "siuo"], "one per --dataset"),
        (["review", "{tmp}"], "no samples.jsonl here (not a dataset folder written by `unveil generate`)"),
    ],
)
def test_a_refused_command_line_goes_through_the_error_report(
    argv: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # These ended in `SystemExit(message)`: printed raw (the URL password included), without the command's name,
    # past `unveil.cli.report_error`. Now each is an UnveilError: one redacted line naming the command, exit 1.
    rc = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert rc == 1 and f"unveil {argv[0]}: error: " in err and words in err, err
    assert CANARY not in err and "Traceback" not in err


def test_command_line_wins_over_the_environment(monkeypatch) -> None:
    from unveil.commands.detect import _context
    from unveil.commands.refine import build_context

    monkeypatch.setenv("UNVEIL_L_MAX", "2")
    monkeypatch.setenv("UNVEIL_T_MAX", "5")
    parser = build_parser()
    given = _context(parser.parse_args(["detect", "--l-max", "4", "--k-max", "6", "--model", "scripted:x.json"]))
    assert given.l_max == 4  # 4 is also the default: explicit still wins
    unset = _context(parser.parse_args(["detect", "--model", "scripted:x.json"]))
    assert unset.l_max == 2  # the environment fills what the command line left out
    assert build_context(parser.parse_args(["refine", "x", "--t-max", "3"])).t_max == 3
    assert build_context(parser.parse_args(["refine", "x"])).t_max == 5


def test_review_of_an_id_that_does_not_wait_fails(tmp_path: Path, capsys) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    samples = ds / "samples.jsonl"
    samples.write_text(json.dumps({"id": "a", "status": "accepted", "text": "t"}) + "\n")
    before = samples.read_bytes()
    assert main(["review", str(ds), "--approve", "NO-SUCH-ID"]) == 1
    assert main(["review", str(ds), "--reject", "a"]) == 1  # already decided
    assert "NO-SUCH-ID" in capsys.readouterr().err and samples.read_bytes() == before


def test_help_is_for_users() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "Subcommands live in" not in text and "Detect covert toxicity" in text and "exit 0" in text
    train_help = build_parser()._subparsers._group_actions[0].choices["train"]  # type: ignore[union-attr]
    grpo = train_help._subparsers._group_actions[0].choices["grpo"]
    described = [a for a in grpo._actions if a.option_strings and a.help and not a.help.startswith(" (default")]
    undescribed = [
        a.option_strings[0]
        for a in grpo._actions
        if a.option_strings and a.option_strings[0] != "-h" and (not a.help or a.help.startswith(" ("))
    ]
    assert len(described) > 40 and undescribed == []


def test_generate_refuses_a_checkpoints_file_that_is_not_a_database_once(tmp_path, capsys) -> None:
    out = tmp_path / "ds"
    out.mkdir()
    (out / "checkpoints.sqlite").write_bytes(b"this is not sqlite" * 100)
    assert (
        main(
            [
                "generate",
                "--category",
                "drugs",
                "--n",
                "3",
                "--out",
                str(out),
                "--model",
                "scripted:none.json",
                # a local folder: the default Hub generator is refused offline before the folder is looked at
                "--generator",
                f"diffusers:{tmp_path / 'tiny-sd'}",
                "--cache",
                "off",
                "--no-web-search",
                "--no-progress",
            ]
        )
        == 1
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("unveil generate: error:")]
    assert len(errors) == 1, errors
    assert re.search("checkpoints file .*checkpoints.sqlite.* not a readable SQLite database", errors[0])
    assert not (out / "samples.jsonl").exists() or (out / "samples.jsonl").read_text() == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["detect", "--concurrency", "0"],
        ["refine", "a cat", "--concurrency", "-2"],
        ["generate", "--category", "drugs", "--n", "1", "--out", "OUT", "--concurrency", "0"],
        ["evaluate", "ipr", "--prompts", "p.jsonl", "--concurrency", "0"],
    ],
)
def test_nonsense_concurrency_is_refused_before_any_work(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 1 and "must be at least 1" in capsys.readouterr().err


def _failing_command(exc: BaseException):
    def register(sub) -> None:
        p = sub.add_parser("boom")
        p.set_defaults(func=lambda args: (_ for _ in ()).throw(exc))

    return register


@pytest.mark.parametrize(
    ("exc", "one_line"),
    [
        (__import__("graphs.context", fromlist=["ContextError"]).ContextError("l_max: must be at least 1"), True),
        (__import__("tools.errors", fromlist=["MissingFileError"]).MissingFileError("--input 'pairs.jsonl'"), True),
        # a bare ValueError or OSError was not raised on purpose for the user's input: a bug, with its traceback
        (FileNotFoundError("no such file: pairs.jsonl"), False),
        (ValueError("math domain error"), False),
        (KeyError("finding"), False),
        (AttributeError("'NoneType' object has no attribute 'mtc'"), False),
    ],
)
def test_a_users_mistake_is_one_line_and_a_bug_shows_its_traceback(exc, one_line, monkeypatch, capsys) -> None:
    import unveil.cli as cli

    real = cli.build_parser

    def build_parser():
        parser = real()
        sub = next(a for a in parser._actions if a.dest == "command")
        _failing_command(exc)(sub)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_parser)
    assert cli.main(["boom"]) == (1 if one_line else BUG_EXIT)
    err = capsys.readouterr().err
    assert ("Traceback" in err) is not one_line
    assert ("this is a bug" in err) is not one_line
    assert type(exc).__name__ in err
