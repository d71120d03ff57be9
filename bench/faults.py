"""Fault benchmark: `unveil detect`, `unveil refine` and `unveil generate` batches through a fault-injecting
OpenAI-compatible server at several fault rates.

Each run starts `tests.faultserver.FaultServer` on loopback with the canned answers of every Unveil role,
points the command at it (`--model openai:fake-model@http://127.0.0.1:PORT/v1`), runs the real CLI in a
subprocess over N samples (for detect and refine one of them is poisoned: every request that carries it gets a
500, so that sample can never succeed and must fail alone), then reads the output back and prints per command and rate:

- completed: records with a non-failed status; failed: records with status `failed` and a recorded reason;
- lost: input ids with no record (must be 0); duplicated: ids with more than one record (must be 0);
- retries: the gateway's retries and repairs summed over the records' usage; requests/faults: what the server
  saw and injected; wall: the command's wall time.

Refine and generate render with the tiny random-weight SD pipeline of `tests/tiny.py` (32x32, 2 steps), so the
whole benchmark runs on a laptop CPU in a few minutes. Backoff is kept small with `UNVEIL_BACKOFF_BASE` and the
client timeout with `UNVEIL_REQUEST_TIMEOUT`; the server hangs longer than that on a `timeout` fault.

Two more rows stress the output itself (detect, fault rate 0):

- `disk-full`: the output lives on a small tmpfs (root is needed to mount it) that fills part-way; the command
  must fail loudly naming the file, leave only whole records, and a rerun after the disk grows must finish;
- `two-writers`: two processes start on the same output at once; one must be refused, the other finish, and
  the model server must be asked for each sample's answers once (nothing paid twice).

    python bench/faults.py                       # 200 samples per command, rates 0, 0.1, 0.3, and both rows
    python bench/faults.py --n 40 --commands detect --rates 0.3 --scenarios none
    python bench/faults.py --tiny                # smoke run of the bench itself (tests/bench/test_bench_smoke.py)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faultserver import FaultServer, UnveilAnswers  # noqa: E402

POISON = "UNVEIL-POISON"
REQUEST_TIMEOUT = 1.0


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNVEIL_")}
    env.update(
        {
            "UNVEIL_CACHE": "off",
            "UNVEIL_IMAGE_STORE": str(tmp / "store"),
            "UNVEIL_BACKOFF_BASE": "0.02",
            "UNVEIL_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT),
            "UNVEIL_OPENAI_API_KEY": "sk-unveil-bench-not-a-real-key",
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


def _inputs(command: str, n: int, tmp: Path) -> tuple[list[str], list[str]]:
    """Write the command's input and return (extra CLI args, expected ids)."""
    if command == "generate":
        return [], [f"drugs-{i:05d}" for i in range(n)]
    src = tmp / "in.jsonl"
    rows = []
    for i in range(n):
        marker = f" {POISON}" if i == n // 2 else ""
        if command == "detect":
            rows.append(
                {"id": f"s{i}", "image_description": f"a kitchen table, photo {i}", "text": f"baking day {i}{marker}"}
            )
        else:
            rows.append(
                {
                    "id": f"p{i}",
                    "prompt": (f"a grenade on a table {i}" if i % 5 == 0 else f"a quiet garden {i}") + marker,
                    "seed": i,
                }
            )
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return ["--input", str(src)], [r["id"] for r in rows]


def run_one(command: str, rate: float, n: int, sd: str, seed: int, concurrency: int) -> dict[str, Any]:
    """One command at one fault rate; returns the row of the table."""
    with tempfile.TemporaryDirectory(prefix=f"unveil-faults-{command}-") as d:
        tmp = Path(d)
        extra, ids = _inputs(command, n, tmp)
        with FaultServer(
            UnveilAnswers(), rate=rate, seed=seed, hang_s=REQUEST_TIMEOUT + 0.5, retry_after=0.05, lifetime_s=1800
        ) as server:
            spec = server.spec()
            common = ["--model", spec, "--no-progress", "--concurrency", str(concurrency)]
            if command == "detect":
                out = tmp / "out.jsonl"
                cmd = ["detect", "--method", "tag", "--l-max", "2", *extra, "--output", str(out), *common]
            elif command == "refine":
                out = tmp / "out.jsonl"
                cmd = [
                    "refine",
                    *extra,
                    "--output",
                    str(out),
                    "--generator",
                    f"diffusers:{sd}",
                    "--size",
                    "32",
                    "--steps",
                    "2",
                    "--t-max",
                    "2",
                    *common,
                ]
            else:
                out = tmp / "ds" / "samples.jsonl"
                cmd = [
                    "generate",
                    "--category",
                    "drugs",
                    "--n",
                    str(n),
                    "--out",
                    str(tmp / "ds"),
                    "--generator",
                    f"diffusers:{sd}",
                    "--width",
                    "32",
                    "--height",
                    "32",
                    "--steps",
                    "2",
                    "--no-web-search",
                    "--near-duplicate",
                    "0",
                    "--review",
                    "auto",
                    "--max-rounds",
                    "2",
                    *common,
                ]
            started = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "unveil.cli", *cmd],
                cwd=ROOT,
                env=_env(tmp),
                capture_output=True,
                text=True,
                timeout=1800,
            )
            wall = time.monotonic() - started
            stats = dict(server.stats)
        lines = out.read_text(encoding="utf-8").splitlines() if out.exists() else []
        records = [json.loads(line) for line in lines if line.strip()]
        counts = Counter(r["id"] for r in records)
        failed = [r for r in records if r.get("status") == "failed"]
        reasons = Counter((r.get("error") or "").split(":")[0] for r in failed)
        retries = sum(int(((r.get("usage") or {}).get("total") or {}).get("retries", 0)) for r in records)
        faults = sum(v for k, v in stats.items() if k.startswith("fault:"))
        return {
            "command": command,
            "rate": rate,
            "samples": len(ids),
            "completed": sum(1 for r in records if r.get("status") != "failed"),
            "failed": len(failed),
            "failed_no_reason": sum(1 for r in failed if not r.get("error")),
            "lost": sum(1 for i in ids if i not in counts),
            "duplicated": sum(c - 1 for c in counts.values() if c > 1),
            "retries": retries,
            "requests": stats.get("requests", 0),
            "faults": faults,
            "wall_s": round(wall, 1),
            "rc": proc.returncode,
            "reasons": dict(reasons),
            "examples": sorted({(r.get("error") or "")[:300] for r in failed})[:6],
            "stderr_tail": proc.stderr[-1500:] if proc.returncode not in (0, 1, 2) else "",
        }


def _detect_cmd(spec: str, src: Path, out: Path, concurrency: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "unveil.cli",
        "detect",
        "--method",
        "tag",
        "--l-max",
        "2",
        "--input",
        str(src),
        "--output",
        str(out),
        "--model",
        spec,
        "--no-progress",
        "--concurrency",
        str(concurrency),
    ]


def _tally(out: Path, ids: list[str]) -> dict[str, Any]:
    raw = out.read_bytes() if out.exists() else b""
    lines = [ln for ln in raw.split(b"\n") if ln.strip()]
    torn = 0
    records = []
    for ln in lines:
        try:
            records.append(json.loads(ln))
        except json.JSONDecodeError:
            torn += 1
    counts = Counter(r["id"] for r in records)
    return {
        "completed": sum(1 for r in records if r.get("status") != "failed"),
        "failed": sum(1 for r in records if r.get("status") == "failed"),
        "failed_no_reason": sum(1 for r in records if r.get("status") == "failed" and not r.get("error")),
        "lost": sum(1 for i in ids if i not in counts) + torn,
        "duplicated": sum(c - 1 for c in counts.values() if c > 1),
    }


def run_disk_full(n: int, seed: int, concurrency: int) -> dict[str, Any]:
    """detect onto a tmpfs that fills part-way, then a rerun after it grows."""
    with tempfile.TemporaryDirectory(prefix="unveil-faults-disk-") as d:
        tmp = Path(d)
        extra, ids = _inputs("detect", n, tmp)
        disk = tmp / "disk"
        disk.mkdir()
        size_kb = max(8, n // 2)  # a detect record here is ~1.5 kB: this fills after about a third of them
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(disk)]).returncode:
            return {"command": "detect", "rate": 0.0, "scenario": "disk-full", "samples": n, "skipped": "needs root"}
        try:
            out = disk / "out.jsonl"
            with FaultServer(UnveilAnswers(), rate=0.0, seed=seed, lifetime_s=1800) as server:
                started = time.monotonic()
                first = subprocess.run(
                    _detect_cmd(server.spec(), Path(extra[1]), out, concurrency),
                    cwd=ROOT,
                    env=_env(tmp),
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                written_first = _tally(out, ids)["completed"]
                subprocess.run(["mount", "-o", f"remount,size={n * 64}k", str(disk)], check=True)
                second = subprocess.run(
                    _detect_cmd(server.spec(), Path(extra[1]), out, concurrency),
                    cwd=ROOT,
                    env=_env(tmp),
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                wall = time.monotonic() - started
                stats = dict(server.stats)
            loud = first.returncode != 0 and "No space left" in first.stderr and out.name in first.stderr
            return {
                "command": "detect",
                "rate": 0.0,
                "scenario": "disk-full",
                "samples": n,
                **_tally(out, ids),
                "retries": 0,
                "requests": stats.get("requests", 0),
                "faults": 0,
                "wall_s": round(wall, 1),
                "rc": second.returncode,
                "reasons": {},
                "note": f"first run stopped loudly={loud} after {written_first} records; rerun rc={second.returncode}",
                "stderr_tail": first.stderr[-300:],
            }
        finally:
            subprocess.run(["umount", "-l", str(disk)], check=False)


def run_two_writers(n: int, seed: int, concurrency: int) -> dict[str, Any]:
    """Two detect processes started at once on one output: one is refused, nothing is paid or written twice."""
    with tempfile.TemporaryDirectory(prefix="unveil-faults-two-") as d:
        tmp = Path(d)
        extra, ids = _inputs("detect", n, tmp)
        out = tmp / "out.jsonl"
        with FaultServer(UnveilAnswers(), rate=0.0, seed=seed, lifetime_s=1800) as server:
            started = time.monotonic()
            procs = [
                subprocess.Popen(
                    _detect_cmd(server.spec(), Path(extra[1]), out, concurrency),
                    cwd=ROOT,
                    env=_env(tmp),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(2)
            ]
            errs = [p.communicate(timeout=1800)[1] for p in procs]
            wall = time.monotonic() - started
            stats = dict(server.stats)
        refused = sum(1 for p, e in zip(procs, errs, strict=True) if p.returncode != 0 and "being written by" in e)
        return {
            "command": "detect",
            "rate": 0.0,
            "scenario": "two-writers",
            "samples": n,
            **_tally(out, ids),
            "retries": 0,
            "requests": stats.get("requests", 0),
            "faults": 0,
            "wall_s": round(wall, 1),
            "rc": max(p.returncode for p in procs),
            "reasons": {},
            "note": f"{refused} of 2 writers refused; {stats.get('requests', 0)} requests for {n} samples",
        }


def main(argv: list[str] | None = None) -> int:
    """Run the grid and print the table (and JSON rows with --json)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="samples per run (default 200)")
    p.add_argument("--rates", default="0,0.1,0.3")
    p.add_argument("--commands", default="detect,refine,generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--scenarios", default="disk-full,two-writers", help="output stress rows, or 'none'")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="smoke run: 8 samples per run at rate 0.3 (checks the bench, not the numbers)",
    )
    args = p.parse_args(argv)
    if args.tiny:
        args.n, args.rates = 8, "0.3"
    from tests.tiny import build_tiny_sd

    rows = []
    with tempfile.TemporaryDirectory(prefix="unveil-faults-sd-") as d:
        sd = build_tiny_sd(Path(d) / "sd")
        for command in args.commands.split(","):
            for rate in (float(r) for r in args.rates.split(",")):
                row = run_one(command, rate, args.n, sd, args.seed, args.concurrency)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    scenarios = {"disk-full": run_disk_full, "two-writers": run_two_writers}
    for name in (x for x in args.scenarios.split(",") if x and x != "none"):
        row = scenarios[name](args.n, args.seed, args.concurrency)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    head = (
        f"{'command':<9} {'scenario':<11} {'rate':>5} {'samples':>7} {'completed':>9} {'failed':>6} {'lost':>4} "
        f"{'dup':>4} {'retries':>7} {'requests':>8} {'faults':>6} {'wall_s':>7}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        if "skipped" in r:
            print(f"{r['command']:<9} {r['scenario']:<11} skipped: {r['skipped']}")
            continue
        print(
            f"{r['command']:<9} {r.get('scenario', 'faults'):<11} {r['rate']:>5.0%} {r['samples']:>7} "
            f"{r['completed']:>9} {r['failed']:>6} {r['lost']:>4} "
            f"{r['duplicated']:>4} {r['retries']:>7} {r['requests']:>8} {r['faults']:>6} {r['wall_s']:>7}"
        )
    for r in rows:
        if r.get("note"):
            print(f"{r['scenario']}: {r['note']}")
    print(
        "\nfailure reasons: "
        + "; ".join(f"{r['command']}@{r['rate']:.0%}: {r['reasons']}" for r in rows if r["reasons"])
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    bad = [r for r in rows if r.get("lost") or r.get("duplicated") or r.get("failed_no_reason")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
