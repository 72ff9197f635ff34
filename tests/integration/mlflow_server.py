"""A real ``mlflow server`` on 127.0.0.1 for the integration tests, and pipeline runs recorded in it.

The tests talk to MLflow over HTTP exactly as the pipeline steps do on a cluster, so they catch what
an in-process file store hides: REST-only limits, tag and metric names the server rejects, artifact
uploads through the server's proxy (``mlflow-artifacts:/``). The backend is sqlite in a temporary
folder; one worker keeps the start (~20 s on two cores) and the memory small.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from vsbench.platform.local_s3 import free_port
from vsbench.tracking.runs import close_parent_run, log_to_parent, open_parent_run


def _mlflow_command() -> list[str]:
    """The venv's own mlflow, so the server matches the client's version."""
    sibling = Path(sys.executable).with_name("mlflow")
    return [str(sibling)] if sibling.exists() else [sys.executable, "-m", "mlflow"]


class MlflowServer:
    """``with MlflowServer(tmp) as server: server.uri`` — sqlite backend and served artifacts under ``root``."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = root / "mlflow-server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            *_mlflow_command(), "server",
            "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
            # Artifacts go through the server (mlflow-artifacts:/), as on the cluster: clients need no
            # access to the server's disk.
            "--serve-artifacts", "--artifacts-destination", str(self.root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]

    def start(self, timeout: float = 120.0) -> Self:
        self.root.mkdir(parents=True, exist_ok=True)
        # No job runner: it serves GenAI scorer jobs, which vsbench never uses, and it slows the stop.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.log, "ab") as stream:
            # Its own process group: the CLI, uvicorn and its worker stop together.
            self._process = subprocess.Popen(self.command(), stdout=stream, stderr=subprocess.STDOUT,
                                             cwd=self.root, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with code {self._process.returncode}:\n{self._tail()}")
            if self._healthy():
                return self
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"mlflow server not healthy on {self.uri} within {timeout} s:\n{self._tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM to the server's own process group (this server only); SIGKILL if it hangs."""
        if self._process is not None and self._process.poll() is None:
            group = os.getpgid(self._process.pid)
            os.killpg(group, signal.SIGTERM)
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(group, signal.SIGKILL)
                self._process.wait()
        self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def record_pipeline_run(experiment: str, pipeline: str, metrics: Mapping[str, float], *,
                        params: Mapping[str, Any] | None = None, status: str | None = "FINISHED") -> str:
    """A pipeline's parent run made the way the pipeline makes it (``open_parent_run``, metrics on the
    parent, the exit handler's close); ``status`` None leaves it RUNNING, like a night in progress.
    Needs ``MLFLOW_TRACKING_URI`` set; returns the MLflow run id."""
    kfp_run_id = f"kfp-{uuid.uuid4().hex[:12]}"
    run_id = open_parent_run(experiment, kfp_run_id, pipeline, params or {})
    assert run_id, "MLflow unreachable: open_parent_run went offline"
    log_to_parent(run_id, metrics)
    if status is not None:
        assert close_parent_run(experiment, kfp_run_id, succeeded=status == "FINISHED") == run_id
    return run_id
