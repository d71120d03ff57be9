"""Options shared by subcommands: model specs per role, cache, image store, batch settings, the engine."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agents.cache import cache_off
from agents.gateway import Gateway, GatewaySettings, set_gateway
from agents.spec import DEFAULT_SPEC, is_demo_spec

DEMO_NOTICE = (
    f"NOTE: running on the embedded default model, SmolLM2-135M-Instruct ({DEFAULT_SPEC}). A 135M model makes this "
    "run a demonstration of the pipeline, not a safety judgement. Point Unveil at a real model with "
    "--model openai:gpt-4.1 (or UNVEIL_MODEL=...), per role with --role-model ROLE=SPEC, or at any OpenAI-compatible "
    "server with --model openai:MODEL@http://host:port/v1."
)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --role-model, --cache, --image-store, --concurrency."""
    parser.add_argument("--model", help=f"default model spec for every role (default $UNVEIL_MODEL or {DEFAULT_SPEC})")
    parser.add_argument("--role-model", action="append", default=[], metavar="ROLE=SPEC",
                        help="model spec for one role, e.g. pair_judge=openai:gpt-4.1 (repeatable)")
    parser.add_argument("--cache", help="response cache file, or 'off' "
                                        "(default $UNVEIL_CACHE or ~/.cache/unveil/responses.sqlite)")
    parser.add_argument("--image-store", default="",
                        help="image store folder (default $UNVEIL_IMAGE_STORE or ~/.cache/unveil/images)")


def add_render_options(parser: argparse.ArgumentParser, defaults: Any) -> None:
    """The render flags of every command that renders, named as the fields of `tools.t2i.settings.RenderSettings`:
    --width, --height (or --size for both), --steps, --guidance, --negative-prompt, --long-prompts. They default
    to None, so only given flags override the context (`UNVEIL_<FIELD>`) or the settings' own defaults; `defaults`
    (a RenderSettings) supplies the numbers the help shows."""
    from tools.t2i.registry import LONG_PROMPT_POLICIES

    parser.add_argument("--width", type=positive_int, help=f"image width in pixels (default {defaults.width})")
    parser.add_argument("--height", type=positive_int, help=f"image height in pixels (default {defaults.height})")
    parser.add_argument("--size", type=positive_int, help="image width and height at once (--width/--height win)")
    parser.add_argument("--steps", type=positive_int, help=f"diffusion steps (default {defaults.steps})")
    parser.add_argument("--guidance", type=float,
                        help=f"classifier-free guidance scale (default {defaults.guidance:g})")
    parser.add_argument("--negative-prompt", help="negative prompt for every generation (default: none)")
    parser.add_argument("--long-prompts", choices=LONG_PROMPT_POLICIES,
                        help="prompts over the text encoder's 77 tokens: truncate them as diffusers and the papers do "
                             f"(default {defaults.long_prompts}) or fail the sample")


def render_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The render settings given on the command line (see `add_render_options`), by their field names."""
    out: dict[str, Any] = {}
    if getattr(args, "size", None) is not None:
        out["width"] = out["height"] = args.size
    for name in ("width", "height", "steps", "guidance", "negative_prompt", "long_prompts"):
        if getattr(args, name, None) is not None:
            out[name] = getattr(args, name)
    return out


def batch_exit_code(failed: int) -> int:
    """The exit rule of every batch command: 0 when no sample failed, 2 when the batch ran but some samples
    failed (their records say why; `--retry-failed` runs them again). A command that cannot run at all exits 1."""
    return 2 if failed else 0


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (0 would hang a batch, a negative number makes no sense)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """--engine and --ray-address: where the command's GPU work and model-API limits live (docs/scale.md)."""
    from runner.engine import ADDRESS_ENV, ENGINES

    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local (this process, the default) or ray: rendering and scoring on Ray actor pools, "
                             "model-API limits cluster-wide (see docs/scale.md)")
    parser.add_argument("--ray-address", metavar="ADDRESS",
                        help=f"Ray cluster for --engine ray: auto (the running cluster) or ray://host:10001 "
                             f"(default ${ADDRESS_ENV}, else a new local cluster)")


def engine_settings(args: argparse.Namespace) -> Any:
    """The run layer's engine settings from --engine/--ray-address (local for commands without them)."""
    from runner.engine import EngineSettings

    if not hasattr(args, "engine"):  # a command without the engine options (`unveil cluster info` has its own)
        return EngineSettings()
    address = getattr(args, "ray_address", None)
    if address and args.engine != "ray":
        raise SystemExit("--ray-address needs --engine ray")
    return EngineSettings(engine=args.engine, ray_address=address)


def add_batch_options(parser: argparse.ArgumentParser) -> None:
    """--input, --output, --concurrency, --retry-failed, --no-progress."""
    parser.add_argument("--input", help="JSONL of samples to run as a batch")
    parser.add_argument("--output", help="JSONL results; rerunning skips ids already in it")
    parser.add_argument("--concurrency", type=positive_int, default=4, help="samples run at once")
    parser.add_argument("--retry-failed", action="store_true", help="run failed samples of the output again")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def context_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Context fields from --model/--role-model/--image-store (roles are checked by the run layer's builders)."""
    out: dict[str, Any] = {}
    if args.model:
        out["model"] = args.model
    for item in args.role_model:
        role, sep, spec = item.partition("=")
        if not sep or not role or not spec:
            raise SystemExit(f"--role-model {item!r}: expected ROLE=SPEC")
        out[f"{role.strip()}_model"] = spec.strip()
    if args.image_store:
        out["image_store"] = args.image_store
    return out


def setup_gateway(args: argparse.Namespace) -> Gateway:
    """Install the process gateway with the CLI's cache choice."""
    settings = GatewaySettings()
    if getattr(args, "cache", None):
        settings.cache_path = None if cache_off(args.cache) else args.cache
    gateway = Gateway(settings)
    set_gateway(gateway)
    return gateway


def warn_if_demo(specs: dict[str, str] | list[str]) -> None:
    """Say plainly when the embedded 135M model is in use."""
    values = specs.values() if isinstance(specs, dict) else specs
    if any(is_demo_spec(str(s)) for s in values):
        print(DEMO_NOTICE, file=sys.stderr)


def json_text(value: Any, *, indent: int = 2) -> str:
    """`value` as JSON for printing: NaN and Infinity (not JSON) become null, as in batch outputs."""
    import json

    from runner.batch import finite_values

    return json.dumps(finite_values(value), indent=indent, ensure_ascii=False, allow_nan=False, default=str)
