"""Integration fixtures: one real ``mlflow server`` on 127.0.0.1 per test session.

``mlflow_server`` only starts the server and yields its URI; it sets nothing global. A test points
vsbench at it through the environment, as a pipeline step is pointed on a cluster, with the
function-scoped ``mlflow_tracking`` (or its own ``monkeypatch.setenv``). Tests share the server,
so each one works in its own experiment (``fresh_experiment``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from vsbench.tracking.config import ARTIFACT_LOCATION_ENV

from .mlflow_server import MlflowServer


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as server:
        yield server.uri


@pytest.fixture
def mlflow_tracking(mlflow_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point MLflow (and so vsbench) at the session's server for one test; returns the URI."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    # New experiments must use the server's artifact proxy, not a location meant for a cluster.
    monkeypatch.delenv(ARTIFACT_LOCATION_ENV, raising=False)
    return mlflow_server


@pytest.fixture
def fresh_experiment() -> str:
    """A new experiment name per test: the session's server is shared."""
    return f"test-{uuid.uuid4().hex[:12]}"
