"""The IPR graph on the real tiny Stable Diffusion pipeline (through `get_generator`) with a scripted refiner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.gateway import Gateway, GatewaySettings, get_gateway, set_gateway
from agents.providers.scripted import ScriptExhaustedError
from agents.refiner import RefinerAnswerError
from graphs.ipr import IPRContext, IPRInputError, graph, step_seed
from tools.datafiles import Q16_EMBEDDINGS, data_file
from tools.t2i.base import GenerationRequest
from tools.t2i.errors import PromptError
from tools.t2i.registry import get_generator

SIZE, STEPS = 32, 2


@pytest.fixture(scope="module")
def sd_folder(tmp_path_factory) -> str:
    from tests.tiny import build_tiny_sd

    return build_tiny_sd(tmp_path_factory.mktemp("tiny-sd"))


@pytest.fixture
def gateway():
    previous = get_gateway()
    gw = Gateway(GatewaySettings(cache_path=None))
    set_gateway(gw)
    yield gw
    set_gateway(previous)


def _script(tmp_path: Path, answers: dict) -> str:
    path = tmp_path / "refiner.json"
    path.write_text(json.dumps(answers))
    return f"scripted:{path}"


def _ctx(tmp_path: Path, sd_folder: str, refiner: str, **kw) -> IPRContext:
    return IPRContext(
        model=refiner,
        generator=f"diffusers:{sd_folder}",
        image_store=str(tmp_path / "store"),
        width=SIZE,
        height=SIZE,
        steps=STEPS,
        **kw,
    )


async def _direct(ctx: IPRContext, prompt: str, seed: int = 0) -> str:
    """The image the pipeline renders for `prompt` outside the graph (same settings and seed)."""
    gen = get_generator(ctx.generator, store=ctx.image_store)
    ids = await gen.generate(
        GenerationRequest(prompt=prompt, seed=seed, width=SIZE, height=SIZE, steps=STEPS, guidance=ctx.guidance)
    )
    return ids[0]


async def test_keep_at_step_zero_leaves_the_image_unchanged(tmp_path, sd_folder, gateway) -> None:
    ctx = _ctx(tmp_path, sd_folder, _script(tmp_path, {"refiner": ["<think>fine</think><answer>keep</answer>"]}))
    out = await graph.ainvoke({"prompt": "a cat on a sofa"}, context=ctx)
    assert out["keep_step"] == 0 and out["stop_reason"] == "keep" and out["refinements"] == 0
    assert len(out["trajectory"]) == 1
    assert out["final_prompt"] == "a cat on a sofa"
    assert out["final_image_id"] == out["trajectory"][0]["image_ids"][0]
    # The final image is exactly what the pipeline makes from p0 (nothing regenerated or altered).
    assert out["final_image_id"] == await _direct(ctx, "a cat on a sofa")
    assert Path(out["final_image_path"]).is_file()
    assert gateway.usage["by_role"]["refiner"]["calls"] == 1


async def test_refined_prompt_reaches_the_generator(tmp_path, sd_folder, gateway) -> None:
    refined = "a cat holding a toy water pistol"
    ctx = _ctx(
        tmp_path,
        sd_folder,
        _script(tmp_path, {"refiner.0": [f"<reason>a gun</reason><answer>{refined}</answer>"], "refiner.1": ["Keep."]}),
    )
    out = await graph.ainvoke({"prompt": "a cat holding a gun", "id": "s1"}, context=ctx)
    steps = out["trajectory"]
    assert [s["prompt"] for s in steps] == ["a cat holding a gun", refined]
    assert [s["action"] for s in steps] == ["refine", "keep"]
    assert steps[0]["reason"] == "a gun"
    assert out["keep_step"] == 1 and out["final_prompt"] == refined
    # Step 1's image is the pipeline's rendering of the refined prompt with step 1's fresh seed (the paper samples a
    # new image each step), and differs from step 0.
    assert [s["seed"] for s in steps] == [0, step_seed(0, 1)]
    assert steps[1]["image_ids"][0] == await _direct(ctx, refined, seed=step_seed(0, 1))
    assert steps[1]["image_ids"][0] != steps[0]["image_ids"][0]
    assert out["final_image_id"] == steps[1]["image_ids"][0]
    assert out["usage"]["by_role"]["refiner"]["calls"] == 2


@pytest.mark.parametrize("t_max", [0, 2])
async def test_t_max_bounds_the_loop(tmp_path, sd_folder, gateway, t_max) -> None:
    # The refiner never keeps: it would go on for ever without the bound.
    answers = {"refiner": [f"<answer>a safe landscape, version {k}</answer>" for k in range(10)]}
    ctx = _ctx(tmp_path, sd_folder, _script(tmp_path, answers), t_max=t_max)
    out = await graph.ainvoke({"prompt": "an unsafe scene"}, context=ctx)
    assert len(out["trajectory"]) == t_max + 1
    assert out["refinements"] == t_max
    assert out["stop_reason"] == "t_max" and out["keep_step"] is None
    assert gateway.usage["by_role"].get("refiner", {}).get("calls", 0) == t_max
    assert out["final_image_id"] == out["trajectory"][-1]["image_ids"][0]
    assert out["trajectory"][-1]["action"] is None  # the last image is not shown to the refiner


async def test_history_setting_shows_the_tried_prompts(tmp_path, sd_folder, gateway) -> None:
    # The rule answers keep only when the request lists the tried prompts.
    answers = {"refiner": [{"when": "tried_prompts", "then": "keep"}, "<answer>a gentle scene</answer>"]}
    ctx = _ctx(tmp_path, sd_folder, _script(tmp_path, answers), history=True)
    out = await graph.ainvoke({"prompt": "a violent scene"}, context=ctx)
    assert [s["action"] for s in out["trajectory"]] == ["refine", "keep"]
    # Myopic (the default): the second request has no history, so the script's ordered answers run out.
    set_gateway(Gateway(GatewaySettings(cache_path=None)))
    myopic = _ctx(tmp_path, sd_folder, _script(tmp_path, answers))
    with pytest.raises(Exception) as info:
        await graph.ainvoke({"prompt": "a violent scene"}, context=myopic)
    assert isinstance(info.value, ScriptExhaustedError) or "no answer left" in str(info.value)


async def test_unchanged_prompt_stops_with_fixed_seeds(tmp_path, sd_folder, gateway) -> None:
    ctx = _ctx(tmp_path, sd_folder, _script(tmp_path, {"refiner": ["Refined prompt: A Red Apple"]}), seed_mode="fixed")
    out = await graph.ainvoke({"prompt": "a red apple"}, context=ctx)
    assert out["stop_reason"] == "unchanged" and len(out["trajectory"]) == 1


async def test_fresh_seeds_sample_a_new_image_each_step(tmp_path, sd_folder, gateway) -> None:
    # The paper's loop (the default): the same prompt again is a new sample, so the run goes on to t_max.
    answers = {"refiner": ["Refined prompt: A Red Apple"] * 2}
    ctx = _ctx(tmp_path, sd_folder, _script(tmp_path, answers), t_max=2, seed=3)
    out = await graph.ainvoke({"prompt": "a red apple"}, context=ctx)
    steps = out["trajectory"]
    assert out["stop_reason"] == "t_max" and len(steps) == 3
    seeds = [s["seed"] for s in steps]
    assert seeds == [3, step_seed(3, 1), step_seed(3, 2)] and len(set(seeds)) == 3
    assert len({s["image_ids"][0] for s in steps}) == 3  # three different images of (nearly) the same prompt
    assert steps[2]["image_ids"][0] == await _direct(ctx, "A Red Apple", seed=step_seed(3, 2))
    # Reproducible and resumable: a rerun gives the same seeds and images.
    set_gateway(Gateway(GatewaySettings(cache_path=None)))
    again = await graph.ainvoke(
        {"prompt": "a red apple"}, context=_ctx(tmp_path, sd_folder, _script(tmp_path, answers), t_max=2, seed=3)
    )
    assert [s["image_ids"] for s in again["trajectory"]] == [s["image_ids"] for s in steps]


def test_step_seeds_are_derived_deterministically() -> None:
    assert step_seed(11, 0) == 11 and step_seed(11, 2, "fixed") == 11
    assert step_seed(11, 1) == step_seed(11, 1) != step_seed(11, 2)
    # unrelated to the neighbouring base seeds the other trajectories of a prompt start from
    assert {step_seed(11, t) for t in (1, 2, 3)}.isdisjoint(range(0, 100))
    assert all(0 <= step_seed(b, t) < 2**31 for b in range(5) for t in range(1, 4))
    with pytest.raises(ValueError, match="seed_mode"):
        step_seed(1, 1, "random")


async def test_garbage_refiner_answer_fails_or_stops_as_configured(tmp_path, sd_folder, gateway) -> None:
    script = _script(tmp_path, {"refiner": [{"when": "p0", "then": "\ufffd\ufffd ##"}]})
    with pytest.raises(RefinerAnswerError, match="step 0"):
        await graph.ainvoke({"prompt": "p0 prompt"}, context=_ctx(tmp_path, sd_folder, script))
    stop = _ctx(tmp_path, sd_folder, script, on_refiner_error="stop")
    out = await graph.ainvoke({"prompt": "p0 prompt"}, context=stop)
    assert out["stop_reason"] == "refiner_error" and out["keep_step"] is None
    assert "readable" in out["trajectory"][0]["error"] and out["trajectory"][0]["refiner_answer"] == "\ufffd\ufffd ##"


async def test_per_prompt_seed_and_multiple_images(tmp_path, sd_folder, gateway) -> None:
    ctx = _ctx(tmp_path, sd_folder, _script(tmp_path, {"refiner": [{"when": "dog", "then": "keep"}]}), num_images=2)
    out = await graph.ainvoke({"prompt": "a dog", "seed": 7}, context=ctx)
    ids = out["final_image_ids"]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert ids[0] == await _direct(ctx, "a dog", seed=7)


async def test_bad_inputs_give_clear_errors(tmp_path, sd_folder, gateway) -> None:
    ctx = _ctx(tmp_path, sd_folder, _script(tmp_path, {"refiner": ["keep"]}))
    with pytest.raises(IPRInputError, match="empty"):
        await graph.ainvoke({"prompt": "   "}, context=ctx)
    with pytest.raises(IPRInputError, match="max_prompt_chars"):
        await graph.ainvoke({"prompt": "x" * 3000}, context=ctx)
    # Over the text encoder's 77-token limit: the default policy cuts the prompt as diffusers and the papers do;
    # long_prompts="error" makes the generator refuse it before rendering.
    out = await graph.ainvoke({"prompt": "a very long prompt " * 30}, context=ctx)
    assert out["stop_reason"] == "keep" and out["final_prompt"].startswith("a very long prompt")
    strict = _ctx(tmp_path, sd_folder, _script(tmp_path, {"refiner": ["keep"]}), long_prompts="error")
    with pytest.raises(PromptError, match="77"):
        await graph.ainvoke({"prompt": "a very long prompt " * 30}, context=strict)
    with pytest.raises(ValueError, match="long_prompts"):  # refused with the setting's name when the context is built
        _ctx(tmp_path, sd_folder, "scripted:x.json", long_prompts="cut")
    with pytest.raises(ValueError, match="t_max"):
        _ctx(tmp_path, sd_folder, "scripted:x.json", t_max=-1)
    with pytest.raises(ValueError, match="script file.*x.json"):
        await graph.ainvoke({"prompt": "ok"}, context=_ctx(tmp_path, sd_folder, "scripted:x.json"))
    missing = IPRContext(
        model=_script(tmp_path, {"refiner": ["keep"]}),
        generator=f"diffusers:{tmp_path / 'no-such-model'}",
        image_store=str(tmp_path / "store"),
        width=SIZE,
        height=SIZE,
        steps=STEPS,
    )
    with pytest.raises(Exception, match="no-such-model"):
        await graph.ainvoke({"prompt": "a cat"}, context=missing)
    bad_refiner = _ctx(tmp_path, sd_folder, f"hf:{tmp_path / 'no-such-vlm'}")
    with pytest.raises(Exception, match="no-such-vlm"):
        await graph.ainvoke({"prompt": "a cat"}, context=bad_refiner)


Q16_FILE = data_file(Q16_EMBEDDINGS)  # the repository's copy of Q16's embeddings (data/README.md)


async def test_every_step_is_scored_when_asked(tmp_path, sd_folder, gateway) -> None:
    from tests.tiny import build_tiny_clip
    from tools.scorers import get_clip_scorer, get_q16

    clip = build_tiny_clip(tmp_path / "clip")
    answers = {"refiner": ["<answer>a calm garden</answer>", "keep"]}
    ctx = _ctx(
        tmp_path,
        sd_folder,
        _script(tmp_path, answers),
        score=True,
        scorers=["q16", "nudenet", "clip"],
        q16_embeddings=str(Q16_FILE),
        q16_clip_model=clip,
        clip_model=clip,
        device="cpu",
    )
    out = await graph.ainvoke({"prompt": "a gory battle"}, context=ctx)
    assert len(out["trajectory"]) == 2
    store_root = tmp_path / "store"
    for step in out["trajectory"]:
        (row,) = step["scores"]
        assert set(row) == {"q16", "q16_flag", "nudenet_flag", "nudenet_labels", "inappropriate", "clip"}
        assert 0.0 <= row["q16"] <= 1.0 and row["q16_flag"] == (row["q16"] > 0.5)
        assert row["inappropriate"] == (row["q16_flag"] or row["nudenet_flag"])
        # The same numbers as calling the scorers directly, with the ORIGINAL prompt for alignment.
        from tools.image_store import get_image_store

        store = get_image_store(store_root)
        q16 = get_q16(prompts_path=str(Q16_FILE), clip_model=clip, device="cpu")
        (q,) = await q16.score(step["image_ids"], store=store)
        (c,) = await get_clip_scorer(model=clip, device="cpu").score(step["image_ids"], ["a gory battle"], store=store)
        assert row["q16"] == pytest.approx(q.p_inappropriate) and row["clip"] == pytest.approx(c)
    with pytest.raises(ValueError, match="scorers.*q17"):
        _ctx(tmp_path, sd_folder, "scripted:x.json", score=True, scorers=["q17"])


def test_cli_single_prompt_and_resumable_batch(tmp_path, sd_folder, gateway, capsys) -> None:
    from unveil.cli import main

    # The myopic refiner sees p0 at every step, so the step's call role picks the answer (rules match words
    # absent from the refiner's instructions).
    script = _script(
        tmp_path,
        {
            "refiner.0": [
                {"when": "grenade", "then": "<answer>a toy water pistol</answer>"},
                {"when": "kitten", "then": "[keep]"},
            ],
            "refiner.1": [{"when": "grenade", "then": "keep"}],
        },
    )
    common = [
        "--refiner",
        script,
        "--generator",
        f"diffusers:{sd_folder}",
        "--size",
        str(SIZE),
        "--steps",
        str(STEPS),
        "--image-store",
        str(tmp_path / "store"),
        "--cache",
        "off",
        "--t-max",
        "2",
    ]
    assert main(["refine", "a grenade", "--json", *common]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert [s["prompt"] for s in rec["trajectory"]] == ["a grenade", "a toy water pistol"]
    assert rec["keep_step"] == 1 and rec["models"]["refiner"] == script and rec["settings"]["t_max"] == 2
    assert main(["refine", "a grenade", *common]) == 0
    text = capsys.readouterr().out
    assert "step 1: a toy water pistol" in text and "stop: keep at step 1" in text

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(
            [
                json.dumps({"id": "a", "prompt": "a kitten", "evaluation_seed": 5, "category": "shocking"}),
                json.dumps({"id": "b", "prompt": ""}),
                "not json",
            ]
        )
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    assert (
        main(["refine", "--input", str(prompts), "--output", str(out), "--no-progress", *common]) == 2
    )  # some samples failed
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["a"]["status"] == "ok" and rows["a"]["keep_step"] == 0 and rows["a"]["settings"]["seed"] == 5
    assert rows["a"]["input"] == {"evaluation_seed": 5, "category": "shocking"}
    assert rows["b"]["status"] == "failed" and "empty" in rows["b"]["error"]
    assert rows["line-3"]["status"] == "failed" and "not valid JSON" in rows["line-3"]["error"]
    # Rerun: done ids are skipped, nothing is appended.
    before = out.read_text()
    main(["refine", "--input", str(prompts), "--output", str(out), "--no-progress", *common])
    assert out.read_text() == before


async def test_refined_prompt_over_the_token_limit(tmp_path, sd_folder, gateway) -> None:
    long_prompt = "a quiet garden with flowers " * 20  # well over CLIP's 77 tokens
    script = _script(tmp_path, {"refiner": [{"when": "zeppelin", "then": f"<answer>{long_prompt}</answer>"}]})
    with pytest.raises(PromptError, match="step 1"):
        await graph.ainvoke({"prompt": "a zeppelin"}, context=_ctx(tmp_path, sd_folder, script, long_prompts="error"))
    stop = _ctx(tmp_path, sd_folder, script, on_refiner_error="stop", long_prompts="error")
    out = await graph.ainvoke({"prompt": "a zeppelin"}, context=stop)
    assert out["stop_reason"] == "refiner_error" and len(out["trajectory"]) == 1
    assert "refused" in out["trajectory"][0]["error"] and out["final_prompt"] == "a zeppelin"


async def test_local_hf_vlm_refiner_sees_the_generated_image(tmp_path, sd_folder, gateway) -> None:
    """The whole path with an in-process VLM: the tiny Qwen2.5-VL reads the stored image as vision tokens."""
    from tests.tiny_vlm import build_tiny_qwen_vl

    qwen = build_tiny_qwen_vl(tmp_path / "qwen")
    ctx = _ctx(tmp_path, sd_folder, f"hf:{qwen}?max_new_tokens=8", t_max=1, on_refiner_error="stop")
    out = await graph.ainvoke({"prompt": "a lighthouse at night"}, context=ctx)
    first = out["trajectory"][0]
    # Random weights answer nonsense: either it parses (refine) or the step records a clear parse error.
    assert isinstance(first["refiner_answer"], str)
    assert first["action"] in ("keep", "refine") or "refiner" in first["error"]
    used = out["usage"]["by_role"]["refiner"]
    # 32x32 images are resized to the 56x56 budget: 4 merged vision tokens plus the text of the prompt.
    assert used["calls"] >= 1 and used["input_tokens"] > 100 and used["output_tokens"] >= 1


async def test_text_only_refiner_is_refused_before_any_rendering(tmp_path, gateway) -> None:
    # The generator folder does not exist: had the graph rendered first, the error would name the model instead.
    ctx = IPRContext(
        model="llamacpp:smollm2",
        generator=f"diffusers:{tmp_path / 'no-such-sd'}",
        image_store=str(tmp_path / "store"),
        width=SIZE,
        height=SIZE,
        steps=STEPS,
    )
    with pytest.raises(IPRInputError, match="cannot see images"):
        await graph.ainvoke({"prompt": "a cat"}, context=ctx)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.png"))


def _refine_score_args(tmp_path: Path, sd_folder: str, clip: str, prompts: Path, out: Path) -> list[str]:
    """`unveil refine --input ... --score` as a user types it, with the default scorers (Q16, NudeNet, CLIP) and
    no Q16 embeddings flag; only the models are tiny (the CLIPs, the generator, a scripted refiner)."""
    return [
        "refine",
        "--input",
        str(prompts),
        "--output",
        str(out),
        "--no-progress",
        "--score",
        "--refiner",
        _script(tmp_path, {"refiner": [{"when": "", "then": "keep"}]}),
        "--generator",
        f"diffusers:{sd_folder}",
        "--size",
        str(SIZE),
        "--steps",
        str(STEPS),
        "--image-store",
        str(tmp_path / "store"),
        "--cache",
        "off",
        "--t-max",
        "1",
        "--q16-clip-model",
        clip,
        "--clip-model",
        clip,
    ]


def _prompts(tmp_path: Path) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in [("a", "a cat"), ("b", "a dog")]))
    return prompts


def _rendered(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "store").rglob("*.png"))


def test_refine_score_with_the_defaults_scores_every_step(tmp_path, sd_folder, gateway) -> None:
    from tests.tiny import build_tiny_clip
    from unveil.cli import main

    clip = build_tiny_clip(tmp_path / "clip")
    out = tmp_path / "out.jsonl"
    # No --q16-embeddings and no UNVEIL_Q16_PROMPTS: the repository's data/q16/vit-l-14.npy, as `evaluate ipr`.
    assert main(_refine_score_args(tmp_path, sd_folder, clip, _prompts(tmp_path), out)) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for rec in rows:
        (scores,) = rec["trajectory"][0]["scores"]
        assert 0.0 <= scores["q16"] <= 1.0 and {"nudenet_flag", "inappropriate", "clip"} <= set(scores)


def test_refine_score_refuses_a_missing_q16_file_before_rendering_naming_the_flag(
    tmp_path, sd_folder, gateway, monkeypatch, capsys
) -> None:
    import tools.scorers.q16 as q16
    from unveil.cli import main

    args = _refine_score_args(tmp_path, sd_folder, "unused-clip", _prompts(tmp_path), tmp_path / "out.jsonl")
    monkeypatch.setattr(q16, "DATA_DIR", tmp_path / "a-copy-without-data")  # Unveil installed without its data/
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "--q16-embeddings" in err and "prompts_path" not in err
    assert main([*args, "--q16-embeddings", str(tmp_path / "nope.npy")]) == 1
    err = capsys.readouterr().err
    assert "--q16-embeddings" in err and "nope.npy" in err
    assert not (tmp_path / "out.jsonl").exists() and _rendered(tmp_path) == []  # nothing rendered, nothing written


def test_an_output_whose_records_all_failed_on_configuration_is_not_pinned_to_those_settings(
    tmp_path, sd_folder, gateway, capsys
) -> None:
    import numpy as np

    from tests.tiny import build_tiny_clip
    from unveil.cli import main

    clip = build_tiny_clip(tmp_path / "clip")
    out = tmp_path / "out.jsonl"
    args = _refine_score_args(tmp_path, sd_folder, clip, _prompts(tmp_path), out)
    # Embeddings of the wrong width for the CLIP: a (2, D) array passes the check before rendering; the mismatch
    # shows once the CLIP is loaded, after the first render, and fails every prompt.
    np.save(tmp_path / "q16-512.npy", np.ones((2, 512), dtype="float32"))
    assert main([*args, "--q16-embeddings", str(tmp_path / "q16-512.npy")]) == 2
    failed = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["status"] for r in failed} == {"failed"} and all("--q16-clip-model" in r["error"] for r in failed)
    assert {r["error_kind"] for r in failed} == {"configuration"}
    # The rerun with the fix (the default file) is not refused as a settings change, and runs every prompt.
    assert main(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], r["status"]) for r in rows) == [("a", "ok"), ("b", "ok")]
    # An output with any good record keeps its settings: a third run with the bad file is refused.
    assert main([*args, "--q16-embeddings", str(tmp_path / "q16-512.npy")]) == 1
    assert "other settings" in capsys.readouterr().err
