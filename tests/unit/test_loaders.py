"""Loaders sized to the pod: the CPU quota from cgroup v2 or v1 files, the affinity mask, and the
DataLoader flags every vsbench loader shares (vsbench.runtime.loaders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsbench.runtime import loaders
from vsbench.runtime.loaders import cgroup_cpu_quota, loader_options, loader_workers, usable_cpus


def _write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(("files", "cores"), [
    ({"cpu.max": "200000 100000\n"}, 2.0),  # cgroup v2: 2 cores
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),  # v2, no limit
    ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4.0),  # cgroup v1
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
    ({}, None),  # no cgroup files at all (not Linux, or not mounted)
    ({"cpu.max": "garbage"}, None),
])
def test_the_cpu_quota_is_read_from_cgroup_v2_or_v1(tmp_path: Path, files: dict[str, str],
                                                     cores: float | None) -> None:
    assert cgroup_cpu_quota(_write(tmp_path, files)) == cores


def test_usable_cpus_is_the_affinity_mask_capped_by_the_quota_rounded_up(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loaders.os, "sched_getaffinity", lambda pid: set(range(64)))  # a 64-core node
    assert usable_cpus(_write(tmp_path / "none", {})) == 64
    assert usable_cpus(_write(tmp_path / "v2", {"cpu.max": "1600000 100000"})) == 16
    assert usable_cpus(_write(tmp_path / "half", {"cpu.max": "150000 100000"})) == 2
    assert usable_cpus(_write(tmp_path / "tiny", {"cpu.max": "10000 100000"})) == 1
    monkeypatch.setattr(loaders.os, "sched_getaffinity", lambda pid: {0, 1, 2})  # a cpuset of 3 under a 16-core quota
    assert usable_cpus(tmp_path / "v2") == 3


def test_workers_default_to_the_usable_cores_less_one_and_at_least_one(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loaders.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert loader_workers(root=_write(tmp_path / "16", {"cpu.max": "1600000 100000"})) == 15
    assert loader_workers(root=_write(tmp_path / "1", {"cpu.max": "100000 100000"})) == 1
    assert loader_workers(0, root=tmp_path / "16") == 0  # asked for: loading in the main process
    assert loader_workers(8, root=tmp_path / "1") == 8
    with pytest.raises(ValueError, match="workers must be 0 or more"):
        loader_workers(-1)


def test_loader_flags_pin_only_for_cuda_and_prefetch_only_with_workers() -> None:
    assert loader_options(0, cuda=False) == {"num_workers": 0, "pin_memory": False}
    assert loader_options(0, cuda=True, persistent=True) == {"num_workers": 0, "pin_memory": True}
    assert loader_options(3, cuda=True, persistent=True) == {
        "num_workers": 3, "pin_memory": True, "prefetch_factor": loaders.PREFETCH_FACTOR, "persistent_workers": True}
    assert loader_options(3, cuda=False)["persistent_workers"] is False


def test_the_embed_step_and_the_trainings_share_the_one_sizing_function() -> None:
    """No second worker-count rule: the embed loop and the ABID loaders call loader_workers."""
    src = Path(loaders.__file__).parents[1]
    for module in ("retrieval/embed.py", "abid/distributed.py", "abid/counting.py", "abid/siamese.py"):
        text = (src / module).read_text()
        assert "loader_workers(" in text and "loader_options(" in text, module
        assert "num_workers=" not in text, module
