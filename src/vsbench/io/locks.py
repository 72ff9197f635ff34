"""One writer per output: an exclusive lock on a folder (or on one named output in it).

Why: two runs into one ``--out`` with different options both exited 0 with a table mixing query
features of one model and reference features of the other (issue 37). Every step that writes an
output folder takes :func:`output_lock` on it first; a second run into the same folder waits
(``VSBENCH_LOCK_WAIT_S``, default 0: it does not) and then stops with one line naming the folder,
the holder's host, pid and command, and what to do.

The lock is a file, ``.vsbench-lock`` (``.vsbench-lock.<name>`` for one output of several written
in parallel into one folder, such as the embed step's shards), held with ``flock``:

* the kernel releases it when the holder dies however it dies (``kill -9``, an OOM kill, a pod
  deleted), so a lock is never left stale on one machine; on a shared volume (NFS, CephFS) the
  lock is the server's POSIX lock, released when the client's lease ends;
* the file holds the holder's host, pid, command and start time, for the message; a file whose
  lock is free is a stale record and is simply taken over (and named in the debug log);
* the file is not deleted while it may matter, so two runs never lock two different files under one
  name; a run that removes what it made (a download that fetched nothing) unlinks it while holding
  it, and a run that was waiting on it sees it unlinked (no links left) and locks the new file.

A filesystem that cannot lock at all (some FUSE mounts) gets one warning and no lock: the run goes
on, as before locks existed.

One run, one holder (issue 46). A pipeline run whose steps are other processes (``--runner
subprocess`` or ``container``, ``abid run-local``) holds its folders for its whole length with
:func:`run_lease`: the folder lock exclusively, its record carrying a lease token that the steps
inherit in ``VSBENCH_RUN_LEASE``. A step whose folder is held by a record carrying its own token is
admitted (it then shares ``.vsbench-lock.run`` with the run's other steps as it would have shared
the folder lock); any other process is refused, or waits for the whole run. On a cluster no
process lives for the whole run: the opening step writes a lease file naming the KFP run
(:func:`claim_lease`), each step that writes the folder checks and renews it (:func:`folder_lease`),
the exit handler releases it (:func:`release_lease`), and a lease that expired (a run killed
without its exit handler) is taken over with one warning line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vsbench.io.inputs import WordedInputError
from vsbench.io.storage import atomic_write_json

logger = logging.getLogger(__name__)

LOCK_FILE = ".vsbench-lock"
WAIT_ENV = "VSBENCH_LOCK_WAIT_S"
POLL_S = 0.5
LEASE_ENV = "VSBENCH_RUN_LEASE"  # the token of the run whose steps this process runs (run_lease)
RUN_UNIT = "run"  # what a leased run's own steps share among themselves: .vsbench-lock.run
LEASE_FILE = ".vsbench-lease.json"  # a cluster run's lease on its folder (claim_lease)
LEASE_TTL_ENV = "VSBENCH_LEASE_TTL_S"
LEASE_TTL_S = 3600.0  # a pod pending for a GPU must not lose its run's folder; a killed run frees it after this


class OutputBusy(WordedInputError):
    """Another run holds the lock of an output folder (an expected failure: one line, exit 2)."""


def lock_path(folder: Path, name: str = "") -> Path:
    return Path(folder) / (f"{LOCK_FILE}.{name}" if name else LOCK_FILE)


def wait_seconds(wait_s: float | None = None) -> float:
    """How long a run waits for a held lock: the argument, else ``VSBENCH_LOCK_WAIT_S``, else 0."""
    if wait_s is not None:
        return max(0.0, float(wait_s))
    raw = os.environ.get(WAIT_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{WAIT_ENV}={raw[:100]!r} is not a number of seconds") from None
    if not value >= 0:
        raise ValueError(f"{WAIT_ENV}={raw[:100]!r} must be 0 or more seconds")
    return value


def _holder(lease: str = "") -> dict[str, Any]:
    record = {"host": socket.gethostname(), "pid": os.getpid(), "command": " ".join(sys.argv)[:300],
              "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return {**record, "lease": lease} if lease else record


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 65536).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    if not holder.get("pid"):
        return "another process (which has not written its name yet)"
    command = str(holder.get("command") or "")
    if holder.get("released"):
        return "another vsbench process, which has not written its name"
    kind = "a pipeline step (others may share it): " if holder.get("shared") else (
        "a pipeline run (for all its steps): " if holder.get("lease") else "")
    return kind + (f"pid {holder.get('pid')} on host {holder.get('host')!s}"
            + (f" ({command[:120]})" if command else "") + (f", since {holder['since']}" if holder.get("since") else ""))


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike[str], *, name: str = "", what: str = "",
                wait_s: float | None = None, shared: bool = False, lease: str = "") -> Iterator[Path]:
    """Hold the exclusive lock of ``folder`` (or of its output ``name``) for the ``with`` block.

    ``what`` words the output for the message (default: the folder). Raises :class:`OutputBusy`
    when another process holds it after ``wait_s`` seconds (default :func:`wait_seconds`). The lock
    is held by this process until the block ends. Within one thread the lock is re-entrant: a run
    holding its folder exclusively (``similarity run``) calls the steps, whose own locks are then
    already its own. ``shared`` takes it in shared mode: the steps of one
    pipeline, running in parallel, share their folder and each holds its own output exclusively
    (:func:`step_lock`), while a whole run (``similarity run``) holds the folder exclusively.
    ``lease`` (exclusive only, :func:`run_lease`) is written in the record: the processes given it in
    ``VSBENCH_RUN_LEASE`` (the run's steps) are admitted, one step per unit among them.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputBusy(f"{folder}: cannot be an output folder ({exc.strerror or exc}): choose a folder path") from None
    path = lock_path(folder, name)
    held = _HELD.get(os.path.realpath(path))
    if held is not None and held[0] == _me() and (held[1] == "exclusive" or shared):
        yield path  # this process holds it already (the outer holder releases it)
        return
    with _holding(path, shared):
        yield from _locked(folder, path, what=what, wait_s=wait_s, shared=shared, lease=lease)


_HELD: dict[str, tuple[tuple[int, int], str]] = {}  # lock file (real path) -> ((pid, thread), mode) held here


def _me() -> tuple[int, int]:
    """Who holds a lock re-entrantly: this thread of this process (a forked child is not its parent,
    and another thread is excluded as another process is: flock locks open files, not threads)."""
    return (os.getpid(), threading.get_ident())


@contextlib.contextmanager
def _holding(path: Path, shared: bool) -> Iterator[None]:
    key = os.path.realpath(path)
    _HELD[key] = (_me(), "shared" if shared else "exclusive")
    try:
        yield
    finally:
        _HELD.pop(key, None)


def _admitted(fd: int) -> bool:
    """Whether the holder of this folder lock is the run whose step this process is: its record
    carries the token this process inherited (``VSBENCH_RUN_LEASE``). A token is drawn per run, and a
    record whose holder died is no obstacle (its lock is free), so a match is a live run's own step."""
    token = os.environ.get(LEASE_ENV, "")
    holder = _read_holder(fd)
    return bool(token) and holder.get("lease") == token and not holder.get("released")


def _locked(folder: Path, path: Path, *, what: str, wait_s: float | None, shared: bool,
            lease: str = "") -> Iterator[Path]:
    deadline = time.monotonic() + wait_seconds(wait_s)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except PermissionError:
        # A lock file another user made (the host's, for a step inside the image as user 10001):
        # flock needs no write access, only the holder's record is left unwritten.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            logger.warning("%s: cannot open the lock file (%s); going on without the one-writer lock", path,
                           exc.strerror or exc)
            yield path
            return
    try:
        waited = False
        unsupported = ""
        admitted = False
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                if os.fstat(fd).st_nlink:
                    break
                # Its holder removed the file as it let go (a download that fetched nothing removes
                # what it made): a lock on it no longer excludes anyone, so lock the file there now.
                os.close(fd)
                fd = -1
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
                continue
            except OSError as exc:
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    unsupported = exc.strerror
                    break
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            if path.name == LOCK_FILE and _admitted(fd):
                admitted = True
                break
            if time.monotonic() >= deadline:
                holder = _read_holder(fd)
                target = what or str(folder)
                raise OutputBusy(
                    f"{target} is being written by another vsbench run: {_describe(holder)}. Wait for it to finish "
                    f"(or set {WAIT_ENV} to wait), or choose another output folder; the lock is {path}")
            if not waited:
                print(f"[vsbench] waiting for {what or folder}: held by {_describe(_read_holder(fd))}",
                      file=sys.stderr, flush=True)
                waited = True
            time.sleep(POLL_S)
        if unsupported:
            logger.warning("%s: this filesystem cannot lock files (%s); going on without the one-writer lock",
                           path, unsupported)
            yield path
            return
        if admitted:  # a step of the run holding the folder: its steps exclude each other on their own lock
            os.close(fd)
            fd = -1
            yield from _locked(folder, lock_path(folder, RUN_UNIT), what=what, shared=shared,
                               wait_s=max(0.0, deadline - time.monotonic()))
            return
        if shared:  # several holders: the record names the latest, and is never marked released
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(dict(_holder(), shared=True)).encode(), 0)
            yield path
            return
        previous = _read_holder(fd)
        if previous.get("pid") and not previous.get("released"):
            logger.debug("%s: taking over the lock record of %s, which no longer holds it", path, _describe(previous))
        with contextlib.suppress(OSError):  # a read-only lock file: locked, the record left as it is
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(_holder(lease)).encode(), 0)
        try:
            yield path
        finally:
            with contextlib.suppress(OSError):
                done = dict(_holder(), released=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(done).encode(), 0)
    finally:
        if fd >= 0:
            os.close(fd)  # closing releases the flock


@contextlib.contextmanager
def run_lease(folders: Iterable[str | os.PathLike[str]], *, what: str = "", wait_s: float | None = None) -> Iterator[str]:
    """Hold each of ``folders`` exclusively for a whole pipeline run whose steps are other processes
    (kfp.local's subprocesses or containers), and admit those steps only; yields the lease token.

    Why: a run that holds nothing between its steps lets a second run slip in between them (its
    features then scored by the first run's score step), and a waiting run waits for one step, not
    for the run. The token is drawn here, written in the folders' lock records and set in
    ``VSBENCH_RUN_LEASE`` for the block, so every step started in it inherits it (a subprocess by its
    environment, a container by :func:`vsbench.platform.containers.step_environment`). Taken before
    anything heavy is imported or checked, a busy folder is refused at once."""
    token = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"
    previous = os.environ.get(LEASE_ENV)
    with contextlib.ExitStack() as held:
        for folder in dict.fromkeys(Path(f) for f in folders):
            held.enter_context(output_lock(folder, what=what or str(folder), wait_s=wait_s, lease=token))
        os.environ[LEASE_ENV] = token
        try:
            yield token
        finally:
            if previous is None:
                os.environ.pop(LEASE_ENV, None)
            else:
                os.environ[LEASE_ENV] = previous


def lease_ttl() -> float:
    """How long a cluster run's lease lasts unrenewed: ``VSBENCH_LEASE_TTL_S``, else an hour."""
    raw = os.environ.get(LEASE_TTL_ENV, "").strip()
    try:
        value = float(raw) if raw else LEASE_TTL_S
    except ValueError:
        raise ValueError(f"{LEASE_TTL_ENV}={raw[:100]!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{LEASE_TTL_ENV}={raw[:100]!r} must be more than 0 seconds")
    return value


def _read_lease(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / LEASE_FILE).read_text(encoding="utf-8", errors="replace") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_lease(folder: Path, lease: dict[str, Any]) -> None:
    """Atomically (a reader sees the old lease or the new one, never half of one)."""
    atomic_write_json(folder / LEASE_FILE, lease)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def claim_lease(folder: str | os.PathLike[str], run_id: str, *, now: float | None = None) -> str:
    """Check that the lease file of ``folder`` names the cluster run ``run_id`` (a KFP run id) and
    renew it; returns what was done: ``claimed``, ``renewed``, ``taken over``, ``checked`` or ``none``.

    Why a file: on a cluster no process lives for the whole run, so no flock can span it. The
    pipeline's opening step claims the folder, each step that writes it claims it again (a renewal),
    the exit handler releases it. Refused in one line (:class:`OutputBusy`, naming the holding run
    and until when) while another run's lease is live; an expired one (a run killed without its exit
    handler) is taken over with one warning, and the run it was taken from is remembered so that its
    later steps are refused rather than write into the taker's outputs. Under a local run
    (``VSBENCH_RUN_LEASE`` set: its flock holds the folder for the whole run, and dies with it) the
    lease is only checked, never written, so a local run killed outright leaves no lease behind."""
    if not run_id:
        return "none"
    folder = Path(folder)
    ttl = lease_ttl()
    with output_lock(folder, name="lease", what=f"{folder} (its run lease)", wait_s=max(30.0, wait_seconds())):
        now = time.time() if now is None else now
        lease = _read_lease(folder)
        holder, taken = str(lease.get("run") or ""), [str(r) for r in lease.get("taken_over") or []]
        if run_id in taken:
            raise OutputBusy(f"{folder}: the lease of run {run_id} expired and was taken over by run {holder or '?'}, "
                             "whose outputs it may now hold: run this pipeline again (a new run)")
        expired = float(lease.get("expires") or 0) <= now
        other = bool(holder) and holder != run_id and not lease.get("released")
        if other and not expired:
            raise OutputBusy(
                f"{folder} is leased by pipeline run {holder} until {_when(float(lease['expires']))} (renewed by its "
                f"steps): wait for it to finish, or choose another output folder; if that run is dead, remove "
                f"{folder / LEASE_FILE}")
        if other:
            logger.warning("%s: taking over the lease of pipeline run %s, which expired at %s unrenewed (killed "
                           "without its exit handler?)", folder, holder, _when(float(lease.get("expires") or 0)))
            print(f"[vsbench] warning: {folder}: taking over the expired lease of pipeline run {holder}",
                  file=sys.stderr, flush=True)
            taken = [*taken, holder][-20:]
        if os.environ.get(LEASE_ENV):
            return "checked"
        mine = holder == run_id and not lease.get("released")
        _write_lease(folder, {"run": run_id, "expires": now + ttl, "renewed": _when(now),
                              "since": lease.get("since") if mine else _when(now), "host": socket.gethostname(),
                              "taken_over": taken})
        return "renewed" if mine else "taken over" if other else "claimed"


def release_lease(folder: str | os.PathLike[str], run_id: str) -> bool:
    """The exit handler's end of a cluster run's lease: marked released when it names ``run_id``
    (a run refused at its opening step never held it, and leaves the holder's lease alone)."""
    folder = Path(folder)
    if not run_id or os.environ.get(LEASE_ENV) or not (folder / LEASE_FILE).exists():
        return False
    with output_lock(folder, name="lease", what=f"{folder} (its run lease)", wait_s=max(30.0, wait_seconds())):
        lease = _read_lease(folder)
        if lease.get("run") != run_id or lease.get("released"):
            return False
        _write_lease(folder, {**lease, "released": _when(time.time())})
        return True


@contextlib.contextmanager
def folder_lease(folders: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], run_id: str) -> Iterator[None]:
    """A cluster step's hold on its run's lease for the ``with`` block: claimed first (refused in
    one line when another run holds it), renewed every quarter of its lifetime while the step works
    (a training of hours outlives any lifetime), and checked again at the end, so that a step whose
    lease was taken over meanwhile fails instead of reporting outputs that may not be its run's."""
    chosen = [Path(folders)] if isinstance(folders, (str, os.PathLike)) else [Path(f) for f in folders]
    if not run_id:
        yield
        return
    for folder in chosen:
        claim_lease(folder, run_id)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease_ttl() / 4):
            for folder in chosen:
                try:
                    claim_lease(folder, run_id)
                except Exception as exc:  # noqa: BLE001 - said here, raised at the end of the block
                    logger.warning("%s: the run lease could not be renewed: %s", folder, exc)

    thread = threading.Thread(target=renew, name="vsbench-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
    for folder in chosen:
        claim_lease(folder, run_id)


def leased_folders(text: str) -> list[str]:
    """The folders a pipeline leases, as its opening step and exit handler are given them: one
    folder (a pipeline parameter, which cannot be put in a list when the pipeline is compiled), or a
    JSON list of them (the nightly pipeline's compiled-in suite); "" for none."""
    text = (text or "").strip()
    if not text.startswith("["):
        return [text] if text else []
    folders = json.loads(text)
    if not isinstance(folders, list) or not all(isinstance(f, str) and f for f in folders):
        raise ValueError(f"lease folders {text[:200]!r} must be a folder or a JSON list of folders")
    return folders


@contextlib.contextmanager
def step_lock(folder: str | os.PathLike[str], unit: str, *, what: str = "", wait_s: float | None = None) -> Iterator[Path]:
    """The lock of one step's output ``unit`` (``embed-shard-0-of-4``, ``index-fill-2``, ...) in the
    run folder ``folder``: the folder in shared mode (so a whole run holding it stops this step, and
    the other steps of one pipeline go on beside it) and the unit exclusively."""
    with output_lock(folder, what=what or str(folder), wait_s=wait_s, shared=True), \
            output_lock(folder, name=unit, what=f"{what or folder} ({unit})", wait_s=wait_s) as path:
        yield path
