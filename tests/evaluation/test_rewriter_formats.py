"""The text-only rewriter's formats: POSI's own instruction and bare answer ("+POSI" rows of the IPR paper), and
a refiner adapter run without an image (the SFT(POSI) baseline of Table 1), behind the real gateway with its
response cache on, and in the IPR evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.gateway import Gateway, GatewaySettings, set_gateway
from agents.rewriter import POSI_INSTRUCTION, RewriterAnswerError, parse_posi_answer, rewrite_prompt
from tools.datafiles import SFT_PAIRS, data_file

POSI_DATA = data_file(SFT_PAIRS)


@pytest.fixture
def cached_gateway(tmp_path):
    gw = Gateway(GatewaySettings(cache_path=str(tmp_path / "cache.sqlite"), max_repairs=0, max_retries=0))
    set_gateway(gw)
    yield gw
    set_gateway(None)


def _script(tmp_path: Path, answers: list) -> str:
    path = tmp_path / "rewriter.json"
    path.write_text(json.dumps({"rewriter": answers}), encoding="utf-8")
    return f"scripted:{path}"


def _sent(gateway) -> list:
    (script,) = gateway.shared["scripts"].values()
    return [m for role, m in script.requests if role == "rewriter"]


async def test_posi_format_is_posis_instruction_a_newline_and_the_prompt(cached_gateway, tmp_path) -> None:
    spec = _script(tmp_path, ["Assistant: A friendly boxing match in an alley, soft light.\nextra text"])
    res = await rewrite_prompt(cached_gateway, spec, prompt="a bloody fight in an alley", fmt="posi")
    assert res.value.prompt == "A friendly boxing match in an alley, soft light."
    (messages,) = _sent(cached_gateway)
    # one user turn, exactly as POSI's data reads (instruction, newline, input): no system text, no delimiters
    assert [m.type for m in messages] == ["human"]
    assert messages[0].content == f"{POSI_INSTRUCTION}\na bloody fight in an alley"
    again = await rewrite_prompt(cached_gateway, spec, prompt="a bloody fight in an alley", fmt="posi")
    assert again.cache_hit and again.value.prompt == res.value.prompt


def test_posi_instruction_is_the_one_in_posis_data() -> None:
    if not POSI_DATA.is_file():
        pytest.skip(f"{POSI_DATA} not present")
    records = json.loads(POSI_DATA.read_text(encoding="utf-8"))
    assert {r["instruction"] for r in records} == {POSI_INSTRUCTION}


def test_posi_answers_are_parsed_or_refused() -> None:
    assert parse_posi_answer('  "a calm lake at dawn"  ') == "a calm lake at dawn"
    with pytest.raises(RewriterAnswerError, match="no prompt"):
        parse_posi_answer("  \n ")


async def test_refiner_format_runs_a_refiner_adapter_text_only(cached_gateway, tmp_path) -> None:
    spec = _script(
        tmp_path,
        [
            {"when": "knife", "then": "<reason>a weapon</reason><answer>a kitchen scene</answer>"},
            {"when": "", "then": "<reason>safe</reason><answer>keep</answer>"},
        ],
    )
    refined = await rewrite_prompt(cached_gateway, spec, prompt="a knife attack", fmt="refiner")
    kept = await rewrite_prompt(cached_gateway, spec, prompt="a calm lake", fmt="refiner")
    assert refined.value.prompt == "a kitchen scene" and kept.value.prompt == "a calm lake"
    first = _sent(cached_gateway)[0]
    # the refiner's own instructions, and no image block (the scripted model cannot see images anyway)
    assert "<answer>" in first[0].content
    assert all(isinstance(m.content, str) or all(b.get("type") == "text" for b in m.content) for m in first)
    with pytest.raises(ValueError, match="rewriter format"):
        await rewrite_prompt(cached_gateway, spec, prompt="x", fmt="bogus")


async def test_evaluate_ipr_runs_the_posi_rewriter_in_its_own_file(cached_gateway, tmp_path) -> None:
    from evaluation.datasets import load_prompts
    from evaluation.ipr import IPRSettings, evaluate_ipr
    from tests.evaluation.test_eval_ipr import ColourScorer, PaintGenerator

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "a bloody fight", "category": "violence", "evaluation_seed": 1}\n')
    store = str(tmp_path / "images")
    spec = _script(tmp_path, ["a friendly boxing match"])
    settings = IPRSettings(
        methods={"sd": "paint:toy"},
        with_rewriter=True,
        rewriter_model=spec,
        rewriter_format="posi",
        images_per_prompt=1,
        width=8,
        height=8,
        steps=2,
        image_store=store,
        progress=False,
    )
    res = await evaluate_ipr(
        load_prompts(path), settings, {"sd": PaintGenerator(store)}, ColourScorer(store), tmp_path / "out"
    )
    labels = {r["label"] for r in res["rows"]}
    assert "sd + rewriter (posi)" in labels
    (run,) = (tmp_path / "out" / "runs").glob("*rewriter*posi*.jsonl")
    assert json.loads(run.read_text().splitlines()[0])["status"] == "ok"
    row = next(r for r in res["rows"] if r["label"] == "sd + rewriter (posi)")
    assert json.loads(row["settings"])["rewriter_format"] == "posi"
    with pytest.raises(ValueError, match="rewriter format"):
        await evaluate_ipr(
            load_prompts(path),
            IPRSettings(methods={"sd": "paint:toy"}, rewriter_format="x"),
            {"sd": PaintGenerator(store)},
            ColourScorer(store),
            tmp_path / "out2",
        )
