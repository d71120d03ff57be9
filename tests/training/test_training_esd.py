"""`unveil train esd`: ESD-u fine-tuning (Gandikota et al.) on a tiny random-weight SD pipeline."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from tests.tiny import build_tiny_sd
from training.esd import ESDSettings, run_esd, trainable


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_tiny_sd(tmp_path_factory.mktemp("esd-sd") / "sd")


def test_esd_u_trains_every_parameter_but_cross_attention() -> None:
    assert trainable("down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight", "noxattn")
    assert trainable("down_blocks.0.resnets.0.conv1.weight", "noxattn")
    assert not trainable("down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight", "noxattn")
    assert trainable("up_blocks.0.attentions.0.transformer_blocks.0.attn2.to_v.weight", "xattn")
    assert ESDSettings().negative_guidance == 1.0 and ESDSettings().train_method == "noxattn"
    # the ESD authors' noxattn also freezes the time embedding and the output layers
    for frozen in ("time_embedding.linear_1.weight", "conv_out.weight", "conv_norm_out.bias"):
        assert not trainable(frozen, "noxattn") and not trainable(frozen, "xattn")
    assert trainable("down_blocks.0.resnets.0.time_emb_proj.weight", "noxattn")  # a block's projection trains
    assert trainable("conv_in.weight", "noxattn")


def test_esd_erases_sd_nps_negative_prompt_by_default() -> None:
    from tools.t2i.variants import SAFETY_NEGATIVE_PROMPT

    assert ESDSettings().concept == SAFETY_NEGATIVE_PROMPT  # App. A: the same negative prompt for SD-NP and ESD
    assert "nudity" in SAFETY_NEGATIVE_PROMPT and "cruelty" in SAFETY_NEGATIVE_PROMPT
    with pytest.raises(ValueError, match="train_method"):
        ESDSettings(train_method="full")


@pytest.fixture(scope="module")
def esd_run(tiny_sd: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("esd") / "esd.safetensors"
    return run_esd(
        ESDSettings(
            model=tiny_sd,
            concept="nudity",
            output=str(out),
            iterations=3,
            ddim_steps=3,
            resolution=32,
            learning_rate=1e-3,
            device="cpu",
            log_every=0,
        )
    )


def test_esd_u_changes_only_non_cross_attention_weights(tiny_sd: str, esd_run: dict) -> None:
    from diffusers import StableDiffusionPipeline
    from safetensors.torch import load_file

    summary = esd_run
    out = Path(summary["output"])
    state = load_file(str(out))
    pipe = StableDiffusionPipeline.from_pretrained(tiny_sd, safety_checker=None)
    original = pipe.unet.state_dict()
    changed = {k for k, v in state.items() if not torch.equal(v, original[k])}
    assert changed and all("attn2" not in k for k in changed)  # ESD-u: cross-attention untouched
    assert not any(k.startswith(("time_embedding.", "conv_out.", "conv_norm_out.")) for k in changed)
    assert any("attn1" in k for k in changed) and any("resnets" in k for k in changed)
    frozen = ("attn2", "time_embedding.", "conv_out.", "conv_norm_out.")
    assert summary["trained_parameters"] == sum(
        v.numel() for k, v in original.items() if "attn2" not in k and not k.startswith(frozen[1:])
    )


def test_the_target_and_the_loss_are_esd_s() -> None:
    import copy

    from diffusers import UNet2DConditionModel

    from training.esd import esd_loss, esd_target

    e0, ep = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 1.0])
    assert torch.equal(esd_target(e0, ep, 1.0), torch.tensor([-1.0, 3.0]))  # e0 - 1 * (ep - e0)
    assert torch.equal(esd_target(e0, ep, 0.0), e0)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(16, 32),
        layers_per_block=1,
        norm_num_groups=8,
        cross_attention_dim=16,
        attention_head_dim=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
    )
    frozen = copy.deepcopy(unet).requires_grad_(False)
    x, t = torch.randn(1, 4, 8, 8), torch.tensor(400)
    emb_c, emb_u = torch.randn(1, 5, 16) * 3, torch.zeros(1, 5, 16)
    params = [p for n, p in unet.named_parameters() if "attn2" not in n]
    opt = torch.optim.Adam(params, lr=1e-3)
    losses = []
    for _ in range(5):
        loss = esd_loss(unet, frozen, x, t, emb_c, emb_u, 1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses  # gradient steps move e_n towards the target


def test_the_esd_weights_plug_into_the_esd_generator(esd_run: dict) -> None:
    from tools.image_store import get_image_store
    from tools.t2i.base import GenerationRequest
    from tools.t2i.registry import get_generator

    gen = get_generator(esd_run["generator_spec"])
    ids = asyncio.run(gen.generate(GenerationRequest(prompt="a garden", width=32, height=32, steps=2)))
    assert len(ids) == 1 and get_image_store().open(ids[0]).size == (32, 32)


def test_unveil_train_esd_takes_the_concept_and_the_method(
    tiny_sd: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from unveil.cli import main

    out = tmp_path / "e.safetensors"
    rc = main(
        [
            "train",
            "esd",
            "--model",
            tiny_sd,
            "--concept",
            "violence",
            "--output",
            str(out),
            "--iterations",
            "1",
            "--ddim-steps",
            "1",
            "--resolution",
            "32",
            "--device",
            "cpu",
        ]
    )
    assert rc == 0 and out.is_file()
    assert f"esd:{tiny_sd}?unet={out}" in capsys.readouterr().err
    assert '"concept": "violence"' in (tmp_path / "e.json").read_text(encoding="utf-8")
