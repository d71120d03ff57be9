"""Loaders of three public cross-modal safety benchmarks, each from the layout its authors publish, and their
registry entries (`SIUO`, `MSSBENCH`, `HOLISAFE`, listed in `evaluation.datasets.FORMATS`).

Every loader maps the benchmark onto the detection sample schema of `evaluation.datasets` (`id`, `text`,
`image`, `label` 1 unsafe / 0 safe, `category`, ...) and returns `BatchItem`s; a record it cannot use becomes a
failed item whose error names the file, the record and the field. Nothing is downloaded: the user points at a
local copy.

- `siuo` -- SIUO, "Safe Inputs but Unsafe Output" (arXiv 2406.15279, github.com/sinwang20/SIUO): `siuo_gen.json`
  (or `siuo_mcqa.json`), a JSON list of {`question_id`, `image` (a file name such as `S-01.png`), `question`,
  `category`, `safety_warning`, `reference_answer`}. Images lie in `images/` beside the file (or next to it).
  Every pair is safe alone and unsafe together, so every sample is labelled 1; SIUO has no negatives.
- `mssbench` -- MSSBench, multimodal situational safety (arXiv 2410.06172, github.com/eric-ai-lab/MSSBench):
  `combine.json`, an object {"chat": [...], "embodied": [...]}. A chat entry has `safe_image_path`,
  `unsafe_image_path` (under `chat/`), `intent`, `unsafe_image` (a description of the unsafe image), `Type` (the
  category) and `queries`; each query gives two samples, the same text with the safe image (label 0) and with
  the unsafe image (label 1). An embodied entry has `task`, `category`, `safe`/`unsafe` (image paths under
  `embodied/`) and `safe_instruction(s)`/`unsafe_instruction(s)`; each instruction pair gives a safe and an
  unsafe sample.
- `holisafe` -- HoliSafe-Bench (arXiv 2506.04704, github.com/youngwanLEE/holisafe): a JSON list of {`id`,
  `image` (e.g. `violence/terrorism/terrorism_79.jpg`, under `images/` or next to the file), `query`, `type`,
  `category`, `subcategory`, `image_safe`, `image_safety_label`}. `type` is one of SSS, SSU, SUU, USU, UUU
  (image, text, combination safe/unsafe); the last letter is the label.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from evaluation.formats import BenchmarkFormat, JsonValue, first_record
from evaluation.samples import DatasetError, dataset_image, make_sample, require_text
from runner.batch_input import BatchItem, duplicate_id, unique_id
from tools.jsonl_files import parse_json_line
from tools.safe_files import MAX_DATA_FILE_BYTES, UnreadableFileError, read_regular

HOLISAFE_TYPES = ("SSS", "SSU", "SUU", "USU", "UUU")


def read_json_file(path: Path) -> JsonValue:
    """The file's JSON value; every way it can fail (unreadable, not UTF-8, not JSON, an integer over Python's digit
    limit, nesting deeper than the parser allows) is one `DatasetError` naming the file and, where known, the line."""
    try:
        raw = read_regular(path, MAX_DATA_FILE_BYTES, what="benchmark file")  # regular, capped
    except UnreadableFileError as exc:
        raise DatasetError(f"{path.name}: {exc}") from exc
    except OSError as exc:
        raise DatasetError(f"{path.name}: cannot be read ({exc.strerror or exc})") from exc
    try:
        value: JsonValue = parse_json_line(raw)  # json's values are exactly JsonValue's
    except ValueError as exc:
        line = _error_line(raw, exc)
        at = f" at line {line}" if line else ""
        raise DatasetError(f"{path.name}: cannot be read as JSON{at}: {exc}") from exc
    return value


def _error_line(raw: bytes, exc: ValueError) -> int | None:
    """The line of a JSON file where parsing failed (the decoder's, a huge integer's, or where nesting is deepest)."""
    cause = exc.__cause__
    if isinstance(cause, json.JSONDecodeError):
        return cause.lineno
    if isinstance(cause, UnicodeDecodeError):
        return raw.count(b"\n", 0, cause.start) + 1
    if isinstance(cause, RecursionError):
        depth = deepest = at = 0
        in_string = escaped = False
        for k, byte in enumerate(raw):
            if in_string:
                escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)
            elif byte == 0x22:
                in_string = True
            elif byte in (0x5B, 0x7B):
                depth += 1
                if depth > deepest:
                    deepest, at = depth, k
            elif byte in (0x5D, 0x7D):
                depth -= 1
        return raw.count(b"\n", 0, at) + 1
    big = re.search(rb"\d{%d,}" % (sys.get_int_max_str_digits() or 4300), raw)
    return raw.count(b"\n", 0, big.start()) + 1 if big else None


def _in_folder(base: Path, name: object, field: str, *folders: str) -> str:
    """The image path of `name`, looked up under each of `folders` of `base` first, then beside the file. An
    absolute path is kept as given (inside the dataset folder; outside it, one error naming the field)."""
    # `base / folder / "/abs"` is "/abs" itself: without the check an absolute path that exists was rewritten
    # under the folder as `folder//abs`.
    if isinstance(name, str) and name and "://" not in name and not Path(name).is_absolute():
        for folder in folders:
            if (base / folder / name).exists():
                return dataset_image(f"{folder}/{name}", base, field)
    return dataset_image(name, base, field)


def _collect(
    path: Path, rows: Iterator[tuple[str, Callable[[], list[dict[str, Any]]]]], include_benign: bool
) -> list[BatchItem]:
    """Run each row's builder; a failing row becomes one failed item naming the file and the row."""
    # Ids as the batch reader makes them (`runner.batch_input.duplicate_id`): first every sample's id, so the ids
    # made for repeats (`ID#dup-item-N`) and for unusable rows never equal an id the file uses, and each is its own.
    built: list[tuple[int, str, list[dict[str, Any]] | None, str]] = []
    for k, (where, build) in enumerate(rows):
        try:
            built.append((k, where, build(), ""))
        except (DatasetError, KeyError, TypeError, ValueError, RecursionError) as exc:
            msg = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
            built.append((k, where, None, msg))
    taken = {str(s["id"]) for _, _, samples, _ in built for s in samples or ()}
    items: list[BatchItem] = []
    seen: set[str] = set()
    for k, where, samples, msg in built:
        if samples is None:
            items.append(BatchItem(unique_id(where, taken), None, f"{path.name} {where}: {msg}"))
            continue
        for s in samples:
            sid = str(s["id"])
            if sid in seen:
                items.append(
                    BatchItem(duplicate_id(sid, f"item-{k}", taken), None, f"{path.name} {where}: duplicate id {sid!r}")
                )
                continue
            seen.add(sid)
            if include_benign or s["label"] == 1:
                items.append(BatchItem(sid, s))
    return items


def _records(path: Path, data: object, key: str | None = None) -> list[object]:
    if key is not None:
        if not isinstance(data, dict) or key not in data:
            raise DatasetError(f"{path.name}: field {key!r} missing (expected 'chat' and 'embodied' lists)")
        data = data[key]
    if not isinstance(data, list):
        raise DatasetError(f"{path.name}{f' field {key!r}' if key else ''}: expected a JSON list of records")
    return data


def _obj(rec: object) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise DatasetError("expected an object")
    return rec


# -- SIUO -----------------------------------------------------------------------------------------------------
def load_siuo(path: Path, base: Path, include_benign: bool = True) -> list[BatchItem]:
    """SIUO's `siuo_gen.json`/`siuo_mcqa.json`: every pair is unsafe only in combination (label 1)."""
    data = _records(path, read_json_file(path))

    def row(i: int, rec: object) -> tuple[str, Callable[[], list[dict[str, Any]]]]:
        qid = rec.get("question_id") if isinstance(rec, dict) else None

        def build() -> list[dict[str, Any]]:
            r = _obj(rec)
            if r.get("question_id") is None:
                raise DatasetError("question_id: missing")
            return [
                make_sample(
                    f"siuo-{r['question_id']}",
                    text=require_text(r.get("question"), "question"),
                    image=_in_folder(base, r.get("image"), "image", "images"),
                    label=1,
                    category=str(r.get("category", "")),
                    base_dir=base,
                    source="siuo",
                    safety_warning=r.get("safety_warning"),
                )
            ]

        return (f"question_id {qid}" if qid is not None else f"item {i}"), build

    return _collect(path, (row(i, rec) for i, rec in enumerate(data)), include_benign)


# -- MSSBench -------------------------------------------------------------------------------------------------
def _strings(rec: dict[str, Any], plural: str, singular: str) -> list[str]:
    value = rec.get(plural, rec.get(singular))
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{plural}: empty or missing (nor {singular})")
    return [require_text(v, f"{plural}[{k}]") for k, v in enumerate(value)]


def load_mssbench(path: Path, base: Path, include_benign: bool = True) -> list[BatchItem]:
    """MSSBench's `combine.json`: each query with its safe image (label 0) and its unsafe image (label 1)."""
    data = read_json_file(path)
    chat, embodied = _records(path, data, "chat"), _records(path, data, "embodied")
    rows: list[tuple[str, Callable[[], list[dict[str, Any]]]]] = [
        *((f"chat[{i}]", partial(_mss_chat_samples, i, rec, base)) for i, rec in enumerate(chat)),
        *((f"embodied[{i}]", partial(_mss_embodied_samples, i, rec, base)) for i, rec in enumerate(embodied)),
    ]
    return _collect(path, iter(rows), include_benign)


def _mss_chat_samples(i: int, rec: object, base: Path) -> list[dict[str, Any]]:
    """The samples of chat row `i`: per query, one with the safe image (label 0) and one with the unsafe image."""
    r = _obj(rec)
    safe = _in_folder(base, r.get("safe_image_path"), "safe_image_path", "chat")
    unsafe = _in_folder(base, r.get("unsafe_image_path"), "unsafe_image_path", "chat")
    cat = str(r.get("Type", r.get("category", "")))
    out = []
    for k, q in enumerate(_strings(r, "queries", "query")):
        common: dict[str, Any] = {
            "text": q,
            "category": cat,
            "base_dir": base,
            "source": "mssbench",
            "task": "chat",
            "intent": r.get("intent"),
        }
        out.append(make_sample(f"mss-chat-{i}-{k}-safe", image=safe, label=0, **common))
        out.append(
            make_sample(f"mss-chat-{i}-{k}-unsafe", image=unsafe, label=1, description=r.get("unsafe_image"), **common)
        )
    return out


def _mss_embodied_samples(i: int, rec: object, base: Path) -> list[dict[str, Any]]:
    """The samples of embodied row `i`: per instruction pair, the safe instruction with the safe observation
    (label 0) and the unsafe one with the unsafe observation (label 1)."""
    r = _obj(rec)
    safe = _in_folder(base, r.get("safe"), "safe", "embodied")
    unsafe = _in_folder(base, r.get("unsafe"), "unsafe", "embodied")
    safe_i = _strings(r, "safe_instructions", "safe_instruction")
    unsafe_i = _strings(r, "unsafe_instructions", "unsafe_instruction")
    if len(safe_i) != len(unsafe_i):
        raise DatasetError(f"safe_instructions/unsafe_instructions: {len(safe_i)} vs {len(unsafe_i)} items")
    cat = str(r.get("category", r.get("Type", "")))
    out = []
    for k, (s_text, u_text) in enumerate(zip(safe_i, unsafe_i, strict=True)):
        common: dict[str, Any] = {"category": cat, "base_dir": base, "source": "mssbench", "task": "embodied"}
        out.append(
            make_sample(
                f"mss-emb-{i}-{k}-safe",
                text=s_text,
                image=safe,
                label=0,
                description=r.get("observation_safe"),
                **common,
            )
        )
        out.append(
            make_sample(
                f"mss-emb-{i}-{k}-unsafe",
                text=u_text,
                image=unsafe,
                label=1,
                description=r.get("observation_unsafe"),
                **common,
            )
        )
    return out


# -- HoliSafe -------------------------------------------------------------------------------------------------
def load_holisafe(path: Path, base: Path, include_benign: bool = True) -> list[BatchItem]:
    """HoliSafe-Bench's JSON list: the label is the last letter of `type` (U unsafe, S safe)."""
    data = _records(path, read_json_file(path))

    def row(i: int, rec: object) -> tuple[str, Callable[[], list[dict[str, Any]]]]:
        rid = rec.get("id") if isinstance(rec, dict) else None

        def build() -> list[dict[str, Any]]:
            r = _obj(rec)
            if r.get("id") is None:
                raise DatasetError("id: missing")
            kind = r.get("type")
            if kind not in HOLISAFE_TYPES:
                raise DatasetError(f"type: {kind!r} is not one of {', '.join(HOLISAFE_TYPES)}")
            return [
                make_sample(
                    f"holisafe-{r['id']}",
                    text=require_text(r.get("query"), "query"),
                    image=_in_folder(base, r.get("image"), "image", "images"),
                    label=int(kind[-1] == "U"),
                    category=str(r.get("category", "")),
                    base_dir=base,
                    source="holisafe",
                    sub_category=r.get("subcategory"),
                    holisafe_type=kind,
                )
            ]

        return (f"id {rid}" if rid is not None else f"item {i}"), build

    return _collect(path, (row(i, rec) for i, rec in enumerate(data)), include_benign)


def looks_like_mssbench(document: JsonValue) -> bool:
    """MSSBench's `combine.json`: an object with `chat` and `embodied`."""
    return isinstance(document, dict) and "chat" in document and "embodied" in document


def looks_like_siuo(document: JsonValue) -> bool:
    """SIUO: a list whose first record has `question_id` and `question`."""
    first = first_record(document)
    return "question_id" in first and "question" in first


def looks_like_holisafe(document: JsonValue) -> bool:
    """HoliSafe-Bench: a list whose first record has `query`, `type` and `image`."""
    first = first_record(document)
    return "query" in first and "type" in first and "image" in first


SIUO = BenchmarkFormat(
    "siuo", "SIUO's siuo_gen.json / siuo_mcqa.json (every pair unsafe together)", "json", looks_like_siuo, load_siuo
)
MSSBENCH = BenchmarkFormat(
    "mssbench",
    "MSSBench's combine.json (chat and embodied; safe and unsafe image per query)",
    "json",
    looks_like_mssbench,
    load_mssbench,
)
HOLISAFE = BenchmarkFormat(
    "holisafe",
    "HoliSafe-Bench's JSON list (label: the last letter of type)",
    "json",
    looks_like_holisafe,
    load_holisafe,
)
