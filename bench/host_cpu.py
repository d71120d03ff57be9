"""What else kept the host's CPUs busy while a bench timed something, and a way to make that happen on purpose.

A GPU round is not the GPU's alone: each image's CPU side (launching the UNet's kernels step by step, the text
encoder, the scheduler, PIL and PNG) needs a core when it needs one. Beside other processes that build models or
compile with Inductor (which take every core), that side waits, and the same code renders slower. `HostCpu` records,
over a timed span, how many cores the rest of the host used (`/proc/stat`'s busy time less this process's own), so a
figure says whether it was measured alone; `contended` is the one rule of when it was not. `busy_cpus(n)` spins `n`
processes for a span: the same contention, made on purpose, to measure what it costs.

    with HostCpu() as cpu:
        ...                    # the timed work
    cpu.record()               # {"cpus": 16, "wall_s": 7.6, "own_cores": 1.1, "others_cores": 13.2, ...}

    with busy_cpus(14):        # bench/t2i_throughput.py --busy-cpus 14
        ...
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# A timed span during which other processes kept more than this share of the host's CPUs busy was measured beside
# them, not alone: its figure is not compared with figures measured alone (bench/regression_guard.py).
CONTENDED_SHARE = 0.25
PROC_STAT = Path("/proc/stat")
# /proc/stat's fields after "cpu": user nice system idle iowait irq softirq steal (guest time is inside user).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def read_proc_stat(path: Path = PROC_STAT) -> tuple[float, int] | None:
    """The host's busy CPU seconds since boot (all CPUs together) and its number of CPUs, from `path`; None where
    there is no such file (not Linux)."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    fields = next((line.split()[1:] for line in lines if line.startswith("cpu ")), None)
    if not fields:
        return None
    ticks = sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return ticks / os.sysconf("SC_CLK_TCK"), cpus or (os.cpu_count() or 1)


def own_cpu_s() -> float:
    """This process's CPU seconds, every thread, children left out (a child's time is added only once it is waited
    for, whenever that is: `busy_cpus`' spinners would count as this process's own)."""
    times = os.times()
    return times.user + times.system


def contention(host_busy_s: float, own_s: float, wall_s: float, cpus: int) -> dict[str, Any]:
    """The record of a span: the cores this process and the rest of the host kept busy on average, and whether the
    rest makes the span contended (`CONTENDED_SHARE`)."""
    wall = max(wall_s, 1e-9)
    others = max(host_busy_s - own_s, 0.0) / wall
    share = others / max(cpus, 1)
    return {
        "cpus": cpus,
        "wall_s": round(wall_s, 3),
        "own_cores": round(own_s / wall, 2),
        "others_cores": round(others, 2),
        "others_share": round(share, 3),
        "contended": share > CONTENDED_SHARE,
    }


def contended(record: Any) -> str:
    """Why a span's record (`HostCpu.record`) says it was measured beside other work, or "" when it was alone or the
    record is missing (results written before records existed)."""
    if not isinstance(record, dict) or not record.get("contended"):
        return ""
    return (
        f"measured while other processes kept {record.get('others_cores')} of {record.get('cpus')} CPUs busy "
        f"(more than {CONTENDED_SHARE:.0%})"
    )


class HostCpu:
    """A context manager that samples the host's and this process's CPU time at its start and end."""

    def __init__(
        self,
        read: Callable[[], tuple[float, int] | None] = read_proc_stat,
        own: Callable[[], float] = own_cpu_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`read`, `own` and `clock` are the samplers (the real ones by default)."""
        self._read, self._own, self._clock = read, own, clock
        self._start: tuple[tuple[float, int] | None, float, float] | None = None
        self._end: tuple[tuple[float, int] | None, float, float] | None = None

    def _sample(self) -> tuple[tuple[float, int] | None, float, float]:
        return self._read(), self._own(), self._clock()

    def __enter__(self) -> HostCpu:
        self._start = self._sample()
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = self._sample()

    def record(self) -> dict[str, Any]:
        """The span's `contention` record; {} where the host's CPU time cannot be read or the span did not end."""
        if self._start is None or self._end is None:
            return {}
        (host0, own0, t0), (host1, own1, t1) = self._start, self._end
        if host0 is None or host1 is None:
            return {}
        return contention(host1[0] - host0[0], own1 - own0, t1 - t0, host1[1])


@contextmanager
def busy_cpus(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` processes that spin on a core each for the span, stopped (and waited for) at its end."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(n, 0))]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
