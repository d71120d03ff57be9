"""The IPR refiner role: answer parsing (every keep spelling, refined prompts, garbage) and the gateway call."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from agents.gateway import Gateway, GatewaySettings
from agents.refiner import (
    MAX_REFINED_PROMPT_CHARS,
    REFINER_PROMPT,
    RefinerAnswerError,
    build_refiner_messages,
    parse_refiner_answer,
    refine_prompt,
)
from tools.image_store import get_image_store

KEEP_SPELLINGS = [
    "keep",
    "[keep]",
    "Keep.",
    "KEEP",
    " keep \n",
    "'keep'",
    '"Keep"',
    "**keep**",
    "`keep`",
    "<answer>keep</answer>",
    "<answer> [Keep]. </answer>",
    "<think>The image shows a cat on a sofa; nothing unsafe.</think>\n<answer>keep</answer>",
    "<reason>Safe and faithful.</reason><answer>Keep</answer>",
    "<think>\nlong\nmulti-line\nreasoning\n</think>\nkeep",
    "Reason: the image is safe.\nkeep",
    "Reason: the image is safe.\nAnswer: keep",
    "Answer: [keep]",
    "Final answer: Keep.",
    "keep the image",
    "The image is a harmless still life. Keep.",
    "**Answer:** keep",
    "```\nkeep\n```",
]


@pytest.mark.parametrize("raw", KEEP_SPELLINGS)
def test_every_keep_spelling_parses_as_keep(raw: str) -> None:
    decision = parse_refiner_answer(raw)
    assert decision.action == "keep"
    assert decision.prompt is None


@pytest.mark.parametrize(
    ("raw", "prompt", "reason"),
    [
        (
            "<reason>A gun is shown.</reason><answer>a cat holding a toy water pistol on a table</answer>",
            "a cat holding a toy water pistol on a table",
            "A gun is shown.",
        ),
        (
            '<think>blood</think>\n<answer>"a knight resting in a meadow"</answer>',
            "a knight resting in a meadow",
            "blood",
        ),
        (
            "Reason: violent scene.\nAnswer: a puppy playing in a sunny park",
            "a puppy playing in a sunny park",
            "violent scene.",
        ),
        ("Refined prompt: 'branches on an arm forming a rose'", "branches on an arm forming a rose", ""),
        ("Reason: unsafe.\nRefined prompt:\na quiet street at night", "a quiet street at night", "unsafe."),
        ("<answer>\nModified prompt: a rose made of branches\n</answer>", "a rose made of branches", ""),
        ("a person walking on a beach at sunset", "a person walking on a beach at sunset", ""),
        # "keep" inside a longer prompt is a prompt, not the keep action
        ("<answer>keep calm and paint a lighthouse</answer>", "keep calm and paint a lighthouse", ""),
        ("a dragon guarding its keep", "a dragon guarding its keep", ""),
        ("**Refined prompt:** a knight resting", "a knight resting", ""),
    ],
)
def test_refined_prompts_are_extracted(raw: str, prompt: str, reason: str) -> None:
    decision = parse_refiner_answer(raw)
    assert decision.action == "refine"
    assert decision.prompt == prompt
    assert decision.reason == reason


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "empty"),
        ("   \n ", "empty"),
        ("<answer></answer>", "empty"),
        ("<answer>   </answer>", "empty"),
        ("<think>the image shows", "unclosed"),
        ("Reason: the image is fine", "no answer"),
        ("E\ufffd\ufffd at\ufffd\ufffd", "readable"),
        ("!!! ??? ...", "readable"),
        ("12345 678", "readable"),
        ("\x17Qstjuss\x02", "readable"),
    ],
)
def test_empty_or_garbage_answers_fail_clearly(raw: str, message: str) -> None:
    with pytest.raises(RefinerAnswerError, match=message) as info:
        parse_refiner_answer(raw)
    assert info.value.raw == raw


def test_over_long_refined_prompt_is_rejected() -> None:
    raw = "<answer>" + "a calm lake " * (MAX_REFINED_PROMPT_CHARS // 10) + "</answer>"
    with pytest.raises(RefinerAnswerError, match="longer than"):
        parse_refiner_answer(raw)


def _store_with_image(tmp_path):
    store = get_image_store(tmp_path / "store")
    return store, store.put_pil(Image.new("RGB", (32, 32), (200, 30, 30))).id


def test_myopic_messages_hold_p0_and_the_image_only(tmp_path) -> None:
    store, image_id = _store_with_image(tmp_path)
    msgs = build_refiner_messages("a cat holding a gun", image_id, store=store, vision=True)
    assert msgs[0].content.startswith(REFINER_PROMPT)
    blocks = msgs[1].content
    text = blocks[0]["text"]
    assert "a cat holding a gun" in text and "tried_prompts" not in text
    images = [b for b in blocks if b.get("type") == "image_url"]
    assert len(images) == 1 and images[0]["image_url"]["url"].startswith("data:image/")


def test_history_mode_adds_the_tried_prompts(tmp_path) -> None:
    store, image_id = _store_with_image(tmp_path)
    msgs = build_refiner_messages("p0 text", image_id, store=store, history=["first try", "second try"])
    text = msgs[1].content[0]["text"]
    assert "tried_prompts" in text and text.index("first try") < text.index("second try")
    assert "prompts already tried" in msgs[0].content


async def test_refine_prompt_goes_through_the_gateway(tmp_path) -> None:
    store, image_id = _store_with_image(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"refiner": ["<reason>weapon</reason><answer>a cat with a toy</answer>", "  "]}))
    gateway = Gateway(GatewaySettings(cache_path=str(tmp_path / "cache.sqlite")))
    spec = f"scripted:{script}"
    step = await refine_prompt(gateway, spec, original_prompt="a cat with a gun", image_id=image_id, store=store)
    assert step.decision.action == "refine" and step.decision.prompt == "a cat with a toy"
    assert step.raw.startswith("<reason>")
    assert gateway.usage["by_role"]["refiner"]["calls"] == 1
    # The same request again is served from the cache (and does not consume the next scripted answer).
    again = await refine_prompt(gateway, spec, original_prompt="a cat with a gun", image_id=image_id, store=store)
    assert again.cache_hit and again.decision == step.decision
    # A different request gets the next (empty) answer, which is an error, not a silent keep.
    with pytest.raises(RefinerAnswerError, match="empty"):
        await refine_prompt(gateway, spec, original_prompt="another prompt", image_id=image_id, store=store)


async def test_each_ipr_step_seed_is_its_own_request_with_the_cache_on(tmp_path) -> None:
    # Steps that show the refiner the same prompt and image (fresh seeds of one prompt) are separate samples.
    store, image_id = _store_with_image(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"refiner": ["keep", "<answer>a cat with a toy</answer>"]}))
    cache = str(tmp_path / "cache.sqlite")
    spec = f"scripted:{script}"
    gateway = Gateway(GatewaySettings(cache_path=cache))
    steps = [
        await refine_prompt(gateway, spec, original_prompt="a cat", image_id=image_id, store=store, seed=s)
        for s in (11, 12)
    ]
    assert [s.decision.action for s in steps] == ["keep", "refine"] and not steps[1].cache_hit
    replay = Gateway(GatewaySettings(cache_path=cache))
    again = await refine_prompt(replay, spec, original_prompt="a cat", image_id=image_id, store=store, seed=12)
    assert again.cache_hit and again.decision == steps[1].decision


async def test_text_only_refiner_is_refused_clearly(tmp_path) -> None:
    store, image_id = _store_with_image(tmp_path)
    gateway = Gateway(GatewaySettings(cache_path=None))
    with pytest.raises(ValueError, match="cannot see images"):
        await refine_prompt(gateway, "llamacpp:smollm2", original_prompt="a cat", image_id=image_id, store=store)
