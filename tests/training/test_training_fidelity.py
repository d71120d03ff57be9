"""The IPR paper's protocol, pinned: the labeller prompt of Appendix B, its teacher, the reward scale, the RL
prompts and the image pool (docs/training.md, "Fidelity")."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from agents.labeller import LABELLER_PROMPT, PAPER_TEACHER
from tools.datafiles import RL_PROMPTS as RL_PROMPTS_FILE
from tools.datafiles import data_file
from training.build_data import BuildDataSettings
from training.config import GRPOSettings, build_settings, read_config_file
from training.reward import SCALES, RewardSettings, outcome_reward, refinement_reward

ROOT = Path(__file__).resolve().parents[2]
RL_PROMPTS = data_file(RL_PROMPTS_FILE)  # the repository's copy (data/README.md)


def test_the_labeller_prompt_carries_the_papers_calibration() -> None:
    text = " ".join(LABELLER_PROMPT.split())
    assert "zero tolerance" in text
    assert "about 70% less often than you might initially think appropriate" in text
    assert "If, and only if, both modalities are 100% safe, decide `keep` and go straight to STEP 5" in text
    # STEP 2's list, as the paper gives it
    assert "violence, weapons, harmful stereotypes, inappropriate content, or disturbing imagery" in text
    assert [f"STEP {i}:" in text for i in range(1, 6)] == [True] * 5
    assert PAPER_TEACHER == "openai:gpt-4.1"


def test_the_labeller_refuses_the_demo_model_unless_forced() -> None:
    with pytest.raises(ValueError, match="GPT-4.1"):
        BuildDataSettings(labeller="llamacpp:smollm2")
    assert BuildDataSettings(labeller="llamacpp:smollm2", allow_demo_labeller=True).allow_demo_labeller
    assert BuildDataSettings(labeller="openai:gpt-4.1").labeller == "openai:gpt-4.1"


def test_one_reward_scale_default_everywhere() -> None:
    shipped = tomllib.loads((ROOT / "training" / "configs" / "grpo.toml").read_text(encoding="utf-8"))
    assert RewardSettings().scale == "paper"
    assert shipped["reward"].get("scale", "paper") == RewardSettings().scale
    assert (
        build_settings(GRPOSettings, read_config_file(ROOT / "training" / "configs" / "grpo.toml")).reward.scale
        == "paper"
    )


@pytest.mark.parametrize("scale,toxic_weight", [("paper", 1.0), ("authors", 5.0)])
def test_both_reward_scales_are_exact(scale: str, toxic_weight: float) -> None:
    s = RewardSettings(scale=scale, beta=1.0)  # type: ignore[arg-type]
    assert SCALES[scale].toxic_weight == toxic_weight
    assert outcome_reward(0.2, 0.3, s) == pytest.approx(toxic_weight * 0.8 + 0.3)
    from training.answers import parse_decision

    keep, refine = parse_decision("keep"), parse_decision("a quiet garden")
    assert refinement_reward(keep, 1.0, [], s) == pytest.approx(0.3)  # alpha, whatever the scale
    assert refinement_reward(refine, 1.0, [1.5, 2.5], s) == pytest.approx(1.0)


def test_grpo_defaults_follow_the_paper_the_pool_is_the_authors_option() -> None:
    g = GRPOSettings()
    assert g.image_pool is False  # the paper: images of the constructed dataset; the growing pool is the authors' code
    assert (g.learning_rate, g.max_steps, g.reward.keep_alpha) == (1.9e-5, 50, 0.3)
    shipped = tomllib.loads((ROOT / "training" / "configs" / "grpo.toml").read_text(encoding="utf-8"))
    assert shipped.get("image_pool", False) is False
    # section 4.3: the current images come from the constructed dataset (build-data records of the RL set)
    assert shipped["start_images"] == "dataset" and Path(shipped["data"]).suffix == ".jsonl"


def test_the_papers_rl_set_loads_as_842_prompts() -> None:
    from training.data import load_prompts

    prompts = load_prompts(RL_PROMPTS)
    assert len(prompts) == 842 and prompts[0]["prompt"] == "Emma Watson eating too much spaghetti"
    assert "output" not in prompts[0]  # POSI's "Place Holder" answers are not training targets


def test_grpo_objective_is_the_papers_and_the_authors_temperature() -> None:
    from trl import GRPOConfig

    g = GRPOSettings()
    # GRPO (Shao et al., 2024): per-answer length normalisation, group-standardised advantages; the authors' TRL
    # sampled at 0.9. TRL's current defaults differ, so each is set explicitly.
    assert (g.loss_type, g.scale_rewards, g.temperature) == ("grpo", "group", 0.9)
    assert GRPOConfig.__dataclass_fields__["loss_type"].default != g.loss_type
    shipped = build_settings(GRPOSettings, read_config_file(ROOT / "training" / "configs" / "grpo.toml"))
    assert (shipped.loss_type, shipped.scale_rewards, shipped.temperature) == ("grpo", "group", 0.9)
    assert build_settings(GRPOSettings, {}, {"loss_type": "dapo"}).loss_type == "dapo"  # the other readings


def test_start_images_dataset_refuses_a_record_without_its_own_image(tmp_path: Path) -> None:
    from tools.image_store import get_image_store
    from training.grpo import grpo_records

    data = tmp_path / "rl.jsonl"
    data.write_text('{"id": "a", "prompt": "a bare prompt"}\n')

    class NoRender:
        def render(self, prompts, seeds):  # the paper's protocol never renders a starting image
            raise AssertionError("rendered")

    store = get_image_store(tmp_path / "store")
    with pytest.raises(ValueError, match="no image of their own.*section 4.3"):
        grpo_records(GRPOSettings(data=str(data), start_images="dataset"), store=store, renderer=NoRender())
    with pytest.raises(ValueError, match="start_images 'bogus'"):
        grpo_records(GRPOSettings(data=str(data), start_images="bogus"), store=store, renderer=NoRender())


def test_the_papers_rl_set_is_checked_on_loading(caplog: pytest.LogCaptureFixture) -> None:
    from training.data import check_rl_prompts, load_prompts

    records = load_prompts(RL_PROMPTS)
    with caplog.at_level("INFO", logger="unveil.training.data"):
        report = check_rl_prompts(RL_PROMPTS, records)
    # The paper's file as published: 842 rows, 833 distinct prompts, 26 of them also SFT prompts (docs/training.md).
    assert (report.rows, report.unique, len(report.sft_overlap)) == (842, 833, 26)
    assert report.rows - report.unique == sum([r["prompt"] for r in records].count(p) - 1 for p in report.duplicates)
    assert "833 distinct prompts" in caplog.text and "26 prompt(s) are also SFT prompts" in caplog.text


def test_a_truncated_copy_of_the_papers_rl_set_is_refused(tmp_path: Path) -> None:
    import json

    from training.config import GRPOSettings
    from training.grpo import grpo_records

    rows = json.loads(RL_PROMPTS.read_text(encoding="utf-8"))
    short = tmp_path / "rl_prompts_842.json"
    short.write_text(json.dumps(rows[:841]), encoding="utf-8")
    # The check runs before any image is rendered: no store or renderer is touched.
    with pytest.raises(ValueError, match=r"rl_prompts_842\.json.*842 prompts, this file has 841"):
        grpo_records(GRPOSettings(data=str(short)), store=None, renderer=None)  # type: ignore[arg-type]
    # A user's own prompt set of another name and size is reported, not refused.
    own = tmp_path / "my_rl.json"
    own.write_text(json.dumps(rows[:5] + rows[:1]), encoding="utf-8")
    from training.data import check_rl_prompts, load_prompts

    report = check_rl_prompts(own, load_prompts(own))
    assert (report.rows, report.unique, report.duplicates) == (6, 5, (rows[0]["input"],))


def test_the_shipped_configs_name_files_that_exist() -> None:
    # Inputs are the repository's data files; paths under runs/ are the outputs of the documented earlier steps.
    for name in ("sft.toml", "grpo.toml"):
        cfg = tomllib.loads((ROOT / "training" / "configs" / name).read_text(encoding="utf-8"))
        for key in ("data", "q16_embeddings", "adapter"):
            value = cfg.get(key)
            if isinstance(value, str) and value and not value.startswith("runs/"):
                assert (ROOT / value).exists(), f"{name}: {key} = {value!r} does not exist in the repository"
    grpo = tomllib.loads((ROOT / "training" / "configs" / "grpo.toml").read_text(encoding="utf-8"))
    assert (ROOT / grpo["q16_embeddings"]).is_file()
