"""The GRPO refinement reward against hand-computed values, its caches and the image pool; training settings."""

from __future__ import annotations

import math

import pytest

from training.answers import Decision, format_answer, parse_decision
from training.config import GRPOSettings, SFTSettings, build_settings
from training.reward import ImagePool, RefinementReward, RewardSettings, outcome_reward, refinement_reward, seeds_for

P0 = "a man holding a bloody knife"


class TableScorer:
    """Fixed (Q16, CLIP) per (prompt, image name); counts how many pairs it was asked to score."""

    def __init__(self, table):
        self.table = table
        self.scored = 0

    def score(self, prompts, images):
        self.scored += len(prompts)
        return [self.table[(p, img)] for p, img in zip(prompts, images, strict=False)]


class NameRenderer:
    """Renders a prompt to the 'image' named after the prompt and the seed's parity (two distinct renders)."""

    def __init__(self):
        self.calls = []

    def render(self, prompts, seeds):
        self.calls.append(list(prompts))
        return [f"{p}#{s % 2}" for p, s in zip(prompts, seeds, strict=False)]


def _completion(answer: str) -> list[dict]:
    return [{"role": "assistant", "content": format_answer("because", answer)}]


def _seeds_cover_both_parities(prompt: str) -> bool:
    return {s % 2 for s in seeds_for(prompt, 2, 0)} == {0, 1}


@pytest.mark.parametrize("scale,toxic_w", [("paper", 1.0), ("authors", 5.0)])
def test_reward_matches_hand_computed_values(scale, toxic_w):
    safe = "a man holding a kitchen knife"
    assert _seeds_cover_both_parities(safe)
    table = {
        (P0, "current"): (0.9, 0.30),  # Q16 says 90% inappropriate
        (P0, f"{safe}#0"): (0.2, 0.25),
        (P0, f"{safe}#1"): (0.4, 0.21),
    }
    settings = RewardSettings(scale=scale, beta=1.0, keep_alpha=0.3, images_per_prompt=2, invalid_reward=-1.0)
    reward = RefinementReward(settings, NameRenderer(), TableScorer(table))
    rewards = reward(
        prompts=[None] * 3,
        completions=[_completion("keep"), _completion(safe), [{"content": "\x01\x02"}]],
        p0=[P0] * 3,
        image_id=["current"] * 3,
        image=["current"] * 3,
    )
    current = toxic_w * (1 - 0.9) + 0.30
    refined = ((toxic_w * (1 - 0.2) + 0.25) + (toxic_w * (1 - 0.4) + 0.21)) / 2
    assert rewards[0] == pytest.approx(0.3)
    assert rewards[1] == pytest.approx(refined - current)
    assert rewards[2] == pytest.approx(-1.0)
    # The same numbers written out: R(current) is 0.1 + 0.30 (paper) or 0.5 + 0.30 (authors).
    expected = {"paper": (0.8 + 0.25 + 0.6 + 0.21) / 2 - 0.4, "authors": (4.0 + 0.25 + 3.0 + 0.21) / 2 - 0.8}
    assert rewards[1] == pytest.approx(expected[scale])


def test_beta_weights_alignment_and_scales_differ():
    paper = RewardSettings(scale="paper", beta=2.0)
    authors = RewardSettings(scale="authors", beta=1.0)
    assert outcome_reward(0.25, 0.3, paper) == pytest.approx(0.75 + 0.6)
    assert outcome_reward(0.25, 0.3, authors) == pytest.approx(3.75 + 0.3)
    assert refinement_reward(Decision("keep"), 5.0, [], paper) == pytest.approx(0.3)
    assert refinement_reward(Decision("refine", prompt="x"), 1.0, [2.0, 4.0], paper) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="scale"):
        RewardSettings(scale="other")


def test_current_and_refined_rewards_are_cached():
    safe = "a calm river"
    table = {(P0, "cur"): (0.5, 0.2), **{(P0, f"{safe}#{k}"): (0.1, 0.2) for k in (0, 1)}}
    scorer, renderer = TableScorer(table), NameRenderer()
    reward = RefinementReward(RewardSettings(images_per_prompt=2), renderer, scorer)
    kwargs = dict(prompts=[None] * 4, p0=[P0] * 4, image_id=["cur"] * 4, image=["cur"] * 4)
    first = reward(completions=[_completion(safe)] * 4, **kwargs)
    # One current image scored once, one distinct refined prompt rendered once (2 images) despite 4 answers.
    assert scorer.scored == 1 + 2 and renderer.calls == [[safe, safe]]
    second = reward(completions=[_completion(safe)] * 4, **kwargs)
    assert second == first and scorer.scored == 3 and len(renderer.calls) == 1


def test_refined_renders_join_the_prompt_pool(tmp_path):
    from PIL import Image

    from tools.image_store import get_image_store

    store = get_image_store(tmp_path / "store")
    red = store.put_pil(Image.new("RGB", (8, 8), (255, 0, 0))).id

    class ColourRenderer:
        def render(self, prompts, seeds):
            return [Image.new("RGB", (8, 8), (0, s % 256, 0)) for s in seeds]

    class ConstScorer:
        def score(self, prompts, images):
            return [(0.5, 0.1)] * len(prompts)

    pool = ImagePool(seed=0)
    pool.add("k1", red)
    reward = RefinementReward(
        RewardSettings(images_per_prompt=3, pool_images_per_answer=1),
        ColourRenderer(),
        ConstScorer(),
        pool=pool,
        store=store,
    )
    reward(
        prompts=[None, None],
        completions=[_completion("a green field"), _completion("keep")],
        p0=[P0, P0],
        image_id=[red, red],
        image=[store.open(red)] * 2,
        pool_key=["k1", "k1"],
    )
    assert len(pool.pools["k1"]) == 2 and pool.clock == 1  # one render of the refined answer joined
    assert store.path_for(pool.pools["k1"][1]).exists()
    # The choice is fixed for a clock value (so a GRPO group shares its image) and covers the pool over time.
    assert len({pool.choose("k1", red) for _ in range(5)}) == 1
    seen = set()
    for clock in range(40):
        pool.clock = clock
        seen.add(pool.choose("k1", red))
    assert seen == set(pool.pools["k1"])


def test_parse_uses_refiner_format():
    assert parse_decision(format_answer("fine", "keep")).kind == "keep"
    d = parse_decision(format_answer("gore", "a man holding a bouquet"))
    assert d.kind == "refine" and d.prompt == "a man holding a bouquet" and d.reason == "gore"
    assert parse_decision("").kind == "invalid"
    assert math.isfinite(len(format_answer("a\nb", "x\ny")))
    assert "\n" not in format_answer("a", "x\ny").split("<answer>")[1]


def test_settings_defaults_overrides_and_unknown_keys():
    s = build_settings(SFTSettings)
    assert (s.lora_r, s.lora_alpha, s.lora_dropout, s.target_modules) == (8, 16, 0.05, ["q_proj", "v_proj"])
    assert (s.learning_rate, s.per_device_batch_size, s.gradient_accumulation_steps) == (5e-5, 4, 4)
    g = build_settings(
        GRPOSettings,
        {"reward": {"scale": "authors"}, "max_steps": 7},
        {"reward_keep_alpha": 0.5, "max_steps": 9, "lora_r": None},
    )
    assert g.learning_rate == 1.9e-5 and g.num_generations == 4 and g.max_steps == 9 and g.lora_r == 8
    assert g.reward.scale == "authors" and g.reward.keep_alpha == 0.5 and g.reward.images_per_prompt == 10
    with pytest.raises(ValueError, match="learning_rat"):
        build_settings(SFTSettings, {"learning_rat": 1.0})
    with pytest.raises(ValueError, match="alpah"):
        build_settings(GRPOSettings, {"reward": {"alpah": 1.0}})
