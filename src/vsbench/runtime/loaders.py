"""DataLoader sizing and flags, decided once for the embed step and the ABID trainings.

Why not ``os.cpu_count()`` or a fixed 8: in a pod, ``os.cpu_count()`` is the node's cores (64 on a
GPU node) while the container may run on 16 (its CPU limit, enforced as a CFS quota) or on the
cores its cpuset allows. Workers beyond that quota only contend: issue 40 measured 16 workers
*slower* than 8 on a 16-core pod (1.8 s an epoch against 1.4 s). The count here is the cores the
process may really use, less one for the main process, which drives the GPU (or computes on the
CPU) and collates.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

CGROUP = Path("/sys/fs/cgroup")
PREFETCH_FACTOR = 4  # batches each worker keeps ready: deep enough to ride out one slow JPEG


def cgroup_cpu_quota(root: Path = CGROUP) -> float | None:
    """The container's CPU limit in cores (quota / period), or None when unlimited or unknown.

    cgroup v2 keeps it in ``cpu.max`` ("200000 100000", or "max 100000" for none); cgroup v1 in
    ``cpu.cfs_quota_us`` (-1 for none) and ``cpu.cfs_period_us`` under the cpu controller's folder
    (``cpu`` or ``cpu,cpuacct``)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else _cores(int(quota), int(period))
    except (OSError, ValueError):
        pass
    for folder in (root / "cpu", root / "cpu,cpuacct", root):
        try:
            quota_us = int((folder / "cpu.cfs_quota_us").read_text())
            period_us = int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota_us < 0 else _cores(quota_us, period_us)
    return None


def _cores(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None


def usable_cpus(root: Path = CGROUP) -> int:
    """Cores this process may run on: the cpuset it is pinned to (``os.sched_getaffinity``), capped
    by the CFS quota rounded up (a 1.5-core limit still runs two threads half the time)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def loader_workers(requested: int | None = None, *, root: Path = CGROUP) -> int:
    """DataLoader worker processes: ``requested`` when given (0 loads in the main process), else
    one fewer than :func:`usable_cpus` and at least one (on one core a worker still decodes while
    the main process waits on the GPU)."""
    if requested is not None:
        if requested < 0:
            raise ValueError(f"workers must be 0 or more, got {requested}")
        return requested
    return max(1, usable_cpus(root) - 1)


def loader_options(workers: int, *, cuda: bool, persistent: bool = False) -> dict[str, Any]:
    """The DataLoader keywords every vsbench loader shares.

    ``pin_memory`` only with CUDA (pinned pages are what a non-blocking host-to-device copy needs;
    on the CPU they only cost). ``prefetch_factor`` and ``persistent_workers`` only with workers
    (torch refuses them without). ``persistent`` for a loader iterated more than once whose dataset
    does not change between passes: its workers then start once, not once per pass."""
    options: dict[str, Any] = {"num_workers": workers, "pin_memory": cuda}
    if workers > 0:
        options.update(prefetch_factor=PREFETCH_FACTOR, persistent_workers=persistent)
    return options
