"""`guard:template=FILE`: any other guard model, described by a file.

The file is either plain text (the guard's instruction; its answer is read with the `auto` parser) or JSON:
`{"name": ..., "instruction": ..., "task": ..., "output": "llama-guard" | "llavaguard" | "guardreasoner" | "auto",
"categories": {"CODE": "project category", ...}}`. `auto` tries the three known answer formats in turn.
"""

from __future__ import annotations

import json
from pathlib import Path

from agents.categories import is_category_name, vocabulary_name
from agents.guard.base import PROJECT_CATEGORIES, GuardDefinition, GuardParseError, GuardVerdict, Parser
from agents.guard.guardreasoner import parse_guardreasoner
from agents.guard.llama_guard import parse_llama_guard
from agents.guard.llavaguard import parse_llavaguard
from tools.errors import MissingFileError, UnveilError
from tools.safe_files import read_regular

PARSERS: dict[str, Parser] = {
    "llama-guard": parse_llama_guard,
    "llavaguard": parse_llavaguard,
    "guardreasoner": parse_guardreasoner,
}
# A guard's instruction is a prompt, not a data set: a bigger file is a mistake (or a device such as /dev/zero).
MAX_TEMPLATE_BYTES = 1024 * 1024
DEFAULT_TASK = "Give your safety assessment of the data above in the output format your instructions define."


class GuardTemplateError(UnveilError, ValueError):
    """A guard template file that cannot be used; the message names the file and, where one is at fault, the
    field."""


def parse_auto(raw: str, guard: GuardDefinition) -> GuardVerdict:
    """The first of the known answer formats that reads the answer."""
    for parser in PARSERS.values():
        try:
            return parser(raw, guard)
        except GuardParseError:
            continue
    raise GuardParseError(guard.name, "none of the known formats (safe/unsafe lines, JSON rating, Request: label)", raw)


def load_template_guard(path: str) -> GuardDefinition:
    """A guard from a template file; errors name the file and the field."""
    p = Path(path).expanduser()
    try:
        # A regular file only (a FIFO would hang the read, /dev/zero would never end), and capped.
        data = read_regular(p, MAX_TEMPLATE_BYTES, what="guard template")
    except FileNotFoundError:
        raise MissingFileError(f"guard template {path!r}: file not found") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GuardTemplateError(
            f"guard template {path!r}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    if p.suffix.lower() != ".json":
        if not text.strip():
            raise GuardTemplateError(f"guard template {path!r}: empty")
        return GuardDefinition(name=p.stem, instruction=text.strip(), task=DEFAULT_TASK, parser=parse_auto)
    try:
        spec = json.loads(text)
    except (ValueError, RecursionError) as exc:  # bad JSON, a number past Python's digit limit, deep nesting
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise GuardTemplateError(f"guard template {path!r}: not valid JSON ({why})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("instruction"), str) or not spec["instruction"].strip():
        raise GuardTemplateError(f"guard template {path!r}: field 'instruction' missing or empty")
    for name in ("name", "task"):
        if spec.get(name) is not None and not isinstance(spec[name], str):
            raise GuardTemplateError(f"guard template {path!r}: field {name!r} must be a string")
    output = spec.get("output", "auto")
    # A list or an object here raised TypeError (unhashable) from the lookup: an internal error naming nothing.
    if not isinstance(output, str) or (output != "auto" and output not in PARSERS):
        raise GuardTemplateError(
            f"guard template {path!r}: field 'output' {str(output)[:80]!r} is not one of auto, {', '.join(PARSERS)}"
        )
    cats = spec.get("categories", {})
    if not isinstance(cats, dict) or not all(isinstance(v, str) and is_category_name(v) for v in cats.values()):
        allowed = ", ".join(PROJECT_CATEGORIES)
        raise GuardTemplateError(f"guard template {path!r}: field 'categories' must map codes to one of {allowed}")
    return GuardDefinition(
        name=spec.get("name") or p.stem,
        instruction=spec["instruction"].strip(),
        task=spec.get("task") or DEFAULT_TASK,
        parser=parse_auto if output == "auto" else PARSERS[output],
        categories={str(k).upper(): vocabulary_name(v) for k, v in cats.items()},
    )
