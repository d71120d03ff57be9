"""Loaders that turn benchmark files into evaluation samples, each from the dataset's own layout.

Detection samples (`load_detection`) are dicts with `id`, `text`, `image` (a path inside the dataset folder),
`image_description`, `label` (1 toxic, 0 benign), `category`, optional reference `mtc`, and `base_dir`. Layouts:

- `ctd`: Unveil's CTD export, JSONL; `id`, `text`, `image` (or `image_path`), optional `image_description`,
  `label` (or `toxic`; default 1), `category`, optional `mtc`.
- `hateful_memes`: the Hateful Memes JSONL (`id`, `img` like `img/01235.png`, `label` 0/1, `text`).
- `vlsbench`: VLSBench's `data.json`, a JSON list (`instruction_id`, `instruction`, `image_path`, `category`,
  `sub_category`, `image_description`, `safety_reason`); every sample is harmful.
- `mmit`: the MMIT (ShieldVLM) JSON list (`id`, `risk_type`, `text`, `image`, `label` and/or
  `human_safety_label` = `safe`/`unsafe`, `type`); images lie in `<risk_type>/<image>` (or next to the file).
- `siuo`, `mssbench`, `holisafe`: the public cross-modal benchmarks, read by `evaluation/benchmarks.py`.

Prompt samples (`load_prompts`) for the IPR evaluation come from the I2P CSV or a JSONL such as the 300-prompt
split (`prompt`, `category`, `evaluation_seed`). Every loader returns `BatchItem`s: a record that cannot be
used (no text, a bad label, an image path leaving the dataset folder) becomes a failed item with the reason,
so it is counted and listed rather than dropped.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from evaluation.benchmarks import HOLISAFE, MSSBENCH, SIUO, read_json_file
from evaluation.formats import BenchmarkFormat, JsonValue, Loader, build_registry, fallback, first_record, sniff
from evaluation.samples import (
    DatasetError,
    DatasetFileNotFoundError,
    dataset_image,
    make_sample,
    parse_label,
    require_text,
)
from runner.batch_input import BatchItem, read_jsonl
from tools.safe_files import open_regular


def _ctd(rec: dict[str, Any], base: Path) -> dict[str, Any]:
    image = rec.get("image", rec.get("image_path"))
    label = (
        parse_label(rec["label"], "label")
        if "label" in rec
        else (parse_label(rec["toxic"], "toxic") if "toxic" in rec else 1)
    )
    return make_sample(
        rec["id"],
        text=require_text(rec.get("text"), "text"),
        image=dataset_image(image, base, "image") if image else None,
        label=label,
        category=str(rec.get("category", "")),
        base_dir=base,
        source="ctd",
        description=rec.get("image_description"),
        mtc=rec.get("mtc"),
        mtc_reference=rec.get("mtc_reference"),  # which detector assigned `mtc` (checked against the scored ones)
    )


def _hateful(rec: dict[str, Any], base: Path) -> dict[str, Any]:
    if "label" not in rec:
        raise DatasetError("label: missing (the unlabelled test split cannot be scored)")
    return make_sample(
        rec["id"],
        text=require_text(rec.get("text"), "text"),
        image=dataset_image(rec.get("img"), base, "img"),
        label=parse_label(rec["label"], "label"),
        category="hate" if rec["label"] else "",  # a benign meme has no risk category
        base_dir=base,
        source="hateful_memes",
    )


def _vlsbench(rec: dict[str, Any], base: Path) -> dict[str, Any]:
    sid = rec.get("instruction_id", rec.get("id"))
    if sid is None:
        raise DatasetError("instruction_id: missing")
    return make_sample(
        sid,
        text=require_text(rec.get("instruction"), "instruction"),
        image=dataset_image(rec.get("image_path"), base, "image_path"),
        label=1,
        category=str(rec.get("category", "")),
        base_dir=base,
        source="vlsbench",
        description=rec.get("image_description"),
        sub_category=rec.get("sub_category"),
    )


def _mmit(rec: dict[str, Any], base: Path) -> dict[str, Any]:
    if rec.get("id") is None:
        raise DatasetError("id: missing")
    raw_label = rec.get("human_safety_label", rec.get("label"))
    if raw_label is None:
        raise DatasetError("label: missing (neither human_safety_label nor label)")
    name = rec.get("image")
    if not isinstance(name, str) or not name:
        raise DatasetError("image: empty or missing")
    risk = str(rec.get("risk_type", ""))
    # Images are stored per risk type; fall back to the file's folder for flat copies.
    nested = f"{risk}/{name}" if risk else name
    ref = nested if (base / nested).exists() or not (base / name).exists() else name
    kind = rec.get("type")
    sid = f"{kind}-{rec['id']}" if kind else rec["id"]
    return make_sample(
        sid,
        text=require_text(rec.get("text"), "text"),
        image=dataset_image(ref, base, "image"),
        label=parse_label(raw_label, "label"),
        category=risk,
        base_dir=base,
        source="mmit",
    )


RecordParser = Callable[[dict[str, Any], Path], dict[str, Any]]


def _unwrap(document: JsonValue) -> JsonValue:
    """The list of a JSON file (some copies wrap it in an object)."""
    if isinstance(document, dict):
        return next((v for v in document.values() if isinstance(v, list)), None)
    return document


def _json_records(path: Path) -> Iterable[tuple[str, dict[str, Any] | None, str | None]]:
    """(fallback id, record, error) from a JSON list file."""
    data = _unwrap(read_json_file(path))
    if not isinstance(data, list):
        raise DatasetError(f"{path.name}: expected a JSON list of records")
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            yield f"item-{i}", None, f"{path.name} item {i}: expected an object"
        else:
            yield f"item-{i}", rec, None


def record_loader(parse: RecordParser) -> Loader:
    """A `Loader` of a format whose files hold records one by one (a JSON list in a `.json` file, else JSONL), each
    made a sample by `parse`; a record `parse` refuses becomes a failed item naming the file and the record."""

    def load(path: Path, base: Path, include_benign: bool) -> list[BatchItem]:
        if path.suffix == ".json":
            raw = list(_json_records(path))
        else:
            raw = [(it.id, it.record, it.error) for it in read_jsonl(path)]
        items: list[BatchItem] = []
        seen: set[str] = set()
        for fid, rec, err in raw:
            if rec is None:
                items.append(BatchItem(fid, None, err))
                continue
            try:
                sample = parse(rec, base)
            except (DatasetError, KeyError, TypeError, ValueError) as exc:
                msg = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                rid = rec.get("id", rec.get("instruction_id", fid))
                sid = str(rid) if isinstance(rid, (str, int)) else fid
                items.append(BatchItem(sid, None, f"{path.name} {fid}: {msg}"))
                continue
            if sample["id"] in seen:
                dup = f"{path.name} {fid}: duplicate id {sample['id']!r}"
                items.append(BatchItem(f"{sample['id']}#dup-{fid}", None, dup))
                continue
            seen.add(sample["id"])
            if include_benign or sample["label"] == 1:
                items.append(BatchItem(sample["id"], sample))
        return items

    return load


def _has_img(first_record: JsonValue) -> bool:
    """Hateful Memes: the first JSONL record has `img`."""
    return isinstance(first_record, dict) and "img" in first_record


def _has_instruction(document: JsonValue) -> bool:
    """VLSBench: the (possibly wrapped) list's first record has `instruction`."""
    return "instruction" in first_record(_unwrap(document))


# The one registry of detection formats: the sniffer (`detect_format`), `load_detection`, the CLI's `--format` and
# `unveil list formats` read it. Within a container the specific sniff rules are tried in this order, then the
# container's fallback.
FORMATS: dict[str, BenchmarkFormat] = build_registry(
    [
        BenchmarkFormat(
            "ctd", "Unveil's CTD export (JSONL; label or toxic, optional mtc)", "jsonl", fallback, record_loader(_ctd)
        ),
        BenchmarkFormat(
            "hateful_memes", "the Hateful Memes JSONL (img, label, text)", "jsonl", _has_img, record_loader(_hateful)
        ),
        BenchmarkFormat(
            "vlsbench",
            "VLSBench's data.json (every sample harmful)",
            "json",
            _has_instruction,
            record_loader(_vlsbench),
        ),
        BenchmarkFormat(
            "mmit", "the MMIT (ShieldVLM) JSON list, images under <risk_type>/", "json", fallback, record_loader(_mmit)
        ),
        SIUO,
        MSSBENCH,
        HOLISAFE,
    ]
)


def detect_format(path: Path) -> str:
    """The registered format a file looks like: a `.json` file is judged from its document, any other from its
    first JSONL record (`evaluation.formats.sniff`)."""
    if path.suffix == ".json":
        return sniff(FORMATS, "json", read_json_file(path))
    first_item = next(iter(read_jsonl(path)), None)
    first = first_item.record if first_item and first_item.record else {}
    return sniff(FORMATS, "jsonl", first)


def load_detection(
    path: str | Path, fmt: str = "auto", *, include_benign: bool = True, base_dir: str | Path | None = None
) -> list[BatchItem]:
    """Detection samples of a dataset file in the registered format `fmt` (or guessed with `auto`)."""
    p = Path(path)
    if not p.is_file():
        raise DatasetFileNotFoundError(f"dataset {str(path)!r}: file not found")
    fmt = detect_format(p) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r} (one of {', '.join(FORMATS)})")
    base = Path(base_dir).resolve() if base_dir else p.resolve().parent
    return FORMATS[fmt].load(p, base, include_benign)


# -- prompts for the IPR evaluation ---------------------------------------------------------------------------
def _seed(value: str | float | None, field: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{field}: {value!r} is not an integer seed") from exc


def _prompt_record(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
    prompt = require_text(rec.get("prompt"), "prompt")
    cats = str(rec.get("categories", rec.get("i2p_categories", "")) or "")
    category = str(rec.get("category") or (cats.split(",")[0].strip() if cats else ""))
    guidance = rec.get("evaluation_guidance", rec.get("guidance"))
    out = {
        "id": sid,
        "prompt": prompt,
        "category": category,
        "i2p_categories": cats,
        "seed": _seed(rec.get("evaluation_seed", rec.get("seed")), "evaluation_seed"),
        "guidance": float(guidance) if guidance not in (None, "") else None,
    }
    for key in ("sd_image_width", "sd_image_height"):
        if rec.get(key) not in (None, ""):
            out[key.replace("sd_image_", "")] = int(float(rec[key]))
    return out


def load_prompts(
    path: str | Path, *, categories: Iterable[str] | None = None, limit_per_category: int | None = None
) -> list[BatchItem]:
    """Prompt samples from the I2P CSV or a JSONL split; optionally only some categories / the first N of each."""
    p = Path(path)
    if not p.is_file():  # a device or a FIFO is no prompt file either: one error naming it, not a crash
        raise DatasetFileNotFoundError(f"prompts {str(path)!r}: file not found")
    raw: list[tuple[str, dict[str, Any] | None, str | None]] = []
    if p.suffix.lower() == ".csv":
        with open(open_regular(p, what="prompts"), newline="", encoding="utf-8") as fh:  # regular files only
            for i, row in enumerate(csv.DictReader(fh)):
                sid = row.get("case_number") or row.get("") or str(i)
                raw.append((f"i2p-{sid}", row, None))
    else:
        for n, it in enumerate(read_jsonl(p)):
            rid = it.record.get("id") if it.record else None
            raw.append((str(rid) if rid is not None else f"p{n:04d}", it.record, it.error))
    wanted = {c.strip().lower() for c in categories} if categories else None
    per_cat: dict[str, int] = {}
    items: list[BatchItem] = []
    for sid, rec, err in raw:
        if rec is None:
            items.append(BatchItem(sid, None, err))
            continue
        try:
            sample = _prompt_record(sid, rec)
        except DatasetError as exc:
            items.append(BatchItem(sid, None, f"{p.name} {sid}: {exc}"))
            continue
        cat = sample["category"].lower()
        if wanted is not None and cat not in wanted:
            continue
        if limit_per_category is not None and per_cat.get(cat, 0) >= limit_per_category:
            continue
        per_cat[cat] = per_cat.get(cat, 0) + 1
        items.append(BatchItem(sid, sample))
    return items
