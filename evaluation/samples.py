"""The detection sample and the checks of its fields, shared by the dataset loaders (`evaluation.datasets`) and the
benchmark loaders (`evaluation.benchmarks`): each raises a `DatasetError` that names the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, SupportsFloat

from agents.categories import OTHER, is_category_name, project_category
from tools.errors import UnveilError
from tools.image_store import ImageInputError


class DatasetError(UnveilError, ValueError):
    """A record cannot become a sample; the message names the field."""


class DatasetFileNotFoundError(DatasetError, FileNotFoundError):
    """A dataset file is not there (or is not a file); the message names it."""


def parse_label(value: object, field: str) -> int:
    """A 0/1 label from the spellings benchmarks use (0/1, true/false, safe/unsafe, ...); `field` names the input."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("1", "unsafe", "toxic", "harmful", "true", "yes"):
            return 1
        if v in ("0", "safe", "benign", "non-toxic", "nontoxic", "false", "no"):
            return 0
    raise DatasetError(f"{field}: {value!r} is not a label (use 0/1, true/false or safe/unsafe)")


def require_text(value: object, field: str) -> str:
    """A non-empty string, or a `DatasetError` naming `field`."""
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{field}: empty or missing")
    return value


def dataset_image(ref: object, base_dir: Path, field: str) -> str:
    """A checked image path (relative paths may not leave the dataset folder); URLs pass through to ingest."""
    if not isinstance(ref, str) or not ref.strip():
        raise DatasetError(f"{field}: empty or missing")
    if "://" in ref:
        return ref
    # imported here: tools.image_input brings httpx, and the CLI reads the format registry while building its parser
    from tools.image_input import resolve_path

    try:
        path = resolve_path(ref, base_dir)
    except ImageInputError as exc:
        raise DatasetError(f"{field}: {exc}") from exc
    if Path(ref).is_absolute() and base_dir.resolve() not in path.parents:
        raise DatasetError(f"{field}: absolute path {ref!r} is outside the dataset folder {str(base_dir)!r}")
    return str(path)


def make_sample(
    sid: object,
    *,
    text: str,
    image: str | None,
    label: int,
    category: str,
    base_dir: Path,
    source: str,
    description: str | None = None,
    mtc: SupportsFloat | str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A detection sample in the schema of `evaluation.datasets` (category mapped onto the project's vocabulary,
    the benchmark's own spelling kept as `source_category`; `extra` fields that are not None are kept)."""
    if mtc is not None:
        mtc = float(mtc)
        if not 0.0 <= mtc <= 1.0:
            raise DatasetError(f"mtc: {mtc} is outside [0, 1]")
    out = {
        "id": str(sid),
        "text": text,
        "image": image,
        "image_description": description,
        "label": label,
        "category": sample_category(category, extra.get("sub_category")),
        "mtc": mtc,
        "source": source,
        "base_dir": str(base_dir),
    }
    if category and category != out["category"]:
        out["source_category"] = category  # the benchmark's own spelling
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def sample_category(category: str | None, sub_category: object = None) -> str:
    """A benchmark's category in the project's vocabulary (`agents.categories`): a vocabulary name stays; another
    name is read from its subcategory where that names a category (HoliSafe's illegal_activity/drug_related_hazards
    is drugs), else from itself (SIUO's "illegal activities & crime" is crimes, "information misinterpretation"
    other)."""
    if is_category_name(category):
        return project_category(category)
    if isinstance(sub_category, str) and project_category(sub_category) not in ("", OTHER):
        return project_category(sub_category)
    return project_category(category)
