"""Every command that builds a TAG switches and records its reading (prune, roots_mode, depths), and the user's set S
of known toxic pairs (§3.3 Step 2) is checked beside the model-judged pairs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agents.tag import toxic_pairs
from agents.tag.toxic_pairs import ToxicPairsError, load_toxic_pairs, match
from graphs.tag import TagContext
from graphs.tag import graph as tag_graph
from tests.cli_args import refusal

SAMPLE = {"image_description": "white powder in a bag", "text": "text the usual number"}
NONE = {"toxic_pairs": []}


def _child(concept: str, p: float) -> dict:
    return {"concept": concept, "association": "similarity", "probability": p}


def script(**overrides) -> dict:
    """One root a tree; layer 1 gives `cocaine` (0.6) / `flour` (0.4) and `dealer contact` (0.7) / `friend` (0.3)."""
    base = {
        "root_extractor.image": [{"when": "", "then": {"entities": [{"name": "white powder"}]}}],
        "root_extractor.text": [{"when": "", "then": {"entities": [{"name": "usual number"}]}}],
        "root_judge": [{"when": "", "then": {"toxic": False}}],
        "expander.visual": [
            {
                "when": "",
                "then": {
                    "expansions": [{"parent_id": "v0.0", "children": [_child("cocaine", 0.6), _child("flour", 0.4)]}]
                },
            }
        ],
        "expander.textual": [
            {
                "when": "",
                "then": {
                    "expansions": [
                        {"parent_id": "t0.0", "children": [_child("dealer contact", 0.7), _child("friend", 0.3)]}
                    ]
                },
            }
        ],
        "pair_judge": [{"when": "", "then": NONE}],
        "explainer": [{"when": "", "then": {"explanation": "e", "hidden_meaning": "h"}}],
    }
    return {**base, **overrides}


def calls(gateway) -> dict[str, int]:
    (state,) = gateway.shared["scripts"].values()
    return dict(state.calls)


# -- the set S: the file ---------------------------------------------------------------------------------------


def test_jsonl_and_csv_sets_match_case_insensitively_and_normalised(tmp_path: Path) -> None:
    jsonl = tmp_path / "s.jsonl"
    jsonl.write_text(
        json.dumps({"image_concept": "Cocaine", "text_concept": "Dealer  Contact.", "category": "drugs"}) + "\n\n"
    )
    csv_file = tmp_path / "s.csv"
    csv_file.write_text(
        "image_concept,text_concept,category,reason\nweapon component,ｓｅｌｌｉｎｇ parts,weapons,smuggling\n"
    )
    s = load_toxic_pairs(str(jsonl))
    assert match(s, "cocaine", "dealer contact").category == "drugs"  # type: ignore[union-attr]
    assert match(s, " COCAINE ", "dealer contact") is not None
    assert match(s, "dealer contact", "cocaine") is None  # image side and text side are not interchangeable
    c = load_toxic_pairs(str(csv_file))
    assert match(c, "Weapon Component", "selling parts").reason == "smuggling"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"image_concept": "a", "text_concept": "b"}\n', "line 1: category is missing"),
        ('{"image_concept": "a", "text_concept": "b", "category": "c"}\nnot json\n', "line 2: not JSON"),
        ("[1, 2]\n", "line 1: expected an object"),
        ("", "no pair listed"),
    ],
)
def test_an_unusable_set_is_one_error_naming_the_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(content)
    with pytest.raises(ToxicPairsError, match=message) as info:
        load_toxic_pairs(str(path))
    assert str(path) in str(info.value)


def test_a_set_must_be_a_regular_file_under_the_size_cap(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ToxicPairsError, match="file not found"):
        load_toxic_pairs(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ToxicPairsError, match="not a regular file"):
        load_toxic_pairs(str(tmp_path))
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"image_concept": "a", "text_concept": "b", "category": "c"}) + "\n")
    monkeypatch.setattr(toxic_pairs, "MAX_BYTES", 10)
    toxic_pairs._load.cache_clear()
    with pytest.raises(ToxicPairsError, match="over the 10-byte limit"):
        load_toxic_pairs(str(big))


# -- the set S: the graph --------------------------------------------------------------------------------------


def _set(tmp_path: Path, *rows: tuple[str, str]) -> str:
    path = tmp_path / "toxic.jsonl"
    path.write_text(
        "".join(json.dumps({"image_concept": i, "text_concept": t, "category": "drugs"}) + "\n" for i, t in rows)
    )
    return str(path)


async def test_a_pair_in_the_set_is_toxic_without_a_judge_call(gateway, write_script, tmp_path) -> None:
    s = _set(tmp_path, ("COCAINE", "dealer contact"))
    ctx = TagContext(model=write_script(script()), l_max=2, toxic_pairs=s)
    out = await tag_graph.ainvoke(SAMPLE, context=ctx)
    assert out["toxic"] and out["finding"]["source"] == "toxic_pairs"
    assert out["finding"]["category"] == "drugs" and s in out["finding"]["reason"]
    assert out["mtc"] == pytest.approx(1 - 0.6 * 0.7)
    # Of layer 1's eight new pairs the judge is asked only about the two that could outrank the listed one
    # (joint 0.42): a root with a layer-1 node, white powder | dealer contact (0.7) and cocaine | usual number (0.6).
    assert _judged_pairs(gateway) == {"v0.0|t1.0", "v1.0|t0.0"}


def _judged_pairs(gateway) -> set[str]:
    """The pair ids the pair judge was asked about."""
    import re

    (state,) = gateway.shared["scripts"].values()
    bodies = [str(m[-1].content) for role, m in state.requests if role == "pair_judge"]
    return {p for body in bodies for p in re.findall(r'"pair_id": "([^"]+)"', body)}


async def test_the_model_still_judges_pairs_that_could_outrank_a_listed_one(gateway, write_script, tmp_path) -> None:
    # S lists the least probable layer-1 pair (flour | friend, 0.4 * 0.3); the judge confirms cocaine | dealer
    # contact (0.6 * 0.7), which is reported: S adds to the judge, never hides a likelier finding.
    s = _set(tmp_path, ("flour", "friend"))
    hit = {"toxic_pairs": [{"pair_id": "v1.0|t1.0", "category": "drugs", "reason": "sale"}]}
    spec = write_script(script(pair_judge=[{"when": '"v1.0|t1.0"', "then": hit}, {"when": "", "then": NONE}]))
    out = await tag_graph.ainvoke(SAMPLE, context=TagContext(model=spec, l_max=2, toxic_pairs=s))
    assert out["finding"]["source"] == "model" and out["finding"]["visual"]["concept"] == "cocaine"
    judged = _judged_pairs(gateway)
    assert "v1.0|t1.0" in judged and "v1.1|t1.1" not in judged  # the listed pair is not asked about


async def test_a_root_pair_in_the_set_skips_the_root_judge(gateway, write_script, tmp_path) -> None:
    s = _set(tmp_path, ("white powder", "usual number"))
    out = await tag_graph.ainvoke(SAMPLE, context=TagContext(model=write_script(script()), toxic_pairs=s))
    assert out["toxic"] and out["mtc"] == 0.0 and out["finding"]["source"] == "toxic_pairs"
    assert "root_judge" not in calls(gateway) and "expander.visual" not in calls(gateway)


def test_detect_cli_takes_the_set_and_refuses_a_bad_one_before_any_call(write_script, tmp_path, capsys) -> None:
    from unveil.cli import main

    spec = write_script(script())
    args = ["detect", "--model", spec, *_pair_args(), "--l-max", "2", "--json"]
    assert main([*args, "--toxic-pairs", _set(tmp_path, ("cocaine", "dealer contact"))]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finding"]["source"] == "toxic_pairs"
    assert out["tag_reading"]["toxic_pairs"].endswith("toxic.jsonl")
    assert main([*args[:-1], "--toxic-pairs", str(tmp_path / "toxic.jsonl")]) == 0  # the summary names the source
    assert "a pair of the --toxic-pairs set" in capsys.readouterr().out
    assert re.search(
        "toxic pairs .*file not found", refusal([*args, "--toxic-pairs", str(tmp_path / "nope.jsonl")], capsys)
    )


# -- the reading: flags, records, identity ---------------------------------------------------------------------


def test_every_tag_command_takes_the_reading_flags_with_one_help() -> None:
    from unveil.cli import build_parser
    from unveil.commands.common import tag_setting_help

    parser = build_parser()
    base = {
        "detect": ["detect"],
        "evaluate detection": ["evaluate", "detection", "--dataset", "d.jsonl"],
        "generate": ["generate", "--category", "drugs", "--n", "1", "--out", "o", "--mtc-reference", "scripted:x.json"],
    }
    for name, argv in base.items():
        args = parser.parse_args([*argv, "--prune", "per_layer", "--roots-mode", "joint", "--toxic-pairs", "s.csv"])
        assert (args.prune, args.roots_mode, args.toxic_pairs) == ("per_layer", "joint", "s.csv"), name
        with pytest.raises(SystemExit):
            parser.parse_args([*argv, "--prune", "per_tree"])
    assert "§3.2 Step 2" in tag_setting_help("prune") and "per_layer" in tag_setting_help("prune")


def test_generate_refuses_a_reading_without_a_reference() -> None:
    from tools.errors import CommandLineError
    from unveil.cli import build_parser
    from unveil.commands.generate import pair_extras

    required = ["generate", "--category", "drugs", "--n", "1", "--out", "o"]
    args = build_parser().parse_args([*required, "--prune", "per_layer"])
    with pytest.raises(CommandLineError, match="--prune set the MTC reference's TAG: give --mtc-reference"):
        pair_extras(args, TagContext())
    args = build_parser().parse_args([*required, "--mtc-reference", "scripted:x.json", "--prune", "per_layer"])
    assert dict(pair_extras(args, TagContext()).mtc_reading) == {"prune": "per_layer"}


def test_generation_settings_record_the_references_reading() -> None:
    from graphs.ctd import CtdContext
    from runner.ctd import PairExtras, generation_settings

    extras = PairExtras(mtc_reference="scripted:x.json", mtc_reading=(("roots_mode", "joint"),))
    settings = generation_settings(CtdContext(), extras, scene=None, erase_routine=None, seed=0)
    assert settings["mtc_tag_reading"]["prune"] == "per_node" and settings["mtc_tag_reading"]["roots_mode"] == "joint"
    assert "mtc_tag_reading" not in generation_settings(
        CtdContext(), PairExtras(), scene=None, erase_routine=None, seed=0
    )


def test_a_detect_rerun_with_another_reading_is_refused_as_a_settings_change(write_script, tmp_path, capsys) -> None:
    from unveil.cli import main

    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"id": "a", **SAMPLE}) + "\n")
    out = tmp_path / "out.jsonl"
    args = ["detect", "--model", write_script(script()), "--input", str(data), "--output", str(out), "--l-max", "2"]
    assert main([*args, "--no-progress"]) == 0
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["tag_reading"]["prune"] == "per_node" and rec["tag_reading"]["roots_mode"] == "separate"
    sidecar = json.loads((tmp_path / ".out.jsonl.settings").read_text())
    assert sidecar["settings"]["prune"] == "per_node"
    capsys.readouterr()
    assert main([*args, "--no-progress", "--prune", "per_layer"]) == 1
    err = capsys.readouterr().err
    assert "prune" in err and "per_node" in err and "per_layer" in err
    assert len(out.read_text().splitlines()) == 1


def _pair_args() -> list[str]:
    return ["--image-description", SAMPLE["image_description"], "--text", SAMPLE["text"]]


def test_the_demo_model_keeps_the_default_pruning_and_the_callers_reading_wins(capsys) -> None:
    from agents.spec import DEFAULT_SPEC
    from runner.detect import detection_context

    ctx = detection_context("tag", {"model": DEFAULT_SPEC})
    # the embedded 135M model gets a small search (same calls in both prunings at l_max=2) and one root call
    assert (ctx.l_max, ctx.k_max, ctx.children_per_parent) == (2, 2, 2)
    assert ctx.prune == "per_node" and ctx.roots_mode == "joint"
    assert "prune=per_node" in capsys.readouterr().err
    ctx = detection_context("tag", {"model": DEFAULT_SPEC}, reading={"prune": "per_layer", "roots_mode": "separate"})
    assert ctx.prune == "per_layer" and ctx.roots_mode == "separate" and ctx.l_max == 2
    assert detection_context("tag", {"model": DEFAULT_SPEC}, l_max=3).l_max == 3  # explicit depths win


def test_the_demo_depths_are_defaults_the_environment_and_the_command_line_beat(monkeypatch, capsys) -> None:
    # CONTRIBUTING's precedence (command line > environment > default) holds for the demo model too: its smaller
    # search takes the place of the defaults only.
    from agents.spec import DEFAULT_SPEC
    from runner.detect import DEMO_DEPTHS, DEMO_ROOTS_MODE
    from unveil.commands.detect import _context

    parser = __import__("unveil.cli", fromlist=["build_parser"]).build_parser()
    demo = ["detect", "--model", DEFAULT_SPEC]
    ctx = _context(parser.parse_args(demo))  # nothing set: the demo depths
    assert (ctx.l_max, ctx.k_max, ctx.children_per_parent) == tuple(DEMO_DEPTHS.values())
    assert ctx.roots_mode == DEMO_ROOTS_MODE
    monkeypatch.setenv("UNVEIL_ROOTS_MODE", "separate")
    ctx = _context(parser.parse_args(demo))  # the environment wins over the demo's one root call, the depths stay
    assert (ctx.roots_mode, ctx.l_max, ctx.k_max) == ("separate", DEMO_DEPTHS["l_max"], DEMO_DEPTHS["k_max"])
    monkeypatch.setenv("UNVEIL_CHILDREN_PER_PARENT", "4")
    ctx = _context(parser.parse_args(demo))
    assert (ctx.l_max, ctx.children_per_parent) == (DEMO_DEPTHS["l_max"], 4)
    monkeypatch.setenv("UNVEIL_L_MAX", "5")
    ctx = _context(parser.parse_args(demo))  # a depth the user chose turns the demo search off: 5 layers asked
    assert (ctx.l_max, ctx.k_max) == (5, TagContext.__dataclass_fields__["k_max"].default)
    ctx = _context(parser.parse_args([*demo, "--l-max", "3", "--roots-mode", "joint"]))  # the flags win over both
    assert (ctx.l_max, ctx.roots_mode) == (3, "joint")
    assert "demo settings" in capsys.readouterr().err


def test_an_edited_toxic_pair_set_is_a_settings_change(tmp_path) -> None:
    from runner.detect import detection_context, detection_settings

    path = _set(tmp_path, ("cocaine", "dealer contact"))
    ctx = detection_context("tag", {"model": "scripted:x.json"}, reading={"toxic_pairs": path})
    before = detection_settings(ctx, "tag")
    Path(path).write_text(json.dumps({"image_concept": "a", "text_concept": "b", "category": "c"}) + "\n")
    after = detection_settings(ctx, "tag")
    assert before["toxic_pairs"] == after["toxic_pairs"] == path
    assert before["toxic_pairs_sha256"] != after["toxic_pairs_sha256"]


def test_fixed_builder_roles_leave_the_scored_detector_only_the_judging() -> None:
    # docs/tag.md's TA-CTD reading (§5.1: the detectors "receive the TAGs as input"): role models win over each
    # detector given with --detectors, so every detector judges TAGs one builder made.
    from evaluation.detection_configs import DetectionSettings, RunConfig, config_context

    builder = "scripted:builder.json"
    roles = {f"{r}_model": builder for r in ("root_extractor", "expander", "explainer")}
    settings = DetectionSettings(models=["scripted:a.json", "scripted:b.json"], l_max=4, k_max=6, children=3)
    settings.role_models = roles
    for detector in settings.models:
        ctx = config_context(RunConfig("d", detector, "tag", 4), settings)
        assert {ctx.spec_for(r) for r in ("root_extractor", "expander", "explainer")} == {builder}
        assert ctx.spec_for("pair_judge") == detector
