"""How much of a core the job's threads get on a host shared with other work (reads /proc).

Linux's fair scheduler with autogroup (kernel.sched_autogroup_enabled=1, the default on
desktop and many VM kernels) shares the cores between *sessions* first, then between the
threads of a session. On a development machine shared by several people, the cores a job
can have therefore depend on how many other sessions want a core at that moment, not on how
many threads they run. `share_of_core` samples it: every runnable thread on the host, grouped
by autogroup (by thread without autogroup), and water-fills the cores over the groups, each
group asking for as many cores as it has runnable threads and ours for all our threads.

The validation runner samples it while each job runs (hpcdl.validate.runner), and hpcdl
predict divides a rank's compute rate by it: that is the machine's state, measured beside the
job, never the job's own speed.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

PROC = Path("/proc")
OURS = b"hpcdl probe"  # what every rank of a validation job runs (hpcdl.validate.jobs)


def _autogroup_enabled() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def _group_of(pid: str, tid: str, grouped: bool) -> str:
    if not grouped:
        return tid
    try:
        return (PROC / pid / "autogroup").read_text().split()[0]
    except (OSError, IndexError):  # kernel threads have none
        return f"pid-{pid}"


def waterfill(cores: float, demands: list[float]) -> list[float]:
    """Share `cores` among groups fairly: none gets more than it asks, the rest is split evenly."""
    left, alloc = float(cores), [0.0] * len(demands)
    pending = sorted(range(len(demands)), key=lambda i: demands[i])
    while pending:
        fair = left / len(pending)
        i = pending[0]
        if demands[i] <= fair:
            alloc[i] = demands[i]
            left -= demands[i]
            pending.pop(0)
        else:
            for j in pending:
                alloc[j] = fair
            break
    return alloc


def share_of_core(our_threads: int, cores: int | None = None) -> float | None:
    """The fraction of a core each of our `our_threads` threads would get now, from the host's runnable threads."""
    cores = cores or os.cpu_count() or 1
    grouped = _autogroup_enabled()
    me = str(os.getpid())
    others: dict[str, int] = {}
    our_groups: set[str] = set()
    try:
        pids = [p.name for p in PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        if pid == me:
            continue
        try:
            cmdline = (PROC / pid / "cmdline").read_bytes().replace(b"\0", b" ")
            tids = [t.name for t in (PROC / pid / "task").iterdir()]
        except OSError:
            continue
        ours = OURS in cmdline
        for tid in tids:
            try:
                stat = (PROC / pid / "task" / tid / "stat").read_text()
            except OSError:
                continue
            state = stat.rsplit(")", 1)[-1].split()[0]
            group = _group_of(pid, tid, grouped)
            if ours:
                our_groups.add(group)
            elif state == "R":
                others[group] = others.get(group, 0) + 1
    for g in our_groups:
        others.pop(g, None)  # our own groups' other threads are part of our demand
    groups = max(1, len(our_groups)) if grouped else our_threads
    per_group = our_threads / groups
    demands = [per_group] * groups + list(others.values())
    alloc = waterfill(cores, demands)
    return min(1.0, sum(alloc[:groups]) / our_threads)


# One core's work for the core-scaling probe: a float32 matrix product on one BLAS thread, as
# the trainer's convolutions are on one oneDNN thread. Every process starts at the same agreed
# moment and counts products for the same window.
_PROBE = r"""
import sys, time
import numpy as np
start, window = float(sys.argv[1]), float(sys.argv[2])
a = np.random.default_rng(0).random((192, 192), dtype=np.float32)
b = a.copy()
while time.time() < start:
    time.sleep(0.001)
n = 0
while time.time() < start + window:
    a @ b
    n += 1
print(n / window)
"""
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _probe_rates(processes: int, window_s: float) -> list[float]:
    import subprocess
    import sys
    import time

    env = {**os.environ, **_ONE_THREAD}
    start = time.time() + 1.0  # numpy imports in every process before the window opens
    procs = [subprocess.Popen([sys.executable, "-c", _PROBE, str(start), str(window_s)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(processes)]
    rates = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        try:
            rates.append(float(out.strip()))
        except ValueError:
            pass
    return rates


def scaling_from(solo: float, solo_share: float, together: list[float], together_share: float) -> float:
    """Each busy core's rate over one core's alone, the other sessions' load taken out of both.

    `solo_share` and `together_share` are the shares of a core `share_of_core` gave one and
    len(together) threads just before each window: on a quiet host both are 1 and this is the
    plain ratio; on a busy one it is what the cores would do without the other work.
    """
    if not solo or not together or not solo_share or not together_share:
        return 1.0
    per_core_alone = solo / solo_share
    per_core_together = sum(together) / len(together) / together_share
    return max(0.05, min(1.0, per_core_together / per_core_alone))


def core_scaling(threads: int, window_s: float = 1.5, pairs: int = 3) -> float | None:
    """How fast each of `threads` cores computes when all are busy at once, against one core alone.

    1.0 on a host whose cores are independent; less where they share what one core had to
    itself: SMT siblings (a VM's vCPUs are often hyperthreads of fewer physical cores), memory
    bandwidth, or a clock that drops as more cores turbo. The prediction of a p-rank job on one
    host from a one-rank job multiplies the rank's rate by it. None: it could not be measured.

    The median of `pairs` solo-then-together windows: one pair read 0.80 on a 2-core host whose
    other pairs read 0.95-1.0 when a test started beside it, and a prediction takes the cores
    as slowed by as much (docs/predict.md, the shaped network).
    """
    cores = os.cpu_count() or 1
    threads = max(1, min(threads, cores))
    if threads == 1:
        return 1.0
    ratios = []
    for _ in range(max(1, pairs)):
        solo_share = share_of_core(1)
        solo = _probe_rates(1, window_s)
        together_share = share_of_core(threads)
        together = _probe_rates(threads, window_s)
        if not solo or len(together) != threads or solo_share is None or together_share is None:
            return None
        ratios.append(scaling_from(solo[0], solo_share, together, together_share))
    return statistics.median_high(ratios)
