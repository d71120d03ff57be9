"""Every fidelity table (docs/tag.md, ipr.md, training.md, evaluation.md, ctd.md) classifies each row as exact,
named reading or deviation, cites the paper's section and the code that does it; every cited code location
(`path.py:Symbol`, `path.py:Class.attribute`) must exist, so a table cannot point at code that moved or never was."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("tag.md", "ipr.md", "training.md", "evaluation.md", "ctd.md")
KINDS = {"exact", "named reading", "deviation"}
REF = re.compile(r"`([\w/.-]+\.(?:py|toml)):([\w.]+)`")


def fidelity_rows(doc: str) -> list[dict[str, str]]:
    """The rows of the first table under a heading that mentions "Fidelity", as {column: cell}."""
    lines = (ROOT / "docs" / doc).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and "Fidelity" in line)
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = []
    for line in table[2:]:
        # a `\|` inside a cell is a literal bar, not a column break
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        assert len(cells) == len(header), f"{doc}: {line[:80]}"
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def defines(path: Path, dotted: str) -> bool:
    """Whether every part of `dotted` is defined in the file: a class, a function, or an assigned/annotated
    name (module constant, dataclass field, attribute)."""
    text = path.read_text(encoding="utf-8")
    for part in dotted.split("."):
        pattern = rf"^\s*(?:(?:async\s+)?def|class)\s+{re.escape(part)}\b|^\s*{re.escape(part)}\s*[:=]"
        if not re.search(pattern, text, re.M):
            return False
    return True


@pytest.mark.parametrize("doc", DOCS)
def test_every_fidelity_row_is_classified_and_cites_section_and_code(doc: str) -> None:
    rows = fidelity_rows(doc)
    assert rows, f"{doc} has no fidelity table"
    for row in rows:
        label = f"{doc}: {row['paper element'][:60]!r}"
        assert row["fidelity"] in KINDS, f"{label}: fidelity {row['fidelity']!r} not one of {sorted(KINDS)}"
        assert row["section"], f"{label}: no section"
        refs = REF.findall(row["code"])
        assert refs, f"{label}: the code column cites no `file:symbol`"
        for file, symbol in refs:
            path = ROOT / file
            assert path.is_file(), f"{label}: {file} does not exist"
            assert defines(path, symbol), f"{label}: {file} defines no {symbol}"


def test_the_checker_catches_a_missing_symbol_and_file() -> None:
    assert defines(ROOT / "graphs" / "tag" / "tree.py", "grow_layer")
    assert defines(ROOT / "graphs" / "tag" / "context.py", "TagContext.prune")
    assert not defines(ROOT / "graphs" / "tag" / "tree.py", "grow_layers_that_do_not_exist")
    assert REF.findall("`graphs/tag/context.py:TagContext.prune`, `x.py:y`") == [
        ("graphs/tag/context.py", "TagContext.prune"),
        ("x.py", "y"),
    ]


def test_the_blip_checkpoint_difference_is_named() -> None:
    from tools.scorers.blip_score import DEFAULT_BLIP

    text = " ".join((ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8").split())
    # the checkpoint Unveil uses and the authors' LAVIS one, side by side in the docs
    assert DEFAULT_BLIP in text and "model_base_capfilt_large.pth" in text
    blip_row = next(r for r in fidelity_rows("evaluation.md") if r["paper element"].startswith("BLIP"))
    assert blip_row["fidelity"] == "deviation"
