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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vsbench.io.inputs import WordedInputError

logger = logging.getLogger(__name__)

LOCK_FILE = ".vsbench-lock"
WAIT_ENV = "VSBENCH_LOCK_WAIT_S"
POLL_S = 0.5


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


def _holder() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "command": " ".join(sys.argv)[:300],
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


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
    return ("a pipeline step (others may share it): " if holder.get("shared") else "") + (f"pid {holder.get('pid')} on host {holder.get('host')!s}"
            + (f" ({command[:120]})" if command else "") + (f", since {holder['since']}" if holder.get("since") else ""))


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike[str], *, name: str = "", what: str = "",
                wait_s: float | None = None, shared: bool = False) -> Iterator[Path]:
    """Hold the exclusive lock of ``folder`` (or of its output ``name``) for the ``with`` block.

    ``what`` words the output for the message (default: the folder). Raises :class:`OutputBusy`
    when another process holds it after ``wait_s`` seconds (default :func:`wait_seconds`). The lock
    is held by this process until the block ends. Within one thread the lock is re-entrant: a run
    holding its folder exclusively (``similarity run``) calls the steps, whose own locks are then
    already its own. ``shared`` takes it in shared mode: the steps of one
    pipeline, running in parallel, share their folder and each holds its own output exclusively
    (:func:`step_lock`), while a whole run (``similarity run``) holds the folder exclusively.
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
        yield from _locked(folder, path, what=what, wait_s=wait_s, shared=shared)


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


def _locked(folder: Path, path: Path, *, what: str, wait_s: float | None, shared: bool) -> Iterator[Path]:
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
            os.pwrite(fd, json.dumps(_holder()).encode(), 0)
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
def step_lock(folder: str | os.PathLike[str], unit: str, *, what: str = "", wait_s: float | None = None) -> Iterator[Path]:
    """The lock of one step's output ``unit`` (``embed-shard-0-of-4``, ``index-fill-2``, ...) in the
    run folder ``folder``: the folder in shared mode (so a whole run holding it stops this step, and
    the other steps of one pipeline go on beside it) and the unit exclusively."""
    with output_lock(folder, what=what or str(folder), wait_s=wait_s, shared=True), \
            output_lock(folder, name=unit, what=f"{what or folder} ({unit})", wait_s=wait_s) as path:
        yield path
