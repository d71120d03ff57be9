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

from unveil.commands.inputs import RunFileError as RunFileError
from unveil.commands.report import BUG_EXIT
from unveil.commands.run_estimate import TOKENS_PER_CALL, estimate, over_cap

COMMANDS = ("detect", "evaluate detection", "evaluate ipr", "refine", "generate")
JOB_KEYS = ("command", "name")
# A run file is written by hand: larger than this is not one (or it is a device, or a file grown without end).
MAX_RUN_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 32  # a run file's tables and lists nest 3 levels
MAX_EXPANDED = 4 * MAX_RUN_FILE_BYTES  # items and characters of its values, YAML aliases counted each time used
MAX_QUOTED = 300  # characters of a value or a parser's message quoted in an error
# Exit codes by severity: a bug, could not run, incomplete (a spending cap stopped it), a quality gate missed,
# some samples failed, all well.
SEVERITY = (BUG_EXIT, 1, 4, 3, 2, 0)  # 4: `unveil.commands.common.STOPPED_EXIT`


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
    """The run file's content and its SHA-256. A file that is not a regular file, is over `MAX_RUN_FILE_BYTES`,
    cannot be parsed, nests deeper than `MAX_DEPTH` or expands (YAML aliases) past `MAX_EXPANDED` is a
    `RunFileError` naming it: `--dry-run` is how a file from someone else is checked."""
    from tools.safe_files import read_named_file

    raw = read_named_file(path, MAX_RUN_FILE_BYTES, what="run file", error=RunFileError)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        data = _parse(path, raw)
    except RecursionError:
        raise RunFileError(f"run file {str(path)!r}: nested too deeply to be a run file") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise RunFileError(f"run file {str(path)!r}: expected one or more [[jobs]] tables")
    _check_expansion(data, path)
    return data, digest


def _parse(path: Path, raw: bytes) -> object:
    """The parsed TOML or YAML of a run file; a parse error is a `RunFileError` naming it."""
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise RunFileError(
                    f"run file {str(path)!r}: YAML needs PyYAML (pip install pyyaml), or use TOML"
                ) from None
            try:
                return yaml.safe_load(raw.decode("utf-8"))
            except yaml.YAMLError as exc:
                raise RunFileError(f"run file {str(path)!r}: {_cut(str(exc))}") from exc
        import tomllib

        return tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError is a ValueError
        if isinstance(exc, RunFileError):
            raise
        raise RunFileError(f"run file {str(path)!r}: {_cut(str(exc))}") from exc


def _check_expansion(data: object, path: Path) -> None:
    """Refuse a file whose values nest deeper than `MAX_DEPTH` or, counted as they expand (a YAML alias counts each
    time it is used), hold more than `MAX_EXPANDED` items and characters: a 1.2 KB file of nested aliases expands
    to hundreds of MB wherever it is joined or quoted. The walk stops at the first limit, so it costs no more."""
    stack: list[tuple[object, int]] = [(data, 0)]
    size = 0
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RunFileError(f"run file {str(path)!r}: values nested deeper than {MAX_DEPTH} levels")
        size += 1 + (len(value) if isinstance(value, str) else 0)
        if size > MAX_EXPANDED:
            raise RunFileError(
                f"run file {str(path)!r}: its values expand past {MAX_EXPANDED:,} items and characters (YAML aliases "
                "used over and over?)"
            )
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for kv in value.items() for v in kv)
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _cut(text: str) -> str:
    """A message from a parser or a value quoted in an error, at most `MAX_QUOTED` characters."""
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "..."


def _shown(value: object) -> str:
    """A value of the file as quoted in an error: its `repr`, bounded however large or nested it is."""
    import reprlib

    short = reprlib.Repr()  # its limits are attributes (keywords only from Python 3.12)
    short.maxlevel, short.maxdict, short.maxlist, short.maxstring, short.maxother, short.maxlong = 3, 6, 6, 80, 80, 40
    return _cut(short.repr(value))


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
        value = [f"{_scalar(key, k)}={_scalar(key, v)}" for k, v in value.items()]
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
        raise RunFileError(f"key {_shown(key)}: expected a string or a number, got {_shown(value)}")
    return str(value)


def _job_argv(job: dict[str, Any], shared: dict[str, Any], number: int) -> tuple[str, list[str]]:
    """(name, command line without `unveil`) of one job table, with the shared keys its command takes."""
    command = job.get("command")
    if command not in COMMANDS:
        raise RunFileError(f"job {number}: command {_shown(command)}; expected one of {', '.join(COMMANDS)}")
    name = job.get("name") or f"job {number} ({command})"
    if not isinstance(name, str):
        raise RunFileError(f"job {number}: name {_shown(name)}; expected a string")
    keys = option_keys(command_parser(command))
    unknown = sorted(k for k in job if k not in keys and k not in JOB_KEYS)
    if unknown:
        shown = _cut(", ".join(unknown))
        raise RunFileError(f"{_cut(name)}: unknown key(s) {shown}; `{command}` takes: {', '.join(sorted(keys))}")
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
            raise RunFileError(f"{where}: the key {_shown(name)} is given twice")
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
            f"run file {str(path)!r}: top-level key(s) {_cut(', '.join(stray))} taken by none of its jobs; valid: "
            + ", ".join(sorted(taken))
        )
    parser = build_parser()
    jobs = []
    for number, table in enumerate(tables, 1):
        name, argv = _job_argv(table, shared, number)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            shown = _cut(shlex.join(argv))
            raise RunFileError(f"{_cut(name)}: `unveil {shown}` is refused (the error is above)") from exc
        args.command_line = f"unveil run {path} (sha256 {digest}; {name}): {_line(argv)}"
        jobs.append(Job(name, argv, args))
    return jobs, digest


def _line(argv: list[str]) -> str:
    """A job's command line as shown and recorded (credentials redacted)."""
    from unveil.commands.parser import command_line

    return command_line(argv)


def print_plan(jobs: list[Job], path: Path, digest: str) -> None:
    """The dry run: each job's command line and its estimated calls and cost, a warning where that exceeds the
    job's cap, then the totals."""
    print(f"run file {path} (sha256 {digest[:16]}): {len(jobs)} job(s)")
    calls_total, cost_total = 0, 0.0
    for job in jobs:
        print(f"\n{job.name}\n  {_line(job.argv)}")
        job_calls, job_cost = 0, 0.0
        for row in estimate(job.args):
            calls, cost = row.samples * row.calls, row.cost
            job_calls, job_cost = job_calls + calls, job_cost + cost
            note = f" ({row.note})" if row.note else ""
            print(
                f"  {row.what}: {row.samples} samples x {row.calls} calls = {calls} calls on {row.model}, "
                f"about ${cost:.2f}{note}"
            )
        warning = over_cap(job.args, job_calls, job_cost)
        if warning:
            print(f"  warning: {warning}")
        calls_total, cost_total = calls_total + job_calls, cost_total + job_cost
    print(
        f"\nestimated: {calls_total} model calls, about ${cost_total:.2f} (at most; TAG from its reading, see "
        f"docs/tag.md; other calls {TOKENS_PER_CALL[0]}+{TOKENS_PER_CALL[1]} tokens each; at each model's rate "
        "in the price table; cached calls cost nothing)"
    )


def run_jobs(jobs: list[Job]) -> int:
    """Run the jobs in order, each as its command would (its engine, its errors as one line); every job runs
    whatever the others did; a job a spending cap stopped is reported as incomplete. Returns the gravest exit code
    (a bug's 70, then 1, 4, 3, 2 and 0)."""
    from runner.engine import engine_session
    from unveil.commands.common import STOPPED_EXIT, engine_settings
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
        stopped = rc == STOPPED_EXIT
        what = " (incomplete: a spending cap kept samples from starting; rerun with a higher cap)" if stopped else ""
        print(f"  exit {rc}: {job.name}{what}", file=sys.stderr)
    incomplete = [job.name for job, rc in zip(jobs, codes, strict=True) if rc == STOPPED_EXIT]
    if incomplete:
        print(f"unveil run: incomplete: {', '.join(incomplete)}", file=sys.stderr)
    return next((c for c in SEVERITY if c in codes), max(codes, default=0))


def run(args: argparse.Namespace) -> int:
    """Plan the run file's jobs (refusing what no command takes), then print the plan or run them."""
    path = Path(args.file)
    jobs, digest = plan(path)
    if args.dry_run:
        print_plan(jobs, path, digest)
        return 0
    return run_jobs(jobs)
