"""`unveil calls ID --results FILE`: the raw model calls of one sample of a results file.

For each call the sample made, in order: its role, model, tokens, cost, latency, whether the response cache
answered it, the messages exactly as sent (images by SHA-256) and the raw answer. The record lists its calls'
cache keys (`usage.calls`); their details live in the response cache (`agents.call_log`), so this reads the cache
the run used (`--cache`, default as the run's). Credentials never show: every text is redacted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tools.errors import CommandLineError, MissingFileError
from unveil.commands.common import json_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `calls` subcommand."""
    p = sub.add_parser(
        "calls",
        help="show the raw model calls of one sample: messages, answers, tokens, cost, latency",
        description="Reads the sample's record in a results file (of detect, refine, evaluate or a generate "
        "dataset folder) and its calls from the response cache the run used.",
    )
    p.add_argument("id", help="the sample's id")
    p.add_argument(
        "--results",
        required=True,
        metavar="FILE",
        help="results JSONL (an output of detect/refine, a run file under an evaluate --out's runs/) or a "
        "dataset folder of `unveil generate`",
    )
    p.add_argument("--cache", help="response cache file (default $UNVEIL_CACHE or ~/.cache/unveil/responses.sqlite)")
    p.add_argument("--json", action="store_true", help="print the calls as JSON")
    p.set_defaults(func=run)


def results_file(path: Path) -> Path:
    """The JSONL a `--results` value names: the file itself, or a dataset folder's samples file."""
    from runner.ctd_dataset import SAMPLES

    if path.is_dir():
        path = path / SAMPLES
    if not path.is_file():
        raise MissingFileError(f"--results {str(path)!r}: no such results file")
    return path


def load_calls(results: Path, sample_id: str, cache_path: str | None) -> list[dict[str, Any]]:
    """The calls of `sample_id` in `results`, looked up in the response cache at `cache_path` (default: the
    default cache). A missing sample or cache is an `UnveilError` naming it."""
    from agents.cache import ResponseCache, cache_off, default_cache_path
    from agents.call_log import sample_calls
    from tools.jsonl_files import done_records

    rec = done_records(results_file(results)).get(sample_id)
    if rec is None:
        raise CommandLineError(f"no sample {sample_id!r} in {results}")
    if not (rec.get("usage") or {}).get("calls"):
        raise CommandLineError(
            f"the record of {sample_id!r} lists no calls (made with the response cache off, by a "
            "version before calls were recorded, or a sample that made none)"
        )
    path = None if cache_path and cache_off(cache_path) else (Path(cache_path) if cache_path else default_cache_path())
    if path is None or not path.is_file():
        raise MissingFileError(f"no response cache at {path} (give the run's with --cache)")
    cache = ResponseCache(path)
    try:
        return sample_calls(rec["usage"], cache)
    finally:
        cache.close()


def _content_text(content: object) -> str:
    """A message's content as text: text blocks as they are, images by hash."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") == "image":
            parts.append(f"[image sha256={block.get('sha256') or block.get('url')} bytes={block.get('bytes', '?')}]")
        else:
            parts.append(json.dumps(block, ensure_ascii=False))
    return "\n".join(parts)


def format_call(call: dict[str, Any]) -> str:
    """One call as readable text: a head line, the counts, each message, the raw answer."""
    hit = "yes (answered by the cache; tokens and cost are the first call's)" if call["cache_hit"] else "no"
    lines = [f"== call {call['n']}: {call.get('role', '?')} on {call.get('model', '?')}; cache hit: {hit}"]
    if call.get("missing"):
        return "\n".join([*lines, f"   {call['missing']} (key {call['key']})"])
    lines.append(
        f"   tokens {call.get('input_tokens', 0)}+{call.get('output_tokens', 0)}, cost ${call.get('cost_usd', 0):.6f}, "
        f"latency {call.get('latency_s', 0):.3f} s, retries {call.get('retries', 0)}, key {call['key'][:16]}"
    )
    for m in call.get("messages") or []:
        lines += [f"-- {m.get('role')}", _content_text(m.get("content"))]
    lines += ["-- answer (raw)", str(call.get("raw", ""))]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the sample's calls, as text or JSON."""
    calls = load_calls(Path(args.results), args.id, args.cache)
    if args.json:
        print(json_text(calls))
    else:
        print("\n\n".join(format_call(c) for c in calls))
    missing = sum(1 for c in calls if c.get("missing"))
    print(f"{len(calls)} calls" + (f", {missing} not found in the cache" if missing else ""), file=sys.stderr)
    return 0
