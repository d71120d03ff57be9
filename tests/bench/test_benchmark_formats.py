"""Conformance suite of the benchmark-format registry (`evaluation.datasets.FORMATS`): every registered format loads
a small fixture of its layout into the records the runners need, is recognised by the sniffer, names the file of a
malformed input, and is offered by the CLI; an entry that lacks a piece is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.datasets import FORMATS, detect_format, load_detection
from evaluation.formats import BenchmarkFormat, FormatEntryError, build_registry, fallback
from runner.detect import SAMPLE_FIELDS
from tools.errors import UnveilError

FIX = Path(__file__).parent.parent / "fixtures" / "eval"
# One small file per registered format, in the layout its authors publish. A new format adds its fixture here.
FIXTURES = {
    "ctd": FIX / "ctd" / "ctd_export.jsonl",
    "hateful_memes": FIX / "hateful_memes" / "dev_seen.jsonl",
    "vlsbench": FIX / "vlsbench" / "data.json",
    "mmit": FIX / "mmit" / "all_content.json",
    "siuo": FIX / "siuo" / "siuo_gen.json",
    "mssbench": FIX / "mssbench" / "combine.json",
    "holisafe": FIX / "holisafe" / "holisafe_bench.json",
}
NAMES = list(FORMATS)


def _fixture(name: str) -> Path:
    if name not in FIXTURES:
        pytest.fail(
            f"benchmark format {name!r} has no conformance fixture: add one to FIXTURES in {Path(__file__).name}"
        )
    return FIXTURES[name]


def test_every_registered_format_has_a_fixture() -> None:
    assert not set(FORMATS) ^ set(FIXTURES), "FIXTURES and the registry list different formats"


@pytest.mark.parametrize("name", NAMES)
def test_a_format_loads_its_fixture_into_the_records_the_runners_need(name: str) -> None:
    path = _fixture(name)
    items = load_detection(path, name)
    good = [it for it in items if it.error is None]
    assert good, f"{name}: no usable sample in {path}"
    for it in good:
        rec = it.record
        assert rec is not None and rec["id"] == it.id and isinstance(it.id, str)
        assert set(SAMPLE_FIELDS) <= set(rec)  # what runner.detect.detect_one hands the graphs
        assert isinstance(rec["text"], str) and rec["text"].strip()
        assert rec["image"] is None or Path(rec["image"]).is_file() or "://" in rec["image"]
        assert rec["label"] in (0, 1) and isinstance(rec["category"], str)  # evaluation.detection's columns
        assert rec["source"] == name and Path(rec["base_dir"]) == path.resolve().parent
    for it in items:
        assert it.error is None or path.name in it.error  # a refused record names the file
    toxic = load_detection(path, name, include_benign=False)
    assert [it.id for it in toxic if it.error is None] == [it.id for it in good if it.record and it.record["label"]]


@pytest.mark.parametrize("name", NAMES)
def test_the_sniffer_recognises_each_fixture(name: str) -> None:
    assert detect_format(_fixture(name)) == name
    assert [it.id for it in load_detection(_fixture(name))] == [it.id for it in load_detection(_fixture(name), name)]


@pytest.mark.parametrize("name", NAMES)
def test_a_malformed_file_is_one_error_naming_it(name: str, tmp_path: Path) -> None:
    entry = FORMATS[name]
    missing = tmp_path / f"absent-{name}.{entry.container}"
    with pytest.raises(UnveilError, match=missing.name):
        load_detection(missing, name)
    if entry.container == "json":
        broken = tmp_path / f"broken-{name}.json"
        broken.write_text('[{"id": 1, "text": ', encoding="utf-8")
        for fmt in (name, "auto"):
            with pytest.raises(UnveilError, match=broken.name):
                load_detection(broken, fmt)
    else:
        # A JSONL file is read line by line: each malformed line is one failed item naming the file and line, and
        # the batch goes on with the others.
        broken = tmp_path / f"broken-{name}.jsonl"
        broken.write_text('{"id": "a", "text": \n[1, 2]\n', encoding="utf-8")
        items = load_detection(broken, name)
        assert [it.error is not None and f"{broken.name} line {k}" in it.error for k, it in enumerate(items, 1)] == [
            True,
            True,
        ]


@pytest.mark.parametrize("name", NAMES)
def test_the_cli_offers_every_format_with_its_help_line(name: str) -> None:
    from unveil.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["evaluate", "detection", "--dataset", f"{name}:x.json", "--format", name])
    assert args.format == [name]
    evaluate = parser._subparsers._group_actions[0].choices["evaluate"]
    detection = evaluate._subparsers._group_actions[0].choices["detection"]
    option = next(a for a in detection._actions if "--format" in a.option_strings)
    assert name in option.choices and f"{name}: {FORMATS[name].help}" in option.help


def test_the_cli_refuses_an_unregistered_format(capsys: pytest.CaptureFixture[str]) -> None:
    from unveil.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "detection", "--dataset", "x.json", "--format", "nosuch"])
    assert "nosuch" in capsys.readouterr().err
    with pytest.raises(UnveilError, match="nosuch"):
        load_detection(FIXTURES["ctd"], "nosuch")


def test_an_unknown_format_prefix_of_dataset_is_named_not_read_as_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from unveil.cli import main

    out = tmp_path / "out"
    argv = ["evaluate", "detection", "--methods", "vanilla", "--detectors", "scripted:x.json", "--out", str(out)]
    assert main([*argv, "--dataset", f"bench:{FIXTURES['ctd']}"]) == 1  # the file exists
    err = capsys.readouterr().err
    assert "'bench' is not a format; formats: ctd," in err and "not found" not in err
    assert not out.exists()


def _entry(**change: object) -> dict[str, object]:
    good: dict[str, object] = {
        "name": "newbench",
        "help": "a new benchmark's JSON list",
        "container": "json",
        "sniff": lambda document: False,
        "load": lambda path, base, include_benign: [],
    }
    return {**good, **change}


@pytest.mark.parametrize(
    "piece,words",
    [("name", "name"), ("help", "help line"), ("container", "container"), ("sniff", "sniff rule"), ("load", "loader")],
)
def test_an_entry_missing_a_piece_is_refused_by_name(piece: str, words: str) -> None:
    with pytest.raises(FormatEntryError, match=words) as info:
        BenchmarkFormat(**_entry(**{piece: None}))
    assert piece == "name" or "newbench" in str(info.value)


def test_the_registry_refuses_a_taken_name_and_a_second_fallback() -> None:
    new = BenchmarkFormat(**_entry())
    assert "newbench" in build_registry([*FORMATS.values(), new])
    with pytest.raises(FormatEntryError, match="'ctd'"):
        build_registry([*FORMATS.values(), FORMATS["ctd"]])
    with pytest.raises(FormatEntryError, match="json benchmark formats: 2 fallback"):
        build_registry([*FORMATS.values(), BenchmarkFormat(**_entry(sniff=fallback))])
