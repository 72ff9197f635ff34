"""Shared fixtures: a real S3 endpoint (moto's server) on 127.0.0.1, started once per session."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator

import pytest

from vsbench.platform.local_s3 import LocalS3

_bucket_numbers = itertools.count()

# Under pytest-xdist (``make test``: two processes on 2 cores), each process and the steps it starts
# get their share of the cores for torch's and BLAS's thread pools (set before anything imports
# torch), not a pool as wide as the machine each: oversubscribed pools spin-wait and cost CPU time
# for nothing. A value the caller set is kept; tests that need a count set their own.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.setdefault("OMP_NUM_THREADS", _share)
    os.environ.setdefault("MKL_NUM_THREADS", _share)

# The embedding cache signs its chunks with a secret (vsbench.io.cache_secret): the suite uses one
# fixed value of its own, set before any fixture embeds, so no test reads or makes the user's
# ~/.config/vsbench/cache-secret, and steps the tests start (subprocess runner) sign with the same.
# Tests of the secret itself set or clear it with monkeypatch.
TEST_CACHE_SECRET = "vsbench-test-suite-cache-secret-0123456789abcdef"
os.environ["VSBENCH_CACHE_SECRET"] = TEST_CACHE_SECRET


@pytest.fixture(autouse=True, scope="session")
def session_embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Module- and session-scoped fixtures that embed run before the per-test fixture below; they
    get a cache of the session's own rather than the user's ~/.cache."""
    import os

    before = os.environ.get("VSBENCH_EMBED_CACHE")
    os.environ["VSBENCH_EMBED_CACHE"] = str(tmp_path_factory.mktemp("session-embedding-cache"))
    yield
    if before is None:
        os.environ.pop("VSBENCH_EMBED_CACHE", None)
    else:
        os.environ["VSBENCH_EMBED_CACHE"] = before


@pytest.fixture(autouse=True)
def builtin_print_restored() -> Iterator[None]:
    """kfp.local indents a task's output by swapping ``builtins.print`` (logging_utils.indented_print);
    when two of those swaps interleave, the indenting print outlives the run. Seen in the full
    suite: every later test's printed lines came out indented. Each test starts and ends with the
    real print."""
    import builtins

    real = builtins.print
    yield
    builtins.print = real


@pytest.fixture(autouse=True)
def private_embedding_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test gets an empty embedding cache of its own (vsbench.models.cache), so no test is
    served descriptors another test computed, and none writes to the user's ~/.cache. It is removed
    when the test ends (a cache, not evidence), so the session's disk use does not grow test by test."""
    cache = tmp_path_factory.mktemp("embedding-cache")
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", str(cache))
    yield
    shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(autouse=True)
def private_tracking_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Commands track to MLFLOW_TRACKING_URI or else a local default store under VSBENCH_HOME. A test
    that names no store tracks nothing (VSBENCH_DEFAULT_STORE=off: a store per test costs seconds),
    and none writes to the user's ~/.vsbench. Tests of the default store clear the variable.

    A command run in the test's process that finds tracking off sets VSBENCH_NO_TRACK for the steps
    it starts (``disable_tracking``); it is removed after the test too, since a module-scoped fixture
    made before the next test's own fixtures would otherwise inherit it."""
    monkeypatch.setenv("VSBENCH_HOME", str(tmp_path_factory.mktemp("vsbench-home")))
    monkeypatch.setenv("VSBENCH_DEFAULT_STORE", "off")
    monkeypatch.delenv("VSBENCH_NO_TRACK", raising=False)
    yield
    os.environ.pop("VSBENCH_NO_TRACK", None)


@pytest.fixture(autouse=True, scope="module")
def module_starts_tracked() -> None:
    """A module's own fixtures start with tracking as the session left it: an autouse fixture runs
    before the module-scoped fixtures of its scope, which run before any test's own (per-test)
    fixtures. Seen: a command that found tracking off in the module before set VSBENCH_NO_TRACK
    (``disable_tracking``), and the next module's two tracked runs, made in a module fixture, wrote
    no MLflow run; it depended on the order the files ran in (and would on pytest-xdist's split)."""
    os.environ.pop("VSBENCH_NO_TRACK", None)


@pytest.fixture(scope="session")
def local_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    with LocalS3(log=tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def public_bucket(local_s3: LocalS3) -> str:
    """A fresh, anonymously readable bucket per test; returns its name."""
    name = f"abid-test-{next(_bucket_numbers)}"
    local_s3.public_bucket(name)
    return name


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest memo treats files as settled at once (ctime cannot be set back): tests of the memo."""
    from vsbench.io import digests

    monkeypatch.setattr(digests, "RACY_NS", 0)


# The suite's peak under the temporary folder, measured on 2026-11-29 with passing tests' folders
# removed as they end (pyproject.toml): about 2.1 GB. Twice that is asked for.
MIN_FREE_GB = 4.0


def pytest_sessionstart(session: pytest.Session) -> None:
    """Too little disk for the suite is one line before any test, not 2,000 errors of ``No space left on
    device`` 20 minutes later (seen in CI: a machine whose /tmp held 40 GB of earlier sessions)."""
    import tempfile

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controlling process has checked
    folder = tempfile.gettempdir()
    free_gb = shutil.disk_usage(folder).free / 1e9
    wanted = float(os.environ.get("VSBENCH_TEST_MIN_FREE_GB", MIN_FREE_GB))
    if free_gb < wanted:
        pytest.exit(f"the test suite needs about {wanted:g} GB free under {folder} (its pipeline runs); "
                    f"{free_gb:.1f} GB are free: free some space (old /tmp/pytest-of-* folders) or point TMPDIR "
                    "at a larger disk", returncode=3)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with a slow test run first, each module's tests in their order. Why: ``make test`` runs
    the suite in two processes (pytest-xdist, a module at a time); a long module handed out last
    would run alone at the end while the other process sits idle. Started first, the long ones
    overlap and the many short modules fill the gaps."""
    slow = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in slow)  # stable: the rest keeps its order


@pytest.fixture(scope="module")
def one_thread():
    """One torch intra-op thread for a module (the embed tests): on a shared 2-core machine competing
    OpenMP threads slow tiny models down. Used as ``pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
