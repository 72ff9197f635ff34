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

import pytest

from vsbench.platform.containers import podman_environment
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
    """Ids of step containers (running or not) that any vsbench run left on this machine."""
    engine = shutil.which("podman") or shutil.which("docker") or "podman"
    listed = subprocess.run([engine, "ps", "--all", "--quiet", "--filter", "label=io.vsbench.owner-pid"],
                            capture_output=True, text=True, env=podman_environment(), timeout=60, check=True)
    return listed.stdout.split()


def podman_services() -> list[str]:
    """podman API services that vsbench started (their sockets live in vsbench-podman-* folders)."""
    found = subprocess.run(["pgrep", "-af", "podman system service"], capture_output=True, text=True, check=False)
    return [line for line in found.stdout.splitlines() if "vsbench-podman-" in line]
