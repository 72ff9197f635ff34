"""Container tests: the pipelines run inside the CPU image, as pods would run them.

They need a container engine (podman or a Docker daemon) and the CPU image (`make images`, or
`images/build.sh --only cpu`). Without them the tests are skipped, unless
VSBENCH_REQUIRE_CONTAINERS=1 (set by `make test-containers` and CI), which turns a skip into a
failure: CI must never pass by not running them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vsbench.platform.containers import _pid_alive, podman_environment
from vsbench.runtime.images import CPU_IMAGE


def _unavailable() -> str | None:
    for engine in ("podman", "docker"):
        path = shutil.which(engine)
        if path is None:
            continue
        found = subprocess.run([path, "image", "inspect", CPU_IMAGE], capture_output=True, text=True,
                               env=podman_environment(), timeout=60, check=False)
        if found.returncode == 0:
            return None
        return f"{CPU_IMAGE} is not built ({engine} image inspect failed): run `make images` or `images/build.sh --only cpu`"
    return "no container engine (podman or docker) on this machine"


@pytest.fixture(scope="session")
def cpu_image() -> str:
    reason = _unavailable()
    if reason:
        if os.environ.get("VSBENCH_REQUIRE_CONTAINERS") == "1":
            pytest.fail(f"VSBENCH_REQUIRE_CONTAINERS=1 but {reason}")
        pytest.skip(reason)
    return CPU_IMAGE


def vsbench_containers() -> list[str]:
    """Ids of step containers (running or not) that this test process's runs left, or that a run
    whose process is gone left. Not those of a live other process: under ``make test`` (two pytest
    processes) the other one may be running its own steps right now."""
    engine = shutil.which("podman") or shutil.which("docker") or "podman"
    listed = subprocess.run([engine, "ps", "--all", "--format", '{{.ID}} {{index .Labels "io.vsbench.owner-pid"}}',
                             "--filter", "label=io.vsbench.owner-pid"],
                            capture_output=True, text=True, env=podman_environment(), timeout=60, check=True)
    left = []
    for line in listed.stdout.splitlines():
        container, _, owner = line.partition(" ")
        if not owner.strip().isdigit() or int(owner) == os.getpid() or not _pid_alive(int(owner)):
            left.append(container)
    return left


def podman_services() -> list[str]:
    """podman API services that vsbench started (their sockets live in vsbench-podman-* folders) in
    this test process, or whose starter is gone (each dies with its starter: PR_SET_PDEATHSIG, so an
    orphan is a leak); not a live other process's (``make test`` runs two)."""
    found = subprocess.run(["pgrep", "-af", "podman system service"], capture_output=True, text=True, check=False)
    left = []
    for line in found.stdout.splitlines():
        if "vsbench-podman-" not in line:
            continue
        parent = _parent(int(line.split()[0]))
        if parent is None or parent in (os.getpid(), 1) or not _pid_alive(parent):
            left.append(line)
    return left


def _parent(pid: int) -> int | None:
    """``pid``'s parent (None when ``pid`` has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
