"""The T2I bench at several commits in one GPU call: a bisection of a throughput change without git on the GPU
machine (the lent machines get the working tree, not the history).

Here, with git: `prepare` writes each commit's `tools/`, `bench/` and `tests/` (what `bench/t2i_throughput.py`
imports, and its tiny models) into `.ab/NN-<commit>/` (add `/.ab/` to `.git/info/exclude` once and name `.ab` in
the call's `carry`; the trees are 2-4 MB each). There: `run` runs the bench
of each tree in turn on one shared work folder (the random SD-1.5 weights are built once and reused, so every commit
renders the same model; the first tree compiles, the others load from the machine's cache), then prints one table.

    python bench/t2i_ab.py prepare 6c49ae7 bed1d4b 2b04fc0 4c6947f HEAD     # here
    python bench/t2i_ab.py run --out $OUT                                   # on the GPU machine (carry .ab)
    python bench/t2i_ab.py summary $OUT                                     # the table again, from the JSON files

`run` passes the bench the same flags at every commit (those older benches know): the `compile` variant, 32
concurrent requests, one timed round, one baseline image.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
AB = ROOT / ".ab"
PATHS = ("tools", "bench", "tests")  # tests: the tiny models of a CPU smoke run (--tiny)
BENCH_ARGS = ("--variants", "compile", "--n", "32", "--rounds", "1", "--baseline-n", "1")


def prepare(commits: list[str], ab: Path = AB) -> None:
    """Each commit's `tools/`, `bench/` and `tests/` under `ab/<NN>-<short hash>/`, numbered in the order given."""
    ab.mkdir(parents=True, exist_ok=True)
    for k, commit in enumerate(commits):
        short = subprocess.run(
            ["git", "rev-parse", "--short=7", commit], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        target = ab / f"{k:02d}-{short}"
        target.mkdir(exist_ok=True)
        with tempfile.TemporaryFile() as archive:
            subprocess.run(["git", "archive", short, *PATHS], cwd=ROOT, stdout=archive, check=True)
            archive.seek(0)
            with tarfile.open(fileobj=archive) as tar:
                # `filter` came in Python 3.11.4 (Debian 12's python3 is 3.11.2); the archive is git's own output.
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(target, **safe)
        print(f"{commit}: {target}", flush=True)


def run(out: Path, work: Path, extra: list[str], ab: Path = AB) -> int:
    """The bench of every prepared tree, in order; each one's JSON in `out`; the table last."""
    out.mkdir(parents=True, exist_ok=True)
    trees = sorted(p for p in ab.iterdir() if (p / "bench" / "t2i_throughput.py").is_file()) if ab.is_dir() else []
    if not trees:
        print("no trees under .ab/: run `python bench/t2i_ab.py prepare COMMIT...` first", file=sys.stderr)
        return 2
    for tree in trees:
        json_out = out / f"ab-{tree.name}.json"
        cmd = [sys.executable, "bench/t2i_throughput.py", *BENCH_ARGS, "--workdir", str(work), "--json", str(json_out)]
        if "--phases" in (tree / "bench" / "t2i_throughput.py").read_text(encoding="utf-8"):
            cmd.append("--phases")  # where the tree's bench has it: where an image's time goes
        # The tree first, then what the caller's PYTHONPATH holds (the GPU machine's carried wheels).
        path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        print(f"== {tree.name}: {' '.join(cmd[1:])} {' '.join(extra)}", flush=True)
        subprocess.run([*cmd, *extra], cwd=tree, env=env, check=False)
    print(table(out), flush=True)
    return 0


def row(name: str, data: dict[str, Any]) -> str:
    """One tree's line: the compiled rate, the UNet alone, and the breakdown of one image."""
    rate = data.get("compile.batched_img_per_s")
    if rate is None:
        return f"| {name} | {data.get('compile.error') or data.get('compile.skipped') or 'no result'} | | | |"
    parts = data.get("compile.breakdown_ms_per_image", {})
    rest = parts.get("rest (text encoder, scheduler, PIL, batching)", 0.0)
    phases = data.get("compile.phases") or {}
    where = ", ".join(
        f"{s} {phases[s]['wall_ms_per_image']:.0f}" for s in ("pipeline", "decode", "store") if s in phases
    )
    return (
        f"| {name} | {rate:.2f} | {data.get('compile.unet_only_img_per_s', 0):.2f} | "
        f"{parts.get('unet', 0):.0f} / {parts.get('vae_decode', 0):.0f} / {rest:.0f} | {where or '-'} |"
    )


def table(out: Path) -> str:
    """The table of every `ab-*.json` in `out`, in the order the trees were prepared."""
    lines = [
        "| tree | compile images/s | UNet alone | ms/image: UNet / VAE / rest | wall ms/image (phases) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for path in sorted(out.glob("ab-*.json")):
        lines.append(row(path.stem.removeprefix("ab-"), json.loads(path.read_text(encoding="utf-8"))))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """prepare | run | summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("prepare", help="write each commit's tools/, bench/ and tests/ under .ab/")
    p.add_argument("commits", nargs="+")
    r = sub.add_parser("run", help="run the T2I bench of each prepared tree (on the GPU machine)")
    r.add_argument("--out", default=os.environ.get("OUT", "ab-results"))
    r.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "t2i-ab-work"))
    r.add_argument("extra", nargs="*", help="more flags for every bench (after --), e.g. -- --tiny")
    s = sub.add_parser("summary", help="the table again, from a folder of ab-*.json")
    s.add_argument("folder")
    for verb in (p, r):
        verb.add_argument("--ab", default=str(AB), help="the folder of the trees (default .ab/)")
    args = ap.parse_args(argv)
    if args.verb == "prepare":
        prepare(args.commits, Path(args.ab))
        return 0
    if args.verb == "run":
        return run(Path(args.out), Path(args.work), args.extra, Path(args.ab))
    print(table(Path(args.folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
