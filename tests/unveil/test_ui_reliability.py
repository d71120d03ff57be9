"""`unveil ui` and `unveil review` against damaged and oversized inputs: one bad record is shown as bad with its
line and reason while the rest stays usable, a repeated decision is not an error, store files are served only as
regular files under the size cap, over-long lines are skipped, long files are paged, appends show without a
restart. HTTP against the app under uvicorn on a loopback port (no browser needed here)."""

from __future__ import annotations

import http.client
import json
import os
import resource
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from runner.ctd_dataset import DECISIONS, SAMPLES, load_samples
from tests.ui_data import make_ctd_dataset, make_detection_results
from tests.unveil.test_ui import Server
from unveil.ui import create_app

pytestmark = pytest.mark.slow


def get(srv: Server, path: str, timeout: float = 10.0, cookie: str = "") -> tuple[int, str, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace"), dict(r.getheaders())
    finally:
        conn.close()


def post(srv: Server, app: Any, path: str, form: dict[str, str], cookie: str = "") -> tuple[int, str, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        body = urllib.parse.urlencode({**form, "csrf": app.state.guard.csrf})
        headers = {"Content-Type": "application/x-www-form-urlencoded", **({"Cookie": cookie} if cookie else {})}
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace"), dict(r.getheaders())
    finally:
        conn.close()


def damage(ds: Path) -> dict[str, int]:
    """Append to samples.jsonl: a line that is not JSON, a pending record whose votes are a number, one whose
    review is text, and a pending record without an image. Returns the line numbers of the bad ones."""
    n = len((ds / SAMPLES).read_text().splitlines())
    base = json.loads((ds / SAMPLES).read_text().splitlines()[0])
    lines = [
        '{"id": "torn", "status": ',
        json.dumps({**base, "id": "bad-votes", "votes": 5}),
        json.dumps({**base, "id": "bad-review", "review": "approved"}),
        json.dumps({**base, "id": "no-image", "image": None, "image_sha256": None}),
    ]
    with (ds / SAMPLES).open("a") as fh:
        fh.write("\n".join(lines) + "\n")
    return {"torn": n + 1, "bad-votes": n + 2, "bad-review": n + 3}


def test_one_bad_record_is_shown_as_bad_and_the_rest_stays_usable(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    data = make_ctd_dataset(ds)
    lines = damage(ds)
    app = create_app(ds)
    with Server(app) as srv:
        status, html, _ = get(srv, "/review")
        assert status == 200 and data["pending"][0] in html
        # The bad lines are listed with their number and reason; the bad records are in the list, marked.
        assert f"line {lines['torn']}: not valid JSON" in html
        assert f"line {lines['bad-votes']} (<code>bad-votes</code>): &#39;votes&#39; is not a list of objects" in html
        assert "bad-review" in html and html.count('chip bad">unreadable') == 2
        status, html, _ = get(srv, "/review?id=bad-votes")
        assert status == 200 and 'id="bad-record"' in html and f"Line {lines['bad-votes']} of samples.jsonl" in html
        status, html, _ = get(srv, "/review?id=no-image")
        assert status == 200 and "No image." in html
        # The others take decisions; a bad one answers a clear 409, never a 500.
        status, _, _ = post(srv, app, "/review/decide", {"id": data["pending"][0], "decision": "approve"})
        assert status == 303
        status, body, _ = post(srv, app, "/review/decide", {"id": "bad-review", "decision": "approve"})
        assert status == 409 and "unreadable" in body
    recs = load_samples(ds)
    assert recs[data["pending"][0]]["status"] == "accepted"
    dataset = [json.loads(x)["id"] for x in (ds / "dataset.jsonl").read_text().splitlines()]
    queue = [json.loads(x)["id"] for x in (ds / "review_queue.jsonl").read_text().splitlines()]
    assert data["pending"][0] in dataset and "no-image" in queue and "bad-votes" not in queue


def run_cli(args: list[str]) -> tuple[int, str, str]:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        [sys.executable, "-m", "unveil.cli", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    return p.returncode, p.stdout, p.stderr


def test_unveil_review_goes_on_past_a_bad_record(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    data = make_ctd_dataset(ds)
    lines = damage(ds)
    rc, out, err = run_cli(["review", str(ds)])
    assert rc == 0, err
    assert f"[{data['pending'][0]}]" in out and "[no-image]" in out and "image: (none)" in out
    assert f"line {lines['bad-votes']} (bad-votes): left out: 'votes' is not a list of objects" in err
    assert f"line {lines['torn']}: left out: not valid JSON" in err
    rc, out, err = run_cli(["review", str(ds), "--approve", data["pending"][1]])
    assert rc == 0 and "approved 1" in err, err
    assert load_samples(ds)[data["pending"][1]]["status"] == "accepted"


def test_a_repeated_decision_is_not_an_error(tmp_path: Path) -> None:
    """A double click sends the same decision twice: the second changes nothing and says so (no 404); the
    message is the session's, so the same page without the session's cookie shows none."""
    ds = tmp_path / "ds"
    sample = make_ctd_dataset(ds)["pending"][0]
    app = create_app(ds)
    with Server(app) as srv:
        first = post(srv, app, "/review/decide", {"id": sample, "decision": "approve"})
        cookie = {k.lower(): v for k, v in first[2].items()}["set-cookie"].split(";")[0]
        second = post(srv, app, "/review/decide", {"id": sample, "decision": "approve"}, cookie=cookie)
        assert first[0] == 303 and second[0] == 303
        assert "flash" not in second[2]["location"]
        assert "Already judged by you" not in get(srv, second[2]["location"])[1]
        status, html, _ = get(srv, second[2]["location"], cookie=cookie)
        assert status == 200 and "Already judged by you: not counted again." in html
        assert post(srv, app, "/review/decide", {"id": "nope", "decision": "approve"})[0] == 404
    log = [json.loads(x) for x in (ds / DECISIONS).read_text().splitlines()]
    assert [(d["id"], d["decision"]) for d in log] == [(sample, "approve")]


def test_store_files_are_served_only_as_regular_files_under_the_cap(tmp_path: Path) -> None:
    """A FIFO or a huge sparse file named like a stored image is refused without being read; the app keeps
    answering."""
    ds = tmp_path / "ds"
    make_ctd_dataset(ds)
    images = ds / "images"
    fifo_sha, big_sha = "a" * 64, "b" * 64
    (images / "aa").mkdir(exist_ok=True)
    os.mkfifo(images / "aa" / f"{fifo_sha}.png")
    (images / "bb").mkdir(exist_ok=True)
    with open(images / "bb" / f"{big_sha}.png", "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB, sparse
    app = create_app(ds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with Server(app) as srv:
        for _ in range(3):
            assert get(srv, f"/images/{fifo_sha}", timeout=5)[0] == 404
            assert get(srv, f"/images/{big_sha}", timeout=5)[0] == 404
        assert get(srv, "/review", timeout=5)[0] == 200
        real = next(p for p in images.glob("*/*.png") if p.stat().st_size < 1 << 20 and p.parent.name != "aa")
        status, _, headers = get(srv, f"/images/{real.stem}")
        assert status == 200 and headers["content-length"] == str(real.stat().st_size)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert grown_mb < 300, f"peak memory grew by {grown_mb:.0f} MB"


def test_over_long_lines_are_skipped_and_long_files_are_paged(tmp_path: Path) -> None:
    results = tmp_path / "detect.jsonl"
    make_detection_results(results, tmp_path / "store")
    first = json.loads(results.read_text().splitlines()[0])
    with results.open("a") as fh:
        fh.write(json.dumps({**first, "id": "huge", "explanation": "x" * (6 << 20)}) + "\n")
        for k in range(250):
            fh.write(json.dumps({**first, "id": f"copy-{k:04d}"}) + "\n")
    app = create_app(results)
    with Server(app) as srv:
        status, html, _ = get(srv, "/detections")
        assert status == 200 and "is over 4194304 bytes" in html
        assert html.count('href="/detections/view?id=') == 100 and "page 1 of 3" in html
        status, html, _ = get(srv, "/detections?page=3")
        assert html.count('href="/detections/view?id=') == 255 - 200 and "copy-0249" in html
        # The over-long record is listed under its id as bad (its line is never read whole).
        status, html, _ = get(srv, "/detections/view?id=huge")
        assert status == 200 and 'id="bad-record"' in html and "is over 4194304 bytes" in html
        # Records appended while the app runs show on the next page view.
        with results.open("a") as fh:
            fh.write(json.dumps({**first, "id": "late-one"}) + "\n")
        status, html, _ = get(srv, "/detections?page=3")
        assert "late-one" in html and "256 of 256 results" in html


def _fill(disk: Path) -> None:
    """Fill a small file system until it refuses another byte."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                continue
    finally:
        os.close(fd)


def test_a_decision_on_a_full_disk_says_what_was_saved(tmp_path: Path) -> None:
    """On a full disk the decision page answered a bare 500 and the record could change without its log line:
    now the log is written first, and the page says (507) that nothing was saved."""
    import shutil
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        src = tmp_path / "src"
        sample = make_ctd_dataset(src)["pending"][0]
        shutil.copytree(src, disk / "ds", symlinks=True)
        ds = disk / "ds"
        app = create_app(ds)
        with Server(app) as srv:
            before = (ds / SAMPLES).read_bytes(), (ds / DECISIONS).read_bytes() if (ds / DECISIONS).exists() else b""
            _fill(disk)
            status, body, _ = post(srv, app, "/review/decide", {"id": sample, "decision": "approve"})
            assert status == 507 and "nothing was saved" in body and DECISIONS in body, (status, body[-500:])
            after = (ds / SAMPLES).read_bytes(), (ds / DECISIONS).read_bytes() if (ds / DECISIONS).exists() else b""
            assert after == before
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
