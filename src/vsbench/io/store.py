"""The MLflow store as every reader talks to it (``vsbench compare``, the leaderboard, the nightly
check, a trunk's weights read from a run, the score step's evaluation runs): every call bounded by
``VSBENCH_TRACKING_TIMEOUT`` seconds, and a store that is down, refuses or hangs said in one line
naming its URI (issue 54). :func:`store_client` is the one way vsbench builds a client to read runs
back; it sits in ``io`` (the bottom layer) so that ``models`` may use it too.

MLflow's client retries a refused connection with exponential backoff (seven times by default: a
closed port cost ``vsbench compare`` 260 s of silence, then a 400-character message). Here each call
runs in a daemon thread that the caller waits for at most the bound, MLflow's own retries are kept
few (as :mod:`vsbench.tracking.runs` sets them for the steps), and a connection failure becomes
:class:`StoreError`, one line. An answer that is an MLflow error of its own (an unknown run id, a
bad filter) passes through unchanged: the store answered.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TIMEOUT_ENV = "VSBENCH_TRACKING_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0

# The same bounds the pipeline steps' trackers use (vsbench.tracking.runs): a refused port fails in a
# few seconds, not after MLflow's default seven retries.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")


def tracking_timeout() -> float:
    """The most seconds a command waits for MLflow (``VSBENCH_TRACKING_TIMEOUT``, default 30)."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if math.isfinite(value) and value > 0 else DEFAULT_TIMEOUT_S


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]{1,80})")


class StoreError(ValueError):
    """The MLflow store did not answer (down, refusing, hanging past the bound): one line, exit 2."""

    one_line = True
    exit_code = 2  # what the CLI's root exits with for it, as for the other bad settings it names


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the store could not be reached at all (not an answer of the store's)."""
    import requests

    seen: BaseException | None = exc
    for _ in range(6):  # MLflow wraps the requests error; follow the chain a little way
        if seen is None:
            break
        if isinstance(seen, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError,
                             TimeoutError)):
            return True
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    return "Max retries exceeded" in text or "Failed to establish a new connection" in text


def _cause(exc: BaseException) -> str:
    """A few words of why: ``Connection refused``, ``timed out``; else the error's type."""
    found = _ERRNO.search(str(exc))
    if found:
        return found.group(1).strip()
    if "timed out" in str(exc).lower():
        return "timed out"
    return type(exc).__name__


def bounded(call: Callable[[], Any], uri: str, what: str, timeout: float | None = None) -> Any:
    """``call()``'s result, waited for at most ``timeout`` (default ``VSBENCH_TRACKING_TIMEOUT``) seconds;
    a store that does not answer in time or cannot be reached is one :class:`StoreError` naming ``uri``."""
    limit = tracking_timeout() if timeout is None else timeout
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it was
            box["error"] = exc

    thread = threading.Thread(target=work, name=f"mlflow-{what}", daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(limit)
    if thread.is_alive():  # left behind: a daemon thread, it does not keep the process alive
        raise StoreError(f"MLflow store {uri} did not answer {what} within {limit:g} s ({TIMEOUT_ENV}); "
                         "check that the server is up, or MLFLOW_TRACKING_URI")
    error = box.get("error")
    if error is not None:
        if _unreachable(error):
            raise StoreError(f"MLflow store {uri} cannot be reached ({_cause(error)}, after "
                             f"{time.monotonic() - started:.1f} s); check that the server is up, or "
                             "MLFLOW_TRACKING_URI") from None
        raise error
    return box.get("value")


class BoundedClient:
    """An ``MlflowClient`` whose every method call is :func:`bounded` (attributes pass through)."""

    def __init__(self, client: Any, uri: str, timeout: float | None = None) -> None:
        self._client = client
        self.uri = uri
        self.timeout = timeout

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return bounded(lambda: attribute(*args, **kwargs), self.uri, name, self.timeout)

        return call


def store_client(timeout: float | None = None, uri: str | None = None) -> BoundedClient:
    """An MLflow client for reading runs back, each call bounded (see the module docstring): of the
    store ``uri`` names, else of the environment's (``MLFLOW_TRACKING_URI``)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    return BoundedClient(MlflowClient(tracking_uri=uri) if uri else MlflowClient(), uri or mlflow.get_tracking_uri(),
                         timeout)


@contextmanager
def store_down_exits() -> Iterator[None]:
    """For a pipeline component, which has no command line around it to word its errors: a
    :class:`StoreError` inside becomes one ``error:`` line on stderr (naming the store's URI) and
    exit 2, not a traceback in the pod's log. Other errors pass through unchanged."""
    try:
        yield
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
