"""`bench/host_cpu.py`: what else kept the host's CPUs busy during a timed span, the one rule of when that span was
not measured alone, and the spinners that make such a host on purpose."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import host_cpu  # noqa: E402

PROC_STAT = """cpu  {user} 0 {system} 900000 50 {irq} {softirq} {steal} 0 0
cpu0 1 0 1 1 0 0 0 0 0 0
cpu1 1 0 1 1 0 0 0 0 0 0
cpu2 1 0 1 1 0 0 0 0 0 0
cpu3 1 0 1 1 0 0 0 0 0 0
intr 12345
ctxt 6789
"""


def test_proc_stat_gives_the_busy_seconds_of_all_cpus_and_their_number(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(PROC_STAT.format(user=300, system=100, irq=10, softirq=20, steal=70))
    busy, cpus = host_cpu.read_proc_stat(stat) or (0.0, 0)
    # user + system + irq + softirq + steal; idle and iowait are not busy
    assert busy == pytest.approx(500 / os.sysconf("SC_CLK_TCK")) and cpus == 4
    assert host_cpu.read_proc_stat(tmp_path / "absent") is None


def test_the_rest_of_the_host_is_the_busy_time_less_this_process_own() -> None:
    # 8 s of wall: the host was busy 112 CPU-seconds, 8 of them this process's: 13 other cores on average.
    record = host_cpu.contention(host_busy_s=112.0, own_s=8.0, wall_s=8.0, cpus=16)
    assert record["own_cores"] == 1.0 and record["others_cores"] == 13.0 and record["contended"]
    assert "other processes kept 13.0 of 16 CPUs busy" in host_cpu.contended(record)
    quiet = host_cpu.contention(host_busy_s=12.0, own_s=8.0, wall_s=8.0, cpus=16)  # 0.5 other cores
    assert not quiet["contended"] and host_cpu.contended(quiet) == ""
    edge = host_cpu.contention(host_busy_s=8.0 + 4 * 8.0, own_s=8.0, wall_s=8.0, cpus=16)  # exactly a quarter
    assert not edge["contended"]
    assert host_cpu.contended(None) == "" and host_cpu.contended({}) == ""  # results from before the record


def test_a_span_samples_at_its_start_and_end() -> None:
    reads = iter([(100.0, 16), (200.0, 16)])  # the host's busy CPU-seconds at the start and the end
    owns, clocks = iter([5.0, 9.0]), iter([10.0, 20.0])
    span = host_cpu.HostCpu(read=lambda: next(reads), own=lambda: next(owns), clock=lambda: next(clocks))
    assert span.record() == {}  # not run yet
    with span:
        pass
    record = span.record()
    assert record["wall_s"] == 10.0 and record["own_cores"] == 0.4 and record["others_cores"] == 9.6
    no_proc = host_cpu.HostCpu(read=lambda: None)
    with no_proc:
        pass
    assert no_proc.record() == {}  # not Linux: nothing claimed


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc/stat")
def test_a_real_span_records_this_host() -> None:
    with host_cpu.HostCpu() as span:
        sum(range(200_000))
    record = span.record()
    assert record["cpus"] >= 1 and record["wall_s"] > 0 and record["others_cores"] >= 0


def test_busy_cpus_spins_its_processes_for_the_span_and_stops_them() -> None:
    with host_cpu.busy_cpus(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.returncode is not None for p in procs)
    with host_cpu.busy_cpus(0) as none:
        assert none == []
