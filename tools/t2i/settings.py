"""The one render-settings type: how images are rendered, under the same field names everywhere.

Every graph context (IPR, CTD) and every settings class that renders (the IPR evaluation, the SFT data build, the
GRPO reward renders) inherits `RenderSettings` (or `CtdRenderSettings`, the same fields with CTD's defaults), so
`width`, `height`, `steps`, `guidance`, `negative_prompt` and `long_prompts` mean the same thing in a Studio
context, a config file and on the command line, and `request()` turns them into the backend's `GenerationRequest`.
Which generator renders is a separate setting, `generator` (the IPR evaluation compares several at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from tools.env import SettingError
from tools.t2i.base import GenerationRequest
from tools.t2i.defaults import CTD_GUIDANCE, CTD_SIZE, CTD_STEPS, IPR_GUIDANCE, IPR_SIZE, IPR_STEPS
from tools.t2i.errors import renamed_note
from tools.t2i.registry import DEFAULT_LONG_PROMPTS, LONG_PROMPT_POLICIES, LongPrompts

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")

# One description per field: graph contexts show it in LangGraph Studio, and its bounds are checked by
# `graphs.context.check_context` when a run starts.
RENDER_FIELD_META: dict[str, dict[str, Any]] = {
    "width": {"description": "Image width in pixels.", "min": 8},
    "height": {"description": "Image height in pixels.", "min": 8},
    "steps": {"description": "Diffusion (denoising) steps.", "min": 1},
    "guidance": {"description": "Classifier-free guidance scale."},
    "negative_prompt": {"description": "Negative prompt for every generation (empty: none)."},
    "long_prompts": {
        "description": "Prompts over the text encoder's 77 tokens: 'truncate' (as diffusers and the papers do) or "
        "'error'.",
    },
}
RENDER_FIELDS = tuple(RENDER_FIELD_META)


def render_field(name: str, default: T) -> T:
    """A dataclass field of the render settings with its shared description (a subclass changes only defaults)."""
    return field(default=default, metadata=RENDER_FIELD_META[name])


@dataclass(kw_only=True)
class RenderSettings:
    """How images are rendered; the defaults are the IPR paper's (tools/t2i/defaults.py names their sources)."""

    width: int = render_field("width", IPR_SIZE)
    height: int = render_field("height", IPR_SIZE)
    steps: int = render_field("steps", IPR_STEPS)
    guidance: float = render_field("guidance", IPR_GUIDANCE)
    negative_prompt: str = render_field("negative_prompt", "")
    long_prompts: LongPrompts = render_field("long_prompts", DEFAULT_LONG_PROMPTS)

    def request(
        self, prompt: str, *, seed: int = 0, num_images: int = 1, guidance: float | None = None
    ) -> GenerationRequest:
        """The generation request of `prompt` under these settings (`guidance` overrides the setting, for the
        I2P protocol's per-prompt guidance)."""
        return GenerationRequest(
            prompt=prompt,
            negative_prompt=self.negative_prompt or None,
            seed=seed,
            num_images=num_images,
            width=self.width,
            height=self.height,
            steps=self.steps,
            guidance=self.guidance if guidance is None else guidance,
        )

    def render_settings(self) -> dict[str, Any]:
        """The render fields alone, for a run's record (the same keys in every record)."""
        return {name: getattr(self, name) for name in RENDER_FIELDS}

    def check_render_settings(self) -> None:
        """Refuse settings no backend can render, naming the field."""
        for name in ("width", "height", "steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < RENDER_FIELD_META[name]["min"]:
                raise SettingError(
                    f"{name} must be an integer of at least {RENDER_FIELD_META[name]['min']}, got {value!r}"
                )
        if self.long_prompts not in LONG_PROMPT_POLICIES:
            raise SettingError(f"long_prompts must be {' or '.join(LONG_PROMPT_POLICIES)}, got {self.long_prompts!r}")


@dataclass(kw_only=True)
class CtdRenderSettings(RenderSettings):
    """The render settings with CTD's defaults (Stable Diffusion candidates a judge panel then screens)."""

    width: int = render_field("width", CTD_SIZE)
    height: int = render_field("height", CTD_SIZE)
    steps: int = render_field("steps", CTD_STEPS)
    guidance: float = render_field("guidance", CTD_GUIDANCE)


def render_kwargs(settings: DataclassInstance) -> dict[str, Any]:
    """The render fields of any settings object that has them (to build another settings class from it)."""
    names = {f.name for f in fields(settings)}
    return {name: getattr(settings, name) for name in RENDER_FIELDS if name in names}


# Names the render settings had before they became one type (and the reward renders' compile switch, now a value of
# `t2i_accel`): an old config or context using them is refused with the new name, not merely "unknown".
RENAMED_RENDER_FIELDS = {
    "t2i": "generator",
    "t2i_width": "width",
    "t2i_height": "height",
    "t2i_steps": "steps",
    "t2i_guidance": "guidance",
    "t2i_size": "width and height",
    "size": "width and height",
    "t2i_compile": 't2i_accel = "compile"',
}


def renamed_hint(names: list[str] | set[str]) -> str:
    """'; renamed: t2i_steps is now steps' for the old render-setting names among `names` (else '')."""
    return renamed_note(names, RENAMED_RENDER_FIELDS)
