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
without its exit handler) is taken over with one warning line. The lease file is read by a strict
schema (:mod:`vsbench.io.leases`): a malformed one is one error line, never claimed over, and a
local run checks it too before its first step (:func:`check_lease`), whatever its runner.

Locks die with their run, not with its forked workers (issue 54): a forked child closes its copies
of every lock descriptor at once (:func:`_close_in_child`), since flock belongs to the open file.
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
from vsbench.io.leases import LEASE_FILE, MAX_LEASE_S, Lease, lease_live, read_lease
from vsbench.io.storage import atomic_write_json

logger = logging.getLogger(__name__)

LOCK_FILE = ".vsbench-lock"
WAIT_ENV = "VSBENCH_LOCK_WAIT_S"
POLL_S = 0.5
LEASE_ENV = "VSBENCH_RUN_LEASE"  # the token of the run whose steps this process runs (run_lease)
RUN_UNIT = "run"  # what a leased run's own steps share among themselves: .vsbench-lock.run
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
    # A holder of this host that has ended is not the holder: a process it forked outside Python
    # (which _close_in_child cannot reach) still holds the lock, until it ends too (issue 54).
    ended = "" if _alive(holder) else " (which has ended: a process it started still holds the lock until it ends)"
    return _one_line(kind + (f"pid {holder.get('pid')} on host {holder.get('host')!s}{ended}"
            + (f" ({command[:120]})" if command else "") + (f", since {holder['since']}" if holder.get("since") else "")))


def _one_line(text: str) -> str:
    """A record read back from a lock file is data: its control characters never break the message's line."""
    return "".join(c if c.isprintable() else "?" for c in text)


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


_FDS: dict[int, int] = {}  # lock file descriptor open in this process -> the pid that opened it


def _opened(fd: int) -> int:
    """Note a lock file's descriptor, so that a forked child closes its copy at once (below)."""
    _FDS[fd] = os.getpid()
    return fd


def _ours(fd: int) -> bool:
    """Whether ``fd`` is a lock descriptor this very process opened (not a forked child's copy, closed)."""
    return _FDS.get(fd) == os.getpid()


def _close(fd: int) -> None:
    """Close a lock descriptor (which releases its flock), unless this is a forked child whose copy
    was closed at the fork: the number may name another file by now."""
    if _ours(fd):
        del _FDS[fd]
        os.close(fd)


def _close_in_child() -> None:
    """A forked child (a DataLoader worker, a multiprocessing pool) lets go of its parent's locks.

    Why (issue 54): flock belongs to the open file, which a fork shares; a worker forked while its
    parent held an output folder kept the lock after the parent was killed (``kill -9``), and the next
    run was refused for 1.3-2.6 s naming the dead parent. O_CLOEXEC covers a child that executes
    another program, not one that only forks. Closing the child's copy (never LOCK_UN, which would
    release the parent's lock too) leaves the parent's lock to the parent alone."""
    for fd in list(_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _FDS.clear()
    _HELD.clear()  # held by the parent, not by this child


os.register_at_fork(after_in_child=_close_in_child)


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
        fd = _opened(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666))
    except PermissionError:
        # A lock file another user made (the host's, for a step inside the image as user 10001):
        # flock needs no write access, only the holder's record is left unwritten.
        try:
            fd = _opened(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
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
                _close(fd)
                fd = -1
                folder.mkdir(parents=True, exist_ok=True)
                fd = _opened(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666))
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
            _close(fd)
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
                if _ours(fd):  # (a forked child unwinding: not its record, and its copy is closed)
                    done = dict(_holder(), released=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, json.dumps(done).encode(), 0)
    finally:
        if fd >= 0:
            _close(fd)  # closing releases the flock


@contextlib.contextmanager
def run_lease(folders: Iterable[str | os.PathLike[str]], *, what: str = "", wait_s: float | None = None) -> Iterator[str]:
    """Hold each of ``folders`` exclusively for a whole pipeline run whose steps are other processes
    (kfp.local's subprocesses or containers), and admit those steps only; yields the lease token.

    Why: a run that holds nothing between its steps lets a second run slip in between them (its
    features then scored by the first run's score step), and a waiting run waits for one step, not
    for the run. The token is drawn here, written in the folders' lock records and set in
    ``VSBENCH_RUN_LEASE`` for the block, so every step started in it inherits it (a subprocess by its
    environment, a container by :func:`vsbench.platform.containers.step_environment`). Taken before
    anything heavy is imported or checked, a busy folder is refused at once; so is a folder that a
    cluster run's live lease file holds, or whose lease file is malformed (:func:`check_lease`), before
    any step, under every runner."""
    token = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"
    previous = os.environ.get(LEASE_ENV)
    with contextlib.ExitStack() as held:
        for folder in dict.fromkeys(Path(f) for f in folders):
            held.enter_context(output_lock(folder, what=what or str(folder), wait_s=wait_s, lease=token))
            check_lease(folder)  # a cluster run's live lease, or a lease file no one can believe: refused here
        os.environ[LEASE_ENV] = token
        try:
            yield token
        finally:
            if previous is None:
                os.environ.pop(LEASE_ENV, None)
            else:
                os.environ[LEASE_ENV] = previous


def lease_ttl() -> float:
    """How long a cluster run's lease lasts unrenewed: ``VSBENCH_LEASE_TTL_S``, else an hour; at most
    :data:`~vsbench.io.leases.MAX_LEASE_S` (a week), the furthest ahead a lease file may expire."""
    raw = os.environ.get(LEASE_TTL_ENV, "").strip()
    try:
        value = float(raw) if raw else LEASE_TTL_S
    except ValueError:
        raise ValueError(f"{LEASE_TTL_ENV}={raw[:100]!r} is not a number of seconds") from None
    if not 0 < value <= MAX_LEASE_S:
        raise ValueError(f"{LEASE_TTL_ENV}={raw[:100]!r} must be more than 0 and at most {MAX_LEASE_S:.0f} seconds "
                         "(a week)")
    return value


def _write_lease(folder: Path, lease: dict[str, Any]) -> None:
    """Atomically (a reader sees the old lease or the new one, never half of one)."""
    atomic_write_json(folder / LEASE_FILE, lease)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def _live_refusal(folder: Path, lease: Lease) -> OutputBusy:
    return OutputBusy(
        f"{folder} is leased by pipeline run {lease.run} until {_when(lease.expires)} (renewed by its "
        f"steps): wait for it to finish, or choose another output folder; if that run is dead, remove "
        f"{folder / LEASE_FILE}")


def check_lease(folder: str | os.PathLike[str], *, now: float | None = None) -> None:
    """Refuse in one line a folder that a cluster run's live lease holds, or whose lease file is not
    one vsbench wrote (:class:`~vsbench.io.leases.LeaseError`); a local run's check before its first
    step (:func:`run_lease`), whatever its runner: inline steps never read the lease file, and a
    kfp.local step refused by it fails inside kfp, in a traceback (issue 54)."""
    now = time.time() if now is None else now
    lease = read_lease(folder, now)
    if lease_live(lease, now):
        assert lease is not None
        raise _live_refusal(Path(folder), lease)


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
    lease is only checked, never written, so a local run killed outright leaves no lease behind.
    A lease file that is not one vsbench wrote (malformed JSON, an impossible expiry, a field of the
    wrong type) is never claimed over: :class:`~vsbench.io.leases.LeaseError`, one line."""
    if not run_id:
        return "none"
    folder = Path(folder)
    ttl = lease_ttl()
    with output_lock(folder, name="lease", what=f"{folder} (its run lease)", wait_s=max(30.0, wait_seconds())):
        now = time.time() if now is None else now
        lease = read_lease(folder, now)
        holder, taken = (lease.run, list(lease.taken_over)) if lease is not None else ("", [])
        if run_id in taken:
            raise OutputBusy(f"{folder}: the lease of run {run_id} expired and was taken over by run {holder or '?'}, "
                             "whose outputs it may now hold: run this pipeline again (a new run)")
        other = lease is not None and holder != run_id and not lease.released
        if other and lease_live(lease, now):
            assert lease is not None
            raise _live_refusal(folder, lease)
        if other:
            assert lease is not None
            logger.warning("%s: taking over the lease of pipeline run %s, which expired at %s unrenewed (killed "
                           "without its exit handler?)", folder, holder, _when(lease.expires))
            print(f"[vsbench] warning: {folder}: taking over the expired lease of pipeline run {holder}",
                  file=sys.stderr, flush=True)
            taken = [*taken, holder][-20:]
        if os.environ.get(LEASE_ENV):
            return "checked"
        mine = lease is not None and holder == run_id and not lease.released
        _write_lease(folder, {"run": run_id, "expires": now + ttl, "renewed": _when(now),
                              "since": lease.since if mine and lease is not None else _when(now),
                              "host": socket.gethostname(), "taken_over": taken})
        return "renewed" if mine else "taken over" if other else "claimed"


def release_lease(folder: str | os.PathLike[str], run_id: str) -> bool:
    """The exit handler's end of a cluster run's lease: marked released when it names ``run_id``
    (a run refused at its opening step never held it, and leaves the holder's lease alone)."""
    folder = Path(folder)
    if not run_id or os.environ.get(LEASE_ENV) or not (folder / LEASE_FILE).exists():
        return False
    with output_lock(folder, name="lease", what=f"{folder} (its run lease)", wait_s=max(30.0, wait_seconds())):
        now = time.time()
        lease = read_lease(folder, now)
        if lease is None or lease.run != run_id or lease.released:
            return False
        _write_lease(folder, {**lease.model_dump(exclude_defaults=False), "released": _when(now)})
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


# --- Readers and writers of an input folder (issue 46) ---------------------------------------------
#
# Why: ``abid resize`` and ``abid prepare`` rewrite the folders a training reads (``--images``,
# ``--tasks``); a training that read half the old bytes and half the new wrote checkpoints whose
# identity named bytes the network was not trained on, and a later run resumed from them. A training
# reads a folder (several at once: a pipeline's counting and siamese trainings read one image
# folder side by side); a resize or prepare writes it (a sharded resize's tasks side by side). Either
# kind may share the folder with its own kind, never with the other.
#
# flock has shared and exclusive modes only, so the two kinds are two files, each held shared by its
# holders, and a third, the gate, held exclusively for the instant of joining or leaving:
#
# * to join, a process takes the gate, takes its own kind's file shared, and probes the other kind's
#   file with a non-blocking exclusive lock: granted, nobody of the other kind holds the folder (the
#   probe is dropped at once); refused, it lets go of its own file and waits or stops;
# * every join and leave happens under the gate, so two of different kinds never both see the other
#   file free, and of two that arrive together one proceeds (a gate-less back-off could refuse both);
# * each holder adds one line (host, pid, command, start) to its kind's file and removes it when it
#   leaves; the first holder of a kind clears lines left by holders that died (the kernel released
#   their locks, not their lines). The refusal names the holders from those lines.
#
# A folder where the lock files cannot be made (a dataset on a read-only mount) is used without the
# lock: a reader says so in one debug line (``abid train`` re-checks its inputs' digests anyway,
# :mod:`vsbench.abid.checkpoints`), a writer, which writes there, in one warning.

READERS = "readers"
WRITERS = "writers"
GATE = "gate"
_KIND_WORDS = {READERS: "read by a training", WRITERS: "rewritten (abid resize or abid prepare)"}


class InputBusy(OutputBusy):
    """An input folder is written while a training would read it, or read while a run would write it."""


def _open_lock_file(path: Path, create: bool) -> int:
    """An fd on ``path`` for flock: read-write (created when ``create``), else read-only when it exists
    and cannot be written (flock needs no write access); -1 when neither."""
    try:
        return _opened(os.open(path, os.O_RDWR | (os.O_CREAT if create else 0) | os.O_CLOEXEC, 0o666))
    except OSError as exc:
        if exc.errno == errno.ENOENT and not create:
            return -1
        try:
            return _opened(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            return -1


def _holder_lines(fd: int) -> list[dict[str, Any]]:
    """The holders' records of a kind's file (one JSON object a line)."""
    try:
        data = os.pread(fd, 1 << 20, 0).decode("utf-8", "replace")
    except OSError:
        return []
    records = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def _alive(record: dict[str, Any]) -> bool:
    """False only for a holder of this host whose process is gone (its line outlived its lock)."""
    if record.get("host") != socket.gethostname() or not isinstance(record.get("pid"), int):
        return True
    try:
        os.kill(record["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _describe_holders(fd: int) -> str:
    records = [r for r in _holder_lines(fd) if _alive(r)]
    if not records:
        return "another process (which has not written its name)"
    more = f", and {len(records) - 1} more" if len(records) > 1 else ""
    return _describe(records[0]) + more


def _flock(fd: int, operation: int) -> bool:
    """flock, False when it would block; raises OSError for anything else (ENOLCK: cannot lock)."""
    try:
        fcntl.flock(fd, operation)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def _rewrite(fd: int, records: list[dict[str, Any]]) -> None:
    with contextlib.suppress(OSError):  # a read-only lock file: the lock holds, the lines are not kept
        data = "".join(json.dumps(r) + "\n" for r in records).encode()
        os.ftruncate(fd, 0)
        if data:
            os.pwrite(fd, data, 0)


@contextlib.contextmanager
def _gate(fd: int) -> Iterator[None]:
    """The gate, held for a join or a leave only (microseconds): waiting on it blocks."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def reading_lock(folder: str | os.PathLike[str], *, what: str = "", wait_s: float | None = None) -> Iterator[bool]:
    """Hold ``folder`` as one of its readers for the block: no :func:`writing_lock` holder beside it
    (a resize or prepare rewriting it), any number of other readers. Yields whether it is locked
    (False: the folder does not exist, or no lock file can be made there: one debug line)."""
    with _sharing(Path(folder), READERS, WRITERS, what=what, wait_s=wait_s) as locked:
        yield locked


@contextlib.contextmanager
def writing_lock(folder: str | os.PathLike[str], *, what: str = "", wait_s: float | None = None) -> Iterator[bool]:
    """Hold ``folder`` as one of its writers for the block (created when missing): no
    :func:`reading_lock` holder beside it (a training reading it), any number of other writers (a
    sharded resize's tasks; each also holds its own output lock). Yields whether it is locked."""
    folder = Path(folder)
    with contextlib.suppress(OSError):  # a folder that cannot be made: the writer says so itself
        folder.mkdir(parents=True, exist_ok=True)
    with _sharing(folder, WRITERS, READERS, what=what, wait_s=wait_s) as locked:
        yield locked


def _refusal(folder: Path, kind: str, other_path: Path, holders: str, what: str) -> str:
    target = what or str(folder)
    if kind == READERS:
        return (f"{target} is being {_KIND_WORDS[WRITERS]} by {holders}: a training must not read it while it "
                f"changes. Wait for it to finish (or set {WAIT_ENV} to wait), then train again; the lock is "
                f"{other_path}")
    return (f"{target} is being {_KIND_WORDS[READERS]}: {holders}. Wait for the training to finish (or set "
            f"{WAIT_ENV} to wait), or write into another folder; the lock is {other_path}")


@contextlib.contextmanager
def _sharing(folder: Path, kind: str, other: str, *, what: str, wait_s: float | None) -> Iterator[bool]:
    deadline = time.monotonic() + wait_seconds(wait_s)
    own_path, other_path, gate_path = (lock_path(folder, name) for name in (kind, other, GATE))
    quiet = kind == READERS  # a reader on a read-only dataset is the expected case, not a warning
    say = logger.debug if quiet else logger.warning
    if not folder.is_dir():
        say("%s: no such folder; going on without the readers/writers lock", folder)
        yield False
        return
    gate, own = _open_lock_file(gate_path, True), _open_lock_file(own_path, True)
    if gate < 0 or own < 0:
        for fd in (gate, own):
            if fd >= 0:
                _close(fd)
        say("%s: cannot make the lock files here (a read-only folder?); going on without the readers/writers lock "
            "(%s)", folder, "abid train re-checks its inputs' digests" if quiet else "nothing reads it while it is written")
        yield from _unlocked()
        return
    me = dict(_holder(), token=f"{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}")
    try:
        try:
            joined = _join(folder, kind, own, gate, other_path, me, what, deadline)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            say("%s: this filesystem cannot lock files (%s); going on without the readers/writers lock",
                folder, exc.strerror)
            joined = False
        try:
            yield joined
        finally:
            if joined and _ours(own):  # (a forked child unwinding: its copies are closed)
                with _gate(gate):
                    _rewrite(own, [r for r in _holder_lines(own) if r.get("token") != me["token"]])
    finally:
        _close(own)  # closing releases the shared lock
        _close(gate)


def _unlocked() -> Iterator[bool]:
    yield False


def _join(folder: Path, kind: str, own: int, gate: int, other_path: Path, me: dict[str, Any], what: str,
          deadline: float) -> bool:
    """Join ``kind``'s holders of ``folder`` (True), waiting until ``deadline`` while the other kind
    holds it; then :class:`InputBusy`."""
    waited = False
    while True:
        with _gate(gate):
            holders = ""
            if _flock(own, fcntl.LOCK_EX | fcntl.LOCK_NB):  # the first of its kind: old lines are of the dead
                _rewrite(own, [])
            fcntl.flock(own, fcntl.LOCK_SH | fcntl.LOCK_NB)  # (under the gate no one else holds it exclusively)
            probe = _open_lock_file(other_path, False)
            try:
                if probe >= 0 and not _flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB):
                    holders = _describe_holders(probe)
            finally:
                if probe >= 0:
                    _close(probe)  # drops the probe's lock, if it got it
            if not holders:
                with contextlib.suppress(OSError):
                    os.pwrite(own, (json.dumps(me) + "\n").encode(), os.fstat(own).st_size)
                return True
            fcntl.flock(own, fcntl.LOCK_UN)
        if time.monotonic() >= deadline:
            raise InputBusy(_refusal(folder, kind, other_path, holders, what))
        if not waited:
            doing = "reading it (a training)" if kind == WRITERS else "writing it (abid resize or abid prepare)"
            print(f"[vsbench] waiting for {what or folder}: {holders} is {doing}", file=sys.stderr, flush=True)
            waited = True
        time.sleep(POLL_S)
