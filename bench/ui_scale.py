"""The web app at scale: listing a large detection results file, deciding on a large dataset, one huge line.

Builds, in a temporary folder, a detection results file of `--results` records (default 100,000; copies of the
tests' fixture records, ~2.5 kB each), a CTD dataset folder of `--samples` pending samples (default 20,000,
~3.5 kB each) and a results file with one `--huge-line-mib` line (default 512) among ordinary records. Then, with
the app under uvicorn on 127.0.0.1, it measures:

- start: `create_app` (indexes the file once);
- list: GET /detections (first page, a filtered page, the last page), median of 5;
- decide: `--decisions` POST /review/decide back to back (approve, next sample), median, p95 and max latency,
  the median CPU time per decision (this process: server and client; what the latency is on an idle machine),
  and how long a rewrite of dataset.jsonl / review_queue.jsonl from samples.jsonl takes (`write_views`; the
  app's own background rewrite uses the lines its index keeps);
- huge line: the process's peak memory growth while opening and listing the file with the huge line.

    PYTHONPATH=. python3 bench/ui_scale.py            # the full sizes (~1 GB of temporary files, a few minutes)
    PYTHONPATH=. python3 bench/ui_scale.py --tiny     # smoke run: 1,000 results, 500 samples, 8 MiB line

Targets: list 100,000 results in under 1 s, a decision on 20,000 samples in under 100 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def peak_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def request(port: int, method: str, path: str, body: str | None = None) -> tuple[int, float]:
    """Status and seconds of one request (the body read whole)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
    t0 = time.perf_counter()
    conn.request(method, path, body, headers)
    r = conn.getresponse()
    r.read()
    dt = time.perf_counter() - t0
    conn.close()
    return r.status, dt


def build_results(path: Path, store: Path, n: int) -> None:
    """A detection results file of `n` records, written line by line."""
    from tests.ui_data import make_detection_results

    seed = path.with_suffix(".seed.jsonl")
    make_detection_results(seed, store)
    records = [json.loads(x) for x in seed.read_text().splitlines()]
    with path.open("w") as fh:
        for k in range(n):
            fh.write(json.dumps({**records[k % len(records)], "id": f"r-{k:06d}"}) + "\n")


def build_dataset(root: Path, n: int) -> list[str]:
    """A dataset folder with `n` pending samples (the fixture's records copied under new ids)."""
    from runner.ctd_dataset import SAMPLES, write_views
    from tests.ui_data import make_ctd_dataset

    data = make_ctd_dataset(root, n_pending=4)
    lines = (root / SAMPLES).read_text().splitlines()
    pending = [json.loads(x) for x in lines if json.loads(x)["id"] in data["pending"]]
    ids = [f"s-{k:06d}" for k in range(n)]
    with (root / SAMPLES).open("a") as fh:
        for k, sid in enumerate(ids):
            fh.write(json.dumps({**pending[k % len(pending)], "id": sid}) + "\n")
    write_views(root)
    return ids


def build_huge(path: Path, store: Path, mib: int) -> None:
    """A results file with one line of `mib` MiB between ordinary records, written in chunks."""
    build_results(path, store, 10)
    with path.open("a") as fh:
        fh.write('{"id": "huge", "mtc": 0.5, "explanation": "')
        chunk = "x" * (1 << 20)
        for _ in range(mib):
            fh.write(chunk)
        fh.write('"}\n')
        fh.write(json.dumps({"id": "after-huge", "mtc": 0.1, "toxic": False}) + "\n")


def main() -> None:
    """Build the inputs, run the measurements, print them."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="smoke run with small sizes")
    ap.add_argument("--results", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--decisions", type=int, default=40)
    ap.add_argument("--huge-line-mib", type=int, default=512)
    ap.add_argument("--json", help="also write the numbers to this JSON file")
    args = ap.parse_args()
    if args.tiny:
        args.results, args.samples, args.decisions, args.huge_line_mib = 1_000, 500, 10, 8

    from tests.unveil.test_ui import Server
    from unveil.ui import create_app

    out: dict[str, Any] = {"results": args.results, "samples": args.samples}
    tmp = Path(tempfile.mkdtemp(prefix="unveil-ui-scale-"))
    try:
        # The huge line first, so the peak memory it causes is not hidden by the larger runs' peaks.
        huge = tmp / "huge.jsonl"
        build_huge(huge, tmp / "store", args.huge_line_mib)
        before = peak_mb()
        app = create_app(huge)
        with Server(app) as srv:
            status, _ = request(srv.port, "GET", "/detections")
            assert status == 200, status
        out["huge_line_mib"] = args.huge_line_mib
        out["huge_line_peak_growth_mb"] = round(peak_mb() - before, 1)
        huge.unlink()

        results = tmp / "results.jsonl"
        build_results(results, tmp / "store", args.results)
        t0 = time.perf_counter()
        app = create_app(results)
        out["results_start_s"] = round(time.perf_counter() - t0, 3)
        with Server(app) as srv:
            pages = max(1, -(-args.results // 100))
            for name, path in (
                ("list_first_page_s", "/detections"),
                ("list_filtered_s", "/detections?verdict=toxic&bin=" + urllib.parse.quote("0.4-0.6")),
                ("list_last_page_s", f"/detections?page={pages}"),
            ):
                times = []
                for _ in range(5):
                    status, dt = request(srv.port, "GET", path)
                    assert status == 200, (path, status)
                    times.append(dt)
                out[name] = round(statistics.median(times), 4)
        results.unlink()

        ds = tmp / "ds"
        ids = build_dataset(ds, args.samples)
        t0 = time.perf_counter()
        app = create_app(ds)
        out["dataset_start_s"] = round(time.perf_counter() - t0, 3)
        csrf = app.state.guard.csrf
        with Server(app) as srv:
            status, dt = request(srv.port, "GET", "/review")
            out["review_page_s"] = round(dt, 4)
            lat, cpu = [], []
            for sid in ids[: args.decisions]:
                body = urllib.parse.urlencode({"id": sid, "decision": "approve", "csrf": csrf})
                c0 = time.process_time()
                status, dt = request(srv.port, "POST", "/review/decide", body)
                cpu.append(time.process_time() - c0)  # this process's CPU (server and client): load-independent
                assert status == 303, status
                lat.append(dt)
            out["decide_cpu_median_s"] = round(statistics.median(cpu), 4)
            lat.sort()
            out["decide_median_s"] = round(statistics.median(lat), 4)
            out["decide_p95_s"] = round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 4)
            out["decide_max_s"] = round(lat[-1], 4)
            app.state.source.views.flush()
        from runner.ctd_dataset import write_views

        t0 = time.perf_counter()
        write_views(ds)  # what the background rewrite after decisions costs
        out["views_rewrite_s"] = round(time.perf_counter() - t0, 3)
        out["peak_mb"] = round(peak_mb(), 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for k, v in out.items():
        print(f"{k:>26}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
