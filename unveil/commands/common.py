"""Options shared by subcommands: model specs per role, cache, image store, batch settings, the engine."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.providers.profiles import is_demo_spec
from agents.spec import DEFAULT_SPEC
from tools.errors import CommandLineError
from unveil.commands.flag_types import MAX_CONCURRENCY as MAX_CONCURRENCY
from unveil.commands.flag_types import MAX_DEPTH as MAX_DEPTH
from unveil.commands.flag_types import MAX_IMAGES as MAX_IMAGES
from unveil.commands.flag_types import MAX_PIXELS as MAX_PIXELS
from unveil.commands.flag_types import MAX_SCENES as MAX_SCENES
from unveil.commands.flag_types import MAX_SEED as MAX_SEED
from unveil.commands.flag_types import MAX_STEPS as MAX_STEPS
from unveil.commands.flag_types import bounded_float as bounded_float
from unveil.commands.flag_types import bounded_int as bounded_int
from unveil.commands.flag_types import int_list as int_list
from unveil.commands.flag_types import new_file_path as new_file_path
from unveil.commands.flag_types import port_int as port_int
from unveil.commands.flag_types import positive_int as positive_int
from unveil.commands.flag_types import seed_int as seed_int

if TYPE_CHECKING:
    from agents.gateway import Gateway
    from runner.batch import BatchSummary
    from runner.engine import EngineSettings
    from runner.output_identity import OutputIdentity
    from runner.spending import Spending
    from tools.t2i.settings import RenderSettings

DEMO_NOTICE = (
    "NOTE: {who} on the embedded model SmolLM2-135M-Instruct ({specs}). A 135M model makes this "
    "run a demonstration of the pipeline, not a safety judgement. Point Unveil at a real model with "
    "--model openai:gpt-4.1 (or UNVEIL_MODEL=...), per role with --role-model ROLE=SPEC, or at any OpenAI-compatible "
    "server with --model openai:MODEL@http://host:port/v1."
)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --role-model, --cache, --image-store, --concurrency."""
    parser.add_argument("--model", help=f"default model spec for every role (default $UNVEIL_MODEL or {DEFAULT_SPEC})")
    parser.add_argument(
        "--role-model",
        action="append",
        default=[],
        metavar="ROLE=SPEC",
        help="model spec for one role, e.g. pair_judge=openai:gpt-4.1 (repeatable)",
    )
    parser.add_argument(
        "--cache", help="response cache file, or 'off' (default $UNVEIL_CACHE or ~/.cache/unveil/responses.sqlite)"
    )
    parser.add_argument(
        "--image-store", default="", help="image store folder (default $UNVEIL_IMAGE_STORE or ~/.cache/unveil/images)"
    )


def add_render_options(parser: argparse.ArgumentParser, defaults: RenderSettings) -> None:
    """The render flags of every command that renders, named as the fields of `tools.t2i.settings.RenderSettings`:
    --width, --height (or --size for both), --steps, --guidance, --negative-prompt, --long-prompts. They default
    to None, so only given flags override the context (`UNVEIL_<FIELD>`) or the settings' own defaults; `defaults`
    (a RenderSettings) supplies the numbers the help shows."""
    from tools.t2i.registry import LONG_PROMPT_POLICIES

    parser.add_argument(
        "--width", type=bounded_int(8, MAX_PIXELS), help=f"image width in pixels (default {defaults.width})"
    )
    parser.add_argument(
        "--height", type=bounded_int(8, MAX_PIXELS), help=f"image height in pixels (default {defaults.height})"
    )
    parser.add_argument(
        "--size", type=bounded_int(8, MAX_PIXELS), help="image width and height at once (--width/--height win)"
    )
    parser.add_argument("--steps", type=bounded_int(1, MAX_STEPS), help=f"diffusion steps (default {defaults.steps})")
    parser.add_argument(
        "--guidance",
        type=bounded_float(0.0, 100.0),
        help=f"classifier-free guidance scale (default {defaults.guidance:g})",
    )
    parser.add_argument("--negative-prompt", help="negative prompt for every generation (default: none)")
    parser.add_argument(
        "--long-prompts",
        choices=LONG_PROMPT_POLICIES,
        help="prompts over the text encoder's 77 tokens: truncate them as diffusers and the papers do "
        f"(default {defaults.long_prompts}) or fail the sample",
    )


def add_context_switches(parser: argparse.ArgumentParser, context: type, names: Sequence[str]) -> None:
    """`--NAME` / `--no-NAME` for boolean fields of a graph context (a dataclass): the help is the field's own
    `description` with its default, so a setting is declared once; unset, a flag stays None and the context (or
    `UNVEIL_<FIELD>`) decides (`context_switches` reads the given ones back)."""
    from dataclasses import fields

    by_name = {f.name: f for f in fields(context)}
    for name in names:
        f = by_name[name]
        what = str(f.metadata.get("description", "")).replace("%", "%%")
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"{what} (default: {'on' if f.default else 'off'})",
        )


def context_switches(args: argparse.Namespace, names: Sequence[str]) -> dict[str, bool]:
    """The context switches (`add_context_switches`) given on the command line, by field name."""
    return {name: bool(getattr(args, name)) for name in names if getattr(args, name, None) is not None}


def render_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The render settings given on the command line (see `add_render_options`), by their field names."""
    out: dict[str, Any] = {}
    if getattr(args, "size", None) is not None:
        out["width"] = out["height"] = args.size
    for name in ("width", "height", "steps", "guidance", "negative_prompt", "long_prompts"):
        if getattr(args, name, None) is not None:
            out[name] = getattr(args, name)
    return out


GATE_EXIT = 3  # an evaluation ran but a quality metric fell under its --fail-under
STOPPED_EXIT = 4  # a spending cap (--max-calls/--max-cost) kept samples from starting: the output is incomplete


def batch_exit_code(failed: int, not_run: int = 0) -> int:
    """The exit rule of every batch command: 0 when every sample ran and none failed, 2 when some samples of the
    output failed, in this run or an earlier one (`--retry-failed` runs them again), 4 (over 2) when a spending cap
    kept `not_run` samples from starting (a rerun with a higher cap runs them). A command that cannot run exits 1."""
    return STOPPED_EXIT if not_run else 2 if failed else 0


def add_gate_option(parser: argparse.ArgumentParser, metrics: str) -> None:
    """--fail-under METRIC=VALUE (repeatable), the pass/fail of an evaluate command in CI (`evaluation.gates`)."""
    parser.add_argument(
        "--fail-under",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help=f"exit {GATE_EXIT} when METRIC of any configuration's overall row is under VALUE (repeatable; "
        f"METRIC: {metrics})",
    )


def gated_exit_code(failed: int, misses: list[Any], not_run: int = 0) -> int:
    """The exit rule of an evaluate command: `STOPPED_EXIT` when a spending cap left samples not run (metrics of
    part of the run pass or fail no gate), else `GATE_EXIT` when a --fail-under gate missed (each miss printed; it
    wins over failed samples, which the failures table lists), else `batch_exit_code(failed)`."""
    for miss in misses:
        print(f"fail-under: {miss}", file=sys.stderr)
    return STOPPED_EXIT if not_run else GATE_EXIT if misses else batch_exit_code(failed)


def report_batch(summary: BatchSummary, output: str | os.PathLike[str], *, done: str = "done") -> int:
    """Print a batch's summary (this run's counts, then every failed record of the output, earlier runs' too, then
    the samples a spending cap kept from starting, as not run) and return its exit code (`batch_exit_code`)."""
    earlier = f" ({summary.failed_earlier} of them failed then)" if summary.failed_earlier else ""
    not_run = f", {len(summary.not_run)} not run" if summary.not_run else ""
    print(
        f"{summary.completed} {done}, {summary.failed} failed{not_run}, {summary.skipped} already in {output}{earlier}",
        file=sys.stderr,
    )
    for failure in summary.failures[:50]:
        print(f"  failed {failure.get('id')}: {failure['error']}", file=sys.stderr)
    if len(summary.failures) > 50:
        print(f"  ... and {len(summary.failures) - 50} more (their records say why)", file=sys.stderr)
    if summary.failed_in_output:
        print(
            f"{summary.failed_in_output} failed record(s) in {output}: --retry-failed runs them again", file=sys.stderr
        )
    if summary.not_run:
        n, shown = len(summary.not_run), ", ".join(summary.not_run[:10]) + (" ..." if len(summary.not_run) > 10 else "")
        why = f"{summary.stopped}; rerun with a higher cap, or none, to run them (exit {STOPPED_EXIT})"
        print(f"incomplete: {n} sample(s) not run ({shown}): {why}", file=sys.stderr)
    return batch_exit_code(summary.failed_in_output, len(summary.not_run))


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """--engine and --ray-address: where the command's GPU work and model-API limits live (docs/scale.md)."""
    from runner.engine import ADDRESS_ENV, ENGINES

    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local (this process, the default) or ray: rendering and scoring on Ray actor pools, "
        "model-API limits cluster-wide (see docs/scale.md)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help=f"Ray cluster for --engine ray: auto (the running cluster) or ray://host:10001 "
        f"(default ${ADDRESS_ENV}, else a new local cluster); the run prints the address, nodes and GPUs it joined",
    )


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    """The run layer's engine settings from --engine/--ray-address (local for commands without them)."""
    from runner.engine import EngineSettings

    if not hasattr(args, "engine"):  # a command without the engine options (`unveil cluster info` has its own)
        return EngineSettings()
    address = getattr(args, "ray_address", None)
    if address and args.engine != "ray":
        raise CommandLineError("--ray-address needs --engine ray")
    return EngineSettings(engine=args.engine, ray_address=address)


def add_spending_options(parser: argparse.ArgumentParser, what: str = "samples") -> None:
    """--max-calls and --max-cost, the spending caps of every batch command (`runner.spending`): counting what the
    output's records spent (earlier runs' too), they stop new `what` and new model calls from starting; a sample
    whose call was refused is not recorded, and a rerun with a higher cap goes on."""
    start = f"start no {what} and no model call once this many"
    parser.add_argument("--max-calls", type=bounded_int(0), help=f"{start} model calls were made (never passed)")
    parser.add_argument(
        "--max-cost",
        type=bounded_float(0.0, 1e9),
        help=f"{start} dollars were spent; calls in flight finish, so it can be passed by their price (at most "
        "the concurrency per backend, 8 by default, times the dearest call)",
    )


def spending_caps(args: argparse.Namespace) -> Spending:
    """The `runner.spending.Spending` of --max-calls/--max-cost (no caps for a command without them); with a cap,
    the command's estimate against it is printed first, so the cost is stated where the cap is chosen."""
    from runner.spending import Spending
    from unveil.commands.run_estimate import cap_note

    spending = Spending(getattr(args, "max_calls", None), getattr(args, "max_cost", None))
    if note := (cap_note(args) if spending.capped else None):
        print(note, file=sys.stderr)
    return spending


def report_stop(spending: Spending | None, not_run: int) -> None:
    """Say on stderr that a spending cap kept `not_run` samples from starting, and how to go on."""
    why = spending.stop() if spending is not None else None
    if why and not_run:
        print(f"incomplete: {why}; rerun with a higher cap to continue (exit {STOPPED_EXIT})", file=sys.stderr)


def add_batch_options(parser: argparse.ArgumentParser, *, default_output: str = "", concurrency_note: str = "") -> None:
    """--input, --output, --concurrency, --max-calls, --max-cost, --retry-failed, --no-progress. `default_output`
    says where the results go without --output, `concurrency_note` when the default concurrency is not used."""
    parser.add_argument("--input", help="JSONL of samples to run as a batch")
    where = f" (default {default_output})" if default_output else ""
    parser.add_argument("--output", help=f"JSONL results; rerunning skips ids already in it{where}")
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=4,
        help=f"samples run at once (default %(default)s{concurrency_note})",
    )
    add_spending_options(parser)
    parser.add_argument("--retry-failed", action="store_true", help="run failed samples of the output again")
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bar and the libraries' model-loading bars"
    )
    add_mixed_settings_option(parser)


MIXED_SETTINGS_HELP = (
    "add to an output made with other settings (or with settings not recorded) anyway; without "
    "it such a rerun is refused before any model call, naming what differs"
)


def add_mixed_settings_option(parser: argparse.ArgumentParser) -> None:
    """--allow-mixed-settings, the one flag of every command that writes a resumable output."""
    from runner.output_identity import MIX_FLAG

    parser.add_argument(MIX_FLAG, dest="allow_mixed_settings", action="store_true", help=MIXED_SETTINGS_HELP)


def output_identity(args: argparse.Namespace, kind: str, settings: dict[str, Any]) -> OutputIdentity:
    """The identity of the output a command writes (`runner.output_identity.OutputIdentity`): its kind, settings,
    the command line (credentials redacted) and whether --allow-mixed-settings was given."""
    from runner.output_identity import OutputIdentity

    return OutputIdentity(
        kind=kind,
        settings=settings,
        command=getattr(args, "command_line", ""),
        allow_mixed=bool(getattr(args, "allow_mixed_settings", False)),
    )


def default_output_name(stem: str, specs: dict[str, str] | Sequence[str]) -> str:
    """A default output file name: `STEM.jsonl` on the embedded demo model (`transformers:smollm2`), else
    `STEM-PROVIDER-MODEL[-HASH].jsonl` with the main model's provider and name and, for a server, a short hash of its
    base URL, so each distinct model gets its own file: another model never lands in the demo's file (nor
    `llamacpp:smollm2`, another backend of the same weights), and two servers serving one model name never share."""
    import hashlib
    import re

    from agents.spec import DEFAULT_SPEC, ModelSpec, ModelSpecError
    from tools.redact import redact_url

    embedded = ModelSpec.parse(DEFAULT_SPEC).provider
    values = [str(v) for v in (specs.values() if isinstance(specs, dict) else specs) if v]
    real = [v for v in values if not (is_demo_spec(v) and v.partition(":")[0] == embedded)]
    if not real:
        return f"{stem}.jsonl"
    main = max(sorted(set(real)), key=real.count)  # the spec most roles use
    try:
        parsed = ModelSpec.parse(main)
    except ModelSpecError:
        parsed = ModelSpec(provider=main.partition(":")[0], model=main.partition(":")[2])
    # provider and model name (a script's folder is in the recorded settings); a server by a hash of its address
    # (credentials left out: they change nothing about the model)
    model = parsed.model.partition("?")[0].rstrip("/").rsplit("/", 1)[-1]
    name = f"{parsed.provider}-{model}" if model else parsed.provider
    if parsed.base_url:
        name += "-" + hashlib.sha256(redact_url(parsed.base_url).encode()).hexdigest()[:6]
    return f"{stem}-{re.sub(r'[^A-Za-z0-9.=-]+', '-', name).strip('-')[:80]}.jsonl"


def check_generator_flag(spec: str) -> None:
    """`tools.t2i.registry.check_generator` for a command's `--generator`, before any output or folder is made: a
    Hub model that cannot be had now (offline) is one error naming the flag and the ways on."""
    from tools.hub import HubUnavailableError
    from tools.t2i.registry import check_generator

    try:
        check_generator(spec)
    except HubUnavailableError as exc:
        raise HubUnavailableError(
            f"--generator {spec}: {exc}; offline, name a local diffusers folder: --generator diffusers:/path/to/folder"
        ) from exc


def quiet_library_progress() -> None:
    """Under --no-progress, the libraries draw no bars either: transformers' "Loading weights", diffusers' pipeline
    loading and the Hub's downloads (HF_HUB_DISABLE_PROGRESS_BARS, which both read when imported; switched off
    directly where they were imported already)."""
    from tools.env import set_default

    set_default("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for name in ("transformers.utils.logging", "diffusers.utils.logging"):
        module = sys.modules.get(name)
        if module is not None:
            module.disable_progress_bar()
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None:
        hub.disable_progress_bars()


def check_backend_settings() -> None:
    """Settings errors of the model backends (`UNVEIL_REQUEST_TIMEOUT`, `UNVEIL_IMAGE_REQUEST_TIMEOUT`; the gateway's
    own variables are checked when it is made) raised once, before the first sample, instead of failing every sample
    (a `SettingError` naming it)."""
    from tools.http_limits import image_request_timeout, request_timeout

    request_timeout()
    image_request_timeout()


def tag_setting_help(name: str) -> str:
    """The help of a TAG reading (`graphs.tag.tree.READING_HELP`, the description of `TagContext`'s field), read
    without loading the graphs' model stack (`--help` stays fast)."""
    from graphs.tag.tree import READING_HELP

    return READING_HELP[name]


def add_tag_reading_options(parser: argparse.ArgumentParser, *, toxic_pairs: bool = True, of: str = "") -> None:
    """--prune, --roots-mode (the TAG paper's readings, docs/tag.md) and --toxic-pairs (the user's set S of known
    toxic concept pairs): the choices and help of `graphs.tag.TagContext`'s fields, so every command that builds
    a TAG (`detect`, `evaluate detection`, `generate`) names and explains them the same way. Left out, each takes
    the context's default (or `UNVEIL_PRUNE` / `UNVEIL_ROOTS_MODE` / `UNVEIL_TOXIC_PAIRS`). `of` names whose TAG it
    is where that is not the command's own ("the MTC reference")."""
    from agents.tag.types import ROOTS_MODES
    from graphs.tag.tree import PRUNE_MODES

    head = f"({of}) " if of else ""
    parser.add_argument("--prune", choices=PRUNE_MODES, help=head + tag_setting_help("prune"))
    parser.add_argument("--roots-mode", choices=ROOTS_MODES, help=head + tag_setting_help("roots_mode"))
    if toxic_pairs:
        parser.add_argument("--toxic-pairs", metavar="FILE", help=head + tag_setting_help("toxic_pairs"))


def tag_reading_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The TAG readings given on the command line (`add_tag_reading_options`), as context fields; flags left out
    are absent, so the context's default and the environment still apply."""
    out: dict[str, Any] = {}
    for name in ("prune", "roots_mode", "toxic_pairs"):
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    return out


def context_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Context fields from --model/--role-model/--image-store (roles are checked by the run layer's builders)."""
    out: dict[str, Any] = {}
    if args.model:
        out["model"] = args.model
    for item in args.role_model:
        role, sep, spec = item.partition("=")
        if not sep or not role or not spec:
            raise CommandLineError(f"--role-model {item!r}: expected ROLE=SPEC")
        out[f"{role.strip()}_model"] = spec.strip()
    if args.image_store:
        out["image_store"] = args.image_store
    return out


def setup_gateway(args: argparse.Namespace) -> Gateway:
    """Install the process gateway with the CLI's cache choice (after checking the backends' settings)."""
    check_backend_settings()
    # Imported here, not at the top: `unveil --help` and parsing must not pay for LangChain's import.
    from agents.cache import cache_off
    from agents.gateway import Gateway, GatewaySettings, set_gateway

    settings = GatewaySettings()
    if getattr(args, "cache", None):
        settings.cache_path = None if cache_off(args.cache) else args.cache
    gateway = Gateway(settings)
    set_gateway(gateway)
    return gateway


def warn_if_demo(specs: dict[str, str] | list[str]) -> None:
    """Say plainly when the embedded 135M model is in use: under which spec(s) (`transformers:` or `llamacpp:`), and
    for which roles when others run on other models."""
    pairs = list(specs.items()) if isinstance(specs, dict) else [("", s) for s in specs]
    demo = [(role, str(spec)) for role, spec in pairs if spec and is_demo_spec(str(spec))]
    if not demo:
        return
    roles = [role for role, _ in demo if role]
    mixed = len(demo) < len([s for _, s in pairs if s])
    who = f"role(s) {', '.join(roles)} run" if mixed and roles else "some roles run" if mixed else "running"
    specs_used = ", ".join(sorted({spec for _, spec in demo}))
    print(DEMO_NOTICE.format(who=who, specs=specs_used), file=sys.stderr)


def json_text(value: object, *, indent: int = 2) -> str:
    """`value` as JSON for printing: NaN and Infinity (not JSON) become null, as in batch outputs."""
    import json

    from tools.jsonl_files import finite_values

    return json.dumps(finite_values(value), indent=indent, ensure_ascii=False, allow_nan=False, default=str)
