"""Rank the tests and test files of a pytest run by time, from its JUnit XML file.

    python3 -m pytest -q -n auto --dist loadgroup --junitxml=/tmp/junit.xml
    python3 scripts/test_durations.py /tmp/junit.xml              # the 30 slowest tests and 20 slowest files
    python3 scripts/test_durations.py /tmp/junit.xml --top 50 --files 40

A test's time is pytest's JUnit `time`: its setup, call and teardown, so a fixture built once a module (a tiny
model, a server) counts on the first test that uses it. Under pytest-xdist the times add up over the workers, so
their sum is about the wall time times the number of workers. Skipped tests are counted apart.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_file(classname: str, file: str | None) -> str:
    """The test file of a JUnit test case: its `file` attribute, else the longest module path of `classname`
    (`tests.runner.test_batch.TestX` -> `tests/runner/test_batch.py`) that exists."""
    if file:
        return file
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (ROOT / candidate).is_file():
            return candidate
    return "/".join(parts) + ".py"


def read_cases(path: Path) -> list[tuple[str, str, float, str]]:
    """(file, test id, seconds, outcome) for every test case of a JUnit file; outcome is passed, failed, error or
    skipped."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        file = test_file(classname, case.get("file"))
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        cases.append(
            (file, f"{file}::{without_group(case.get('name', ''))}", float(case.get("time", 0.0) or 0.0), outcome)
        )
    return cases


def without_group(name: str) -> str:
    """A test's name without the `@group` pytest-xdist appends under `--dist loadgroup` (its own rule: an `@` after
    the parameters' closing bracket)."""
    return name[: name.rfind("@")] if name.rfind("@") > name.rfind("]") else name


def main(argv: list[str] | None = None) -> int:
    """Print the totals, the slowest tests and the slowest files."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", type=Path, help="a JUnit XML file written by `pytest --junitxml=FILE`")
    parser.add_argument("--top", type=int, default=30, help="how many of the slowest tests to list")
    parser.add_argument("--files", type=int, default=20, help="how many of the slowest files to list")
    args = parser.parse_args(argv)
    cases = read_cases(args.junit)
    by_file: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    outcomes: dict[str, int] = defaultdict(int)
    for file, _, seconds, outcome in cases:
        by_file[file] += seconds
        count[file] += 1
        outcomes[outcome] += 1
    total = sum(seconds for _, _, seconds, _ in cases)
    summary = ", ".join(f"{n} {name}" for name, n in sorted(outcomes.items()))
    print(f"{len(cases)} tests ({summary}), {total:.0f} s of test time in {len(by_file)} files")
    print(f"\nthe {args.top} slowest tests:")
    for _, test, seconds, outcome in sorted(cases, key=lambda c: -c[2])[: args.top]:
        print(f"{seconds:8.1f} s  {test}" + ("" if outcome == "passed" else f"  [{outcome}]"))
    print(f"\nthe {args.files} slowest files:")
    for file, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[: args.files]:
        print(f"{seconds:8.1f} s  {count[file]:4d} tests  {file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
