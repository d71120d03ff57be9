"""One render-settings type: the same field names and defaults in every context and settings class, one set of
command-line flags, and old names refused with the new one."""

from __future__ import annotations

import pytest

from evaluation.ipr import IPRSettings
from graphs.context import ContextError
from graphs.ctd import CtdContext
from graphs.ipr import IPRContext
from tools.t2i.defaults import CTD_GUIDANCE, CTD_SIZE, CTD_STEPS
from tools.t2i.settings import RENDER_FIELDS, CtdRenderSettings, RenderSettings
from training.build_data import BuildDataSettings
from training.config import GRPOSettings, build_settings
from unveil.cli import build_parser
from unveil.commands.common import render_overrides

IPR_KINDS = [IPRContext(), IPRSettings(), BuildDataSettings(labeller="openai:gpt-4.1"), GRPOSettings()]


@pytest.mark.parametrize("settings", IPR_KINDS, ids=lambda s: type(s).__name__)
def test_every_ipr_renderer_has_the_render_fields_and_defaults(settings: RenderSettings) -> None:
    assert isinstance(settings, RenderSettings)
    assert settings.render_settings() == RenderSettings().render_settings()
    assert not {"size", "t2i_width", "t2i_height", "t2i_steps", "t2i_guidance", "t2i_size"} & set(vars(settings))


def test_ctd_has_the_same_fields_with_its_own_defaults() -> None:
    ctx = CtdContext()
    assert isinstance(ctx, CtdRenderSettings)
    assert (ctx.width, ctx.height, ctx.steps, ctx.guidance) == (CTD_SIZE, CTD_SIZE, CTD_STEPS, CTD_GUIDANCE)
    assert set(ctx.render_settings()) == set(RENDER_FIELDS)
    assert ctx.generator  # the generator spec has the IPR graph's name too


def test_request_carries_every_field() -> None:
    s = RenderSettings(width=64, height=32, steps=3, guidance=5.0, negative_prompt="blur")
    r = s.request("a cat", seed=7, num_images=2)
    assert (r.prompt, r.seed, r.num_images, r.width, r.height, r.steps, r.guidance, r.negative_prompt) == (
        "a cat",
        7,
        2,
        64,
        32,
        3,
        5.0,
        "blur",
    )
    assert RenderSettings().request("x").negative_prompt is None  # empty means none
    assert s.request("x", guidance=9.0).guidance == 9.0  # the I2P protocol's per-prompt guidance


@pytest.mark.parametrize("bad", [{"width": 4}, {"steps": 0}, {"long_prompts": "cut"}])
def test_impossible_settings_are_refused_naming_the_field(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        RenderSettings(**bad).check_render_settings()


@pytest.mark.parametrize(
    "argv",
    [
        ["refine", "p"],
        ["generate", "--category", "drugs", "--n", "1", "--out", "d"],
        ["evaluate", "ipr", "--prompts", "p"],
        ["train", "build-data", "--prompts", "p", "--output", "o"],
    ],
)
def test_every_rendering_command_has_the_same_flags(argv: list[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(
        [
            *argv,
            "--size",
            "64",
            "--height",
            "48",
            "--steps",
            "3",
            "--guidance",
            "4.5",
            "--negative-prompt",
            "blur",
            "--long-prompts",
            "error",
        ]
    )
    assert render_overrides(args) == {
        "width": 64,
        "height": 48,
        "steps": 3,
        "guidance": 4.5,
        "negative_prompt": "blur",
        "long_prompts": "error",
    }
    assert render_overrides(parser.parse_args(argv)) == {}  # unset flags leave the settings' defaults


def test_grpo_flags_are_the_field_names_with_help() -> None:
    parser = build_parser()
    args = parser.parse_args(["train", "grpo", "--width", "32", "--height", "32", "--steps", "2"])
    assert (args.width, args.height, args.steps) == (32, 32, 2)
    grpo = next(
        a
        for a in parser._subparsers._group_actions[0]
        .choices["train"]
        ._subparsers._group_actions[0]
        .choices["grpo"]
        ._actions
        if a.dest == "steps"
    )
    assert "Diffusion" in grpo.help


def test_old_names_are_refused_with_the_new_one() -> None:
    with pytest.raises(ContextError, match="t2i_steps is now steps"):
        CtdContext(t2i_steps=2)
    with pytest.raises(ContextError, match="size is now width and height"):
        IPRContext(size=64)
    with pytest.raises(ValueError, match="t2i_size is now width and height"):
        build_settings(GRPOSettings, {"t2i_size": 512})
    with pytest.raises(ValueError, match='t2i_compile is now t2i_accel = "compile"'):
        build_settings(GRPOSettings, {"t2i_compile": True})


def test_old_generator_spellings_are_refused_with_the_new_one(capsys: pytest.CaptureFixture[str]) -> None:
    from tools.t2i import get_generator
    from tools.t2i.errors import UnsupportedOptionError

    with pytest.raises(UnsupportedOptionError, match='compile is now accel="compile"'):
        get_generator("diffusers:any-model", compile=True)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["generate", "--category", "drugs", "--out", "x", "--t2i", "diffusers:m"])
    assert exit_info.value.code != 0
    assert "--t2i is now --generator" in capsys.readouterr().err
