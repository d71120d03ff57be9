"""Training data for the IPR refiner: prompt sources, the labelled image dataset, ToxiClean-IT and POSI pairs.

Every example is formatted with the refiner role's own messages (`agents.refiner.build_refiner_messages`),
converted to a chat-template conversation the way the `hf:` provider converts them at inference, so a trained
adapter sees the same text at training and in the IPR graph. Images are placeholders in the conversation and
travel in the dataset's `images` (SFT) or `image` (GRPO) column, as TRL expects.

Every loader takes the user's own path; the repository's copies of the papers' files are in `data/`
(`tools.datafiles`).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.env import SettingError
from tools.errors import InputDataError, MissingFileError
from tools.image_store import ImageStore
from tools.jsonl_files import MAX_LINE_BYTES, iter_lines
from tools.safe_files import MAX_DATA_FILE_BYTES, read_regular
from training.answers import format_answer

if TYPE_CHECKING:
    from datasets import Dataset
    from PIL import Image

    from training.reward import ImagePool

PROMPT_FIELDS = ("prompt", "input", "text", "query")

_PIXEL = None


def _pixel_data_url() -> str:
    """A 1x1 PNG data URL: stands in for the image while the conversation text is built."""
    global _PIXEL
    if _PIXEL is None:
        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (1, 1)).save(buf, format="PNG")
        _PIXEL = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return _PIXEL


class _PlaceholderStore(ImageStore):
    """Just enough of an ImageStore for building messages whose images are replaced by placeholders (no folder is
    created: only `data_url` is used)."""

    def __init__(self) -> None:
        pass

    def data_url(self, image_id: str) -> str:
        return _pixel_data_url()


def refiner_conversation(original_prompt: str, *, with_image: bool = True) -> list[dict[str, Any]]:
    """The refiner's prompt as a chat-template conversation with an `{"type": "image"}` placeholder."""
    from agents.providers.hf_vlm import to_hf_conversation
    from agents.refiner import build_refiner_messages

    messages = build_refiner_messages(
        original_prompt,
        "placeholder" if with_image else None,
        store=_PlaceholderStore() if with_image else None,
        vision=with_image,
    )
    convo, _ = to_hf_conversation(messages)
    # Arrow needs one type per column, so the system text becomes a one-part list like the user turn; Qwen-style
    # chat templates render both spellings to the same tokens.
    for turn in convo:
        if isinstance(turn["content"], str):
            turn["content"] = [{"type": "text", "text": turn["content"]}]
    return convo


def completion_turn(text: str) -> list[dict[str, Any]]:
    """The assistant turn holding a training target."""
    return [{"role": "assistant", "content": [{"type": "text", "text": text}]}]


# -- prompt sources -----------------------------------------------------------------------------------------------


def _prompt_of(record: dict[str, Any], field: str | None) -> str | None:
    keys = (field,) if field else PROMPT_FIELDS
    for key in keys:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def load_prompts(path: str | Path, *, field: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Prompts from a JSONL/JSON/CSV/TXT file as `{"id", "prompt", ...}` records.

    JSON may be a list of objects (POSI's `input`/`output` layout works) or of strings; objects and CSV rows take
    the prompt from `field` or the first of prompt/input/text/query; ids come from an `id` field or the position.
    """
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"prompts {str(path)!r}: file not found")
    rows: list[Any]
    suffix = p.suffix.lower()
    try:
        text = read_regular(p, MAX_DATA_FILE_BYTES, what="prompts").decode("utf-8")  # regular, capped
    except UnicodeDecodeError as exc:
        raise InputDataError(f"prompts {str(path)!r}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    if suffix == ".jsonl":
        rows = []
        for lineno, line in enumerate(text.split("\n"), 1):  # JSONL splits on \n only (U+2028 is data)
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputDataError(f"{p.name} line {lineno}: not valid JSON ({exc.msg})") from exc
    elif suffix == ".json":
        data = json.loads(text)
        rows = data if isinstance(data, list) else data.get("data") or data.get("prompts") or []
    elif suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    else:
        rows = [ln.strip() for ln in text.split("\n") if ln.strip()]
    return prompts_from_records(rows, field=field, limit=limit)


def prompts_from_records(
    rows: Iterable[Any], *, field: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """`{"id", "prompt", ...}` records from rows that are strings or objects; other rows and rows without a
    string prompt are left out."""
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        if not isinstance(row, (str, dict)):
            continue  # a number or list has no prompt (JSONL batches report such lines through read_jsonl)
        rec = {"prompt": row} if isinstance(row, str) else dict(row)
        prompt = _prompt_of(rec, field)
        if prompt is None:
            continue
        rid = rec.get("id", i)
        source = next(
            k
            for k in ((field,) if field else PROMPT_FIELDS)
            if rec.get(k) == prompt or str(rec.get(k, "")).strip() == prompt
        )
        extra = {k: v for k, v in rec.items() if k not in ("id", "prompt", "instruction", "output", source)}
        out.append({**extra, "id": str(rid), "prompt": prompt})
        if limit is not None and len(out) >= limit:
            break
    return out


# The IPR paper's RL set (section 5): POSI's data/ppo_data.json, kept as data/posi/rl_prompts_842.json. A file of
# that name (or POSI's own) with another row count is a truncated or different copy, not the paper's set.
PAPER_RL_FILE_NAMES = ("rl_prompts_842.json", "ppo_data.json")
PAPER_RL_ROWS = 842

log = logging.getLogger("unveil.training.data")


@dataclass(frozen=True)
class PromptSetReport:
    """What a prompt set holds: rows, distinct prompts, the prompts listed more than once, and the prompts it
    shares with the SFT prompts (exact text after trimming)."""

    rows: int
    unique: int
    duplicates: tuple[str, ...]
    sft_overlap: tuple[str, ...]

    def summary(self) -> str:
        """One line for the log."""
        return (
            f"{self.rows} rows, {self.unique} distinct prompts ({self.rows - self.unique} repeated rows), "
            f"{len(self.sft_overlap)} also among the SFT prompts"
        )


def prompt_set_report(records: Iterable[dict[str, Any]], sft_prompts: Iterable[str] = ()) -> PromptSetReport:
    """Rows, distinct prompts, duplicates and overlap with `sft_prompts` of loaded prompt records."""
    prompts = [str(r["prompt"]).strip() for r in records]
    seen: set[str] = set()
    dups: list[str] = []
    for p in prompts:
        if p in seen and p not in dups:
            dups.append(p)
        seen.add(p)
    sft = {str(p).strip() for p in sft_prompts}
    overlap = tuple(dict.fromkeys(p for p in prompts if p in sft))
    return PromptSetReport(rows=len(prompts), unique=len(seen), duplicates=tuple(dups), sft_overlap=overlap)


def check_rl_prompts(
    path: str | Path, records: list[dict[str, Any]], *, sft_pairs: str | Path | None = None
) -> PromptSetReport:
    """Check an RL prompt set when it is loaded: the paper's file must hold its 842 rows (else one error naming
    the file); duplicates and prompts shared with the SFT pairs (`sft_pairs`, by default the repository's copy of
    POSI's 3,390 pairs when present) are logged. The paper's set has 833 distinct prompts and 26 SFT prompts;
    training keeps every row, as the paper's code does (docs/training.md)."""
    from tools.datafiles import DATA_DIR, SFT_PAIRS

    name = Path(path).name
    if name in PAPER_RL_FILE_NAMES and len(records) != PAPER_RL_ROWS:
        raise InputDataError(
            f"RL prompts {str(path)!r}: the paper's RL set has {PAPER_RL_ROWS} prompts, this file has "
            f"{len(records)} (a truncated or different copy; the repository's is data/posi/{name})"
        )
    sft_file = Path(sft_pairs) if sft_pairs else DATA_DIR / SFT_PAIRS
    sft = [r["prompt"] for r in load_posi_pairs(sft_file)] if sft_file.is_file() else []
    report = prompt_set_report(records, sft)
    log.info("RL prompts %s: %s", path, report.summary())
    if report.duplicates:
        log.warning(
            "RL prompts %s: %d prompt(s) listed more than once (kept as in the file), e.g. %r",
            path,
            len(report.duplicates),
            report.duplicates[0],
        )
    if report.sft_overlap:
        log.warning(
            "RL prompts %s: %d prompt(s) are also SFT prompts of %s, e.g. %r",
            path,
            len(report.sft_overlap),
            sft_file.name,
            report.sft_overlap[0],
        )
    return report


def load_posi_pairs(path: str | Path) -> list[dict[str, Any]]:
    """POSI's toxic -> clean prompt pairs (`input`, `output`) as `{"id", "prompt", "answer"}` records."""
    data = json.loads(read_regular(path, MAX_DATA_FILE_BYTES, what="POSI pairs").decode("utf-8"))
    out = []
    for i, row in enumerate(data):
        toxic, clean = str(row.get("input", "")).strip(), str(row.get("output", "")).strip()
        if toxic and clean:
            out.append({"id": str(row.get("id", i)), "prompt": toxic, "answer": clean})
    return out


# -- SFT datasets -------------------------------------------------------------------------------------------------


def sft_example(prompt: str, target: str, image: Any | None) -> dict[str, Any]:
    """One prompt-completion example; the loss falls on the completion only."""
    ex: dict[str, Any] = {
        "prompt": refiner_conversation(prompt, with_image=image is not None),
        "completion": completion_turn(target),
    }
    if image is not None:
        ex["images"] = [image]
    return ex


def _resolve_image(rec: dict[str, Any], base_dir: Path, store: ImageStore | None) -> Image.Image:
    """A record's image as a PIL image: its `image` path (relative to the file), else its id in the store."""
    from tools.image_input import resolve_path
    from tools.image_store import decode_image, read_file_capped

    image_id = rec.get("image_id")
    if isinstance(image_id, str) and store is not None and hasattr(store, "has") and store.has(image_id):
        return store.open(image_id).convert("RGB")
    ref = rec.get("image") or rec.get("image_path")
    if isinstance(ref, str) and ref:
        # Checked like every other image input: a path may not leave the file's folder (build-data's absolute
        # paths into the image store are allowed), and a corrupt file or a bomb is refused with its name.
        allowed = [base_dir] + ([Path(store.root)] if store is not None and hasattr(store, "root") else [])
        path = Path(ref)
        if not path.is_absolute() or not any(Path(a).resolve() in path.resolve().parents for a in allowed):
            path = resolve_path(ref, base_dir)
        if path.is_file():
            return decode_image(read_file_capped(path), name=str(path)).convert("RGB")  # size checked first
    if rec.get("image_id") and store is not None:
        return store.open(rec["image_id"]).convert("RGB")
    raise MissingFileError(f"record {rec.get('id')!r}: image {ref!r} not found (and no image_id in the store)")


def labelled_records(path: str | Path) -> list[dict[str, Any]]:
    """The completed records of a `unveil train build-data` output (failed ones are skipped)."""
    out = []
    for lineno, raw in iter_lines(path):  # regular files only, each line capped (never held whole)
        if raw is None:
            raise InputDataError(f"{Path(path).name} line {lineno}: line is over {MAX_LINE_BYTES} bytes")
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputDataError(f"{Path(path).name} line {lineno}: not a UTF-8 JSON record ({exc})") from exc
        if not isinstance(rec, dict):
            raise InputDataError(f"{Path(path).name} line {lineno}: expected a JSON object, got {type(rec).__name__}")
        if rec.get("status", "ok") == "ok" and rec.get("answer"):
            out.append(rec)
    return out


def sft_dataset_from_labelled(path: str | Path, *, store: ImageStore | None = None) -> Dataset:
    """The SFT dataset from labelled (prompt, image, reason, answer) records."""
    from datasets import Dataset

    base = Path(path).resolve().parent
    rows = [
        sft_example(r["prompt"], format_answer(r.get("reason", ""), r["answer"]), _resolve_image(r, base, store))
        for r in labelled_records(path)
    ]
    if not rows:
        raise InputDataError(f"{path}: no completed labelled records")
    return Dataset.from_list(rows)


def load_toxiclean_it(folder: str | Path, split: str = "train") -> Dataset:
    """The published ToxiClean-IT layout (columns image, query, response) from a local folder.

    Accepts a folder saved with `Dataset.save_to_disk`, a Hub-style folder of parquet files (`data/train-*.parquet`
    or any `*.parquet`), or JSON/JSONL files whose `image` column holds paths relative to the folder.
    """
    import datasets
    from datasets import Dataset
    from datasets import Image as ImageFeature

    root = Path(folder)
    if not root.exists():
        raise MissingFileError(f"ToxiClean-IT folder {str(folder)!r} not found")
    if (root / "dataset_info.json").exists() or (root / "state.json").exists():
        ds = datasets.load_from_disk(str(root))
        ds = ds[split] if isinstance(ds, datasets.DatasetDict) else ds
    else:
        parquet = sorted(root.rglob(f"{split}-*.parquet")) or sorted(root.rglob("*.parquet"))
        if parquet:
            ds = Dataset.from_parquet([str(p) for p in parquet])
        else:
            files = sorted(root.rglob("*.jsonl")) + sorted(root.rglob("*.json"))
            if not files:
                raise MissingFileError(f"{folder}: no parquet, JSON or JSONL files and not a saved dataset")
            rows: list[dict[str, Any]] = []
            for f in files:
                text = read_regular(f, MAX_DATA_FILE_BYTES, what="data file").decode("utf-8")
                items = (
                    json.loads(text)
                    if f.suffix == ".json"
                    else [json.loads(ln) for ln in text.split("\n") if ln.strip()]
                )
                for item in items:
                    img = item.get("image")
                    if isinstance(img, str) and not Path(img).is_absolute():
                        item = {**item, "image": str((f.parent / img).resolve())}
                    rows.append(item)
            ds = Dataset.from_list(rows)
    missing = {"image", "query", "response"} - set(ds.column_names)
    if missing:
        raise InputDataError(f"{folder}: not the ToxiClean-IT layout, missing columns {sorted(missing)}")
    if not isinstance(ds.features["image"], ImageFeature):
        ds = ds.cast_column("image", ImageFeature())
    return ds


def sft_dataset_from_toxiclean(folder: str | Path, split: str = "train") -> Dataset:
    """ToxiClean-IT as a prompt-completion SFT dataset with one image per example (targets kept as published)."""
    ds = load_toxiclean_it(folder, split)

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        # Targets stay as published (bare `keep` / prompt or tagged); the refiner's parser reads both.
        return sft_example(row["query"], str(row["response"]).strip(), row["image"])

    return ds.map(convert, remove_columns=ds.column_names)


def sft_dataset_from_posi(path: str | Path) -> Dataset:
    """The text-only baseline: POSI's toxic -> clean pairs, no image, the clean prompt as the answer."""
    from datasets import Dataset

    rows = [sft_example(r["prompt"], format_answer("", r["answer"]), None) for r in load_posi_pairs(path)]
    return Dataset.from_list(rows)


def load_sft_dataset(source: str | Path, *, kind: str = "auto", store: ImageStore | None = None) -> Dataset:
    """Any SFT source by kind: `labelled` (build-data JSONL), `toxiclean` (folder), `posi` (JSON pairs)."""
    p = Path(source)
    if kind == "auto":
        kind = "toxiclean" if p.is_dir() else ("posi" if p.suffix == ".json" else "labelled")
    if kind == "labelled":
        return sft_dataset_from_labelled(p, store=store)
    if kind == "toxiclean":
        return sft_dataset_from_toxiclean(p)
    if kind == "posi":
        return sft_dataset_from_posi(p)
    raise SettingError(f"unknown SFT data kind {kind!r}: expected labelled, toxiclean or posi")


# -- GRPO dataset -------------------------------------------------------------------------------------------------


def grpo_rows(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """GRPO rows: the refiner conversation plus p0, the initial image id and the pool key (the prompt id)."""
    return [
        {
            "prompt": refiner_conversation(r["prompt"]),
            "p0": r["prompt"],
            "image_id": r["image_id"],
            "pool_key": str(r.get("id", r["prompt"])),
        }
        for r in records
    ]


def grpo_dataset(records: Iterable[dict[str, Any]], *, store: ImageStore, pool: ImagePool | None = None) -> Dataset:
    """The GRPO dataset; each row's `image` is opened lazily from its prompt's pool (or its own image id)."""
    from datasets import Dataset

    rows = grpo_rows(records)
    if not rows:
        raise InputDataError("GRPO dataset: no records")
    ds = Dataset.from_list(rows)
    if pool is not None:
        for r in rows:
            pool.add(r["pool_key"], r["image_id"])

    def attach_images(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        ids = [
            pool.choose(k, d) if pool is not None else d
            for k, d in zip(batch["pool_key"], batch["image_id"], strict=False)
        ]
        batch["image_id"] = ids
        batch["image"] = [store.open(i).convert("RGB") for i in ids]
        return batch

    ds.set_transform(attach_images)
    return ds
