"""`unveil run FILE.toml`: a run as a file (promptfoo's config, garak's run config): models per role, datasets,
methods, readings, limits and thresholds of one or more jobs, run in order.

The file's top-level keys apply to every job whose command has them; each `[[jobs]]` table names its `command`
(`detect`, `evaluate detection`, `evaluate ipr`, `refine` or `generate`), an optional `name`, and its own keys.
A key is a flag of the command without its dashes (`max_cost` or `max-cost`; a positional argument by its name):
the keys are read from the commands' own argument parsers, so every flag has one and none is listed twice. A value
is what the flag takes: a string or number, true for a switch, a list for a repeatable or comma-separated flag, and
a table for `KEY=VALUE` flags (`role_model = {pair_judge = "openai:gpt-4.1"}`, `fail_under = {accuracy = 0.6}`).
An unknown key is refused with the valid ones. Each job is parsed by the real parser and run by its command, so a
rerun of the file resumes every output; each output's settings sidecar records the run file (path and SHA-256)
in its command line. `--dry-run` prints the plan with the estimated model calls and cost (`estimate`).
YAML files are read too where PyYAML is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.env import env_str
from tools.errors import UnveilError
from unveil.commands.report import BUG_EXIT

COMMANDS = ("detect", "evaluate detection", "evaluate ipr", "refine", "generate")
JOB_KEYS = ("command", "name")
# Exit codes by severity: a bug, could not run, a quality gate missed, some samples failed, all well.
SEVERITY = (BUG_EXIT, 1, 3, 2, 0)


class RunFileError(UnveilError, ValueError):
    """A run file that cannot be read or names what no command takes."""


@dataclass
class Job:
    """One job of a run file: its name, its command line (without `unveil`) and the parsed arguments."""

    name: str
    argv: list[str]
    args: argparse.Namespace


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `run` subcommand."""
    p = sub.add_parser(
        "run",
        help="run the jobs of a run file (TOML, or YAML with PyYAML): models, datasets, methods, limits, gates",
        description="Each [[jobs]] table names a command (detect, evaluate detection, evaluate ipr, refine, "
        "generate) and its flags as keys; top-level keys apply to every job that takes them. See docs/evaluation.md.",
    )
    p.add_argument("file", help="the run file (.toml, or .yaml/.yml with PyYAML installed)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan and the estimated calls and cost; run nothing"
    )
    p.set_defaults(func=run)


def read_file(path: Path) -> tuple[dict[str, Any], str]:
    """The run file's content and its SHA-256; an unreadable file is a `RunFileError` naming it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RunFileError(f"run file {str(path)!r}: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(raw).hexdigest()
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise RunFileError(
                    f"run file {str(path)!r}: YAML needs PyYAML (pip install pyyaml), or use TOML"
                ) from None
            data = yaml.safe_load(raw.decode("utf-8"))
        else:
            import tomllib

            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError and YAMLError's parse errors are ValueErrors
        raise RunFileError(f"run file {str(path)!r}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise RunFileError(f"run file {str(path)!r}: expected one or more [[jobs]] tables")
    return data, digest


def command_parser(command: str) -> argparse.ArgumentParser:
    """The real argument parser of a command (`evaluate detection`: the subcommand's own)."""
    from unveil.commands.parser import build_parser

    parser: argparse.ArgumentParser = build_parser()
    for word in command.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def option_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every key a command takes, by name: its long options without dashes (`-` as `_`) and its positionals."""
    keys: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        longs = [o for o in action.option_strings if o.startswith("--")]
        for name in longs or ([] if action.option_strings else [action.dest]):
            keys[name.lstrip("-").replace("-", "_")] = action
    return keys


def _flag_values(key: str, value: object, action: argparse.Action) -> list[str]:
    """The command-line words of one key's value (see the module docstring); a value the flag cannot take is a
    `RunFileError` naming the key."""
    flag = next((o for o in action.option_strings if o.startswith("--")), "")
    if isinstance(value, dict):
        value = [f"{k}={v}" for k, v in value.items()]
    if isinstance(value, bool):
        if action.nargs == 0:
            return [flag] if value else []
        if action.nargs == "?" and action.const is not None:  # an option with an optional value: true = its default
            return [flag] if value else []
        raise RunFileError(f"key {key!r}: takes a value, not {str(value).lower()}")
    if action.nargs == 0:
        raise RunFileError(f"key {key!r}: a switch, give true or false")
    if isinstance(value, list):
        words = [_scalar(key, v) for v in value]
        if isinstance(action, argparse._AppendAction):
            return [w for item in words for w in (flag, item)]
        value = ",".join(words)  # a comma-separated flag (--methods, --ipr-t-max, --l-max-ablation)
    text = _scalar(key, value)
    return [flag, text] if flag else [text]


def _scalar(key: str, value: object) -> str:
    """One value as a command-line word (strings and numbers only)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RunFileError(f"key {key!r}: expected a string or a number, got {value!r}")
    return str(value)


def _job_argv(job: dict[str, Any], shared: dict[str, Any], number: int) -> tuple[str, list[str]]:
    """(name, command line without `unveil`) of one job table, with the shared keys its command takes."""
    command = job.get("command")
    if command not in COMMANDS:
        raise RunFileError(f"job {number}: command {command!r}; expected one of {', '.join(COMMANDS)}")
    name = str(job.get("name") or f"job {number} ({command})")
    keys = option_keys(command_parser(command))
    unknown = sorted(k for k in job if k not in keys and k not in JOB_KEYS)
    if unknown:
        raise RunFileError(f"{name}: unknown key(s) {', '.join(unknown)}; `{command}` takes: {', '.join(sorted(keys))}")
    merged = {k: v for k, v in shared.items() if k in keys} | {k: v for k, v in job.items() if k not in JOB_KEYS}
    options: list[str] = []
    positionals: list[str] = []
    for key, value in merged.items():
        words = _flag_values(key, value, keys[key])
        (options if keys[key].option_strings else positionals).extend(words)
    return name, [*command.split(), *options, *(["--", *positionals] if positionals else [])]


def _normalized(table: dict[str, Any], where: str) -> dict[str, Any]:
    """A table's keys with `-` as `_` (`max-cost` is `max_cost`); the same key given both ways is refused."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = str(key).replace("-", "_")
        if name in out:
            raise RunFileError(f"{where}: the key {name!r} is given twice")
        out[name] = value
    return out


def plan(path: Path) -> tuple[list[Job], str]:
    """The jobs of a run file, each parsed by the real parser (a bad value fails as on the command line, naming
    the job), and the file's SHA-256."""
    from unveil.commands.parser import build_parser

    data, digest = read_file(path)
    shared = _normalized({k: v for k, v in data.items() if k != "jobs"}, "the top level")
    if not all(isinstance(j, dict) for j in data["jobs"]):
        raise RunFileError(f"run file {str(path)!r}: every entry of jobs must be a table")
    tables = [_normalized(j, f"job {n}") for n, j in enumerate(data["jobs"], 1)]
    taken = {k for j in tables if j.get("command") in COMMANDS for k in option_keys(command_parser(j["command"]))}
    stray = sorted(k for k in shared if k not in taken)
    if stray and all(j.get("command") in COMMANDS for j in tables):
        raise RunFileError(
            f"run file {str(path)!r}: top-level key(s) {', '.join(stray)} taken by none of its jobs; valid: "
            + ", ".join(sorted(taken))
        )
    parser = build_parser()
    jobs = []
    for number, table in enumerate(tables, 1):
        name, argv = _job_argv(table, shared, number)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            raise RunFileError(f"{name}: `unveil {shlex.join(argv)}` is refused (the error is above)") from exc
        args.command_line = f"unveil run {path} (sha256 {digest}; {name}): {_line(argv)}"
        jobs.append(Job(name, argv, args))
    return jobs, digest


def _line(argv: list[str]) -> str:
    """A job's command line as shown and recorded (credentials redacted)."""
    from unveil.commands.parser import command_line

    return command_line(argv)


# -- the dry run's estimate ---------------------------------------------------------------------------------
# Tokens a call is assumed to take (prompt, answer) for the cost estimate: the order of a TAG call measured by
# bench/tag_calls.py (19.9k tokens over 12 calls); the real count depends on the samples.
TOKENS_PER_CALL = (1500, 300)


def tag_calls(l_max: int | None) -> int:
    """Model calls of TAG on a sample where nothing stops the search early: the bound bench/tag_calls.py checks
    (3 a layer and 3 more: the roots, the review, the explanation)."""
    return 3 * (l_max or 4) + 3


def detection_calls(method: str, l_max: int | None) -> int:
    """Model calls a detection method makes on one sample (at most, for TAG)."""
    return tag_calls(l_max) if method == "tag" else 1


def _lines(path: str | None) -> int:
    """Non-empty lines of a JSONL input (0 when it cannot be read)."""
    try:
        return sum(1 for line in Path(path or "").read_text(encoding="utf-8").split("\n") if line.strip())
    except OSError:
        return 0


def _main_model(args: argparse.Namespace) -> str:
    """The spec most of a job's calls go to: --model, else $UNVEIL_MODEL, else the default."""

    from agents.spec import DEFAULT_SPEC

    return str(getattr(args, "model", None) or env_str("UNVEIL_MODEL") or DEFAULT_SPEC)


def _evaluate_detection(args: argparse.Namespace) -> list[tuple[str, int, int, str]]:
    """(what, samples, calls per sample, model) per configuration of `evaluate detection`."""
    from evaluation.datasets import load_detection
    from unveil.commands.evaluate import _named_datasets

    total = 0
    for path, fmt in _named_datasets(args).values():
        items = load_detection(path, fmt, include_benign=args.include_benign)
        total += len(items[: args.limit] if args.limit else items)
    rows = []
    for model in args.detectors or [_main_model(args)]:
        for method in args.methods:
            depths = [args.l_max, *args.l_max_ablation] if method == "tag" else [None]
            rows += [(f"{method} l_max={d}" if d else method, total, detection_calls(method, d), model) for d in depths]
    return rows


def _evaluate_ipr(args: argparse.Namespace) -> list[tuple[str, int, int, str]]:
    """(what, prompts, calls per prompt, model) per method of `evaluate ipr` (generators and scorers make no model
    calls)."""
    from evaluation.datasets import load_prompts
    from tools.datafiles import IPR_EVAL_PROMPTS, data_file

    items = load_prompts(
        args.prompts or data_file(IPR_EVAL_PROMPTS),
        categories=args.categories,
        limit_per_category=args.limit_per_category,
    )
    per = (1 if args.with_rewriter else 0) + args.images_per_prompt * max(args.ipr_t_max, default=0)
    return [(f"{m}", len(items), per, args.refiner_model or _main_model(args)) for m in args.methods]


def estimate(args: argparse.Namespace) -> list[tuple[str, int, int, str]]:
    """(what, samples, model calls per sample, model) of one job: sample counts from its inputs, calls per sample
    by method (an upper bound for TAG and IPR, which can stop early; cache hits cost nothing)."""
    from tools.t2i.defaults import IPR_T_MAX

    if args.command == "detect":
        n = 1 if args.text else _lines(args.input) if args.input else _lines(str(_examples()))
        return [(args.method, n, detection_calls(args.method, args.l_max), _main_model(args))]
    if args.command == "refine":
        n = _lines(args.input) if args.input else 1
        return [("ipr", n, args.t_max if args.t_max is not None else IPR_T_MAX, args.refiner or _main_model(args))]
    if args.command == "generate":
        rounds, blind = args.max_rounds or 3, 4 if args.n_blind is None else args.n_blind
        return [("ctd", args.n, 1 + rounds * (2 + blind), _main_model(args))]
    return _evaluate_detection(args) if args.evaluation == "detection" else _evaluate_ipr(args)


def _examples() -> Path:
    """The bundled example pairs `unveil detect` runs without --input."""
    from unveil.commands.detect import EXAMPLES

    return EXAMPLES


def call_cost(spec: str) -> float:
    """The dollars of one call of `TOKENS_PER_CALL` on `spec`, from the price table (0 for local models)."""
    from agents.spec import ModelSpec
    from agents.usage import cost_of

    parsed = ModelSpec.parse(spec)
    return cost_of(parsed.provider, parsed.model, *TOKENS_PER_CALL)


def print_plan(jobs: list[Job], path: Path, digest: str) -> None:
    """The dry run: each job's command line and its estimated calls and cost, then the totals."""
    print(f"run file {path} (sha256 {digest[:16]}): {len(jobs)} job(s)")
    calls_total, cost_total = 0, 0.0
    for job in jobs:
        print(f"\n{job.name}\n  {_line(job.argv)}")
        for what, n, per, model in estimate(job.args):
            calls, cost = n * per, n * per * call_cost(model)
            calls_total, cost_total = calls_total + calls, cost_total + cost
            print(f"  {what}: {n} samples x {per} calls = {calls} calls on {model}, about ${cost:.2f}")
    print(
        f"\nestimated: {calls_total} model calls, about ${cost_total:.2f} (at most; {TOKENS_PER_CALL[0]}+"
        f"{TOKENS_PER_CALL[1]} tokens a call at the price table's rates; cached calls cost nothing)"
    )


def run_jobs(jobs: list[Job]) -> int:
    """Run the jobs in order, each as its command would (its engine, its errors as one line); every job runs
    whatever the others did. Returns the gravest exit code (a bug's 70, then 1, 3, 2 and 0)."""
    from runner.engine import engine_session
    from unveil.commands.common import engine_settings
    from unveil.commands.report import report_error

    codes = []
    for job in jobs:
        print(f"unveil run: {job.name}: {_line(job.argv)}", file=sys.stderr, flush=True)
        try:
            with engine_session(engine_settings(job.args)):
                rc = int(job.args.func(job.args) or 0)
        except SystemExit as exc:  # an exit of a library the job called (argparse's own are met when planning)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            rc = 1 if isinstance(exc.code, str) else int(exc.code or 0)
        except Exception as exc:  # noqa: BLE001 - a job that cannot run is reported; the next one runs
            rc = report_error(job.args, exc)
        codes.append(rc)
    for job, rc in zip(jobs, codes, strict=True):
        print(f"  exit {rc}: {job.name}", file=sys.stderr)
    return next((c for c in SEVERITY if c in codes), max(codes, default=0))


def run(args: argparse.Namespace) -> int:
    """Plan the run file's jobs (refusing what no command takes), then print the plan or run them."""
    path = Path(args.file)
    jobs, digest = plan(path)
    if args.dry_run:
        print_plan(jobs, path, digest)
        return 0
    return run_jobs(jobs)
