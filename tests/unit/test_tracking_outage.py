"""A tracking store that goes away while a pipeline runs costs each step one bounded call.

Each step opens its child run through :func:`vsbench.tracking.runs.child_run`; the first call that
fails takes that step's tracker offline and every later logging call returns at once, so the
step finishes with its metrics in its own manifest. The one failed call is bounded by MLflow's
request timeout and retries (``MLFLOW_HTTP_REQUEST_TIMEOUT`` / ``_MAX_RETRIES``; vsbench sets 20 s
and 2 when they are unset): here 1 s and no retry."""

from __future__ import annotations

import socket
import time

import pytest


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_step_with_its_store_gone_makes_one_bounded_call_then_goes_on(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from vsbench.tracking.runs import child_run, log_to_parent

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("VSBENCH_NO_TRACK", raising=False)
    started = time.monotonic()
    with child_run("a-parent-run-id", "abid-score", {"seed": 3}) as tracker:
        opened = time.monotonic() - started
        for epoch in range(50):  # a training step logs every epoch: all of it must be free now
            tracker.log_metrics({"val_accuracy": 0.5}, step=epoch)
        tracker.log_params({"late": 1})
    log_to_parent("a-parent-run-id", {"counting_accuracy": 0.5})  # a second, separate bounded call
    elapsed = time.monotonic() - started
    assert not tracker.online and "open child run abid-score" in tracker.error
    assert opened < 10 and elapsed < 20, (opened, elapsed)
    warned = [line for line in capsys.readouterr().err.splitlines() if "MLflow tracking unavailable" in line]
    assert 1 <= len(warned) <= 2  # once for the step, once for the parent metrics: not once per call
