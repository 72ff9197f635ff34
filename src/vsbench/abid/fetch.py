"""Fetching ABID's objects one at a time, many at once: a GET with bounded, jittered retries, the
bytes verified against the listing (size, and MD5 where the ETag is one) and written atomically, on
daemon worker threads, under a job-wide circuit breaker that stops every request once the endpoint
stops answering. :mod:`vsbench.abid.download` plans the objects, runs this over them and accounts
for the results.
"""

from __future__ import annotations

import hashlib
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR, S_ISREG

from vsbench.abid.s3_get import connection_failure, describe_error, is_permanent, short_error
from vsbench.io.storage import _env_number, atomic_write_bytes

MAX_CONNECTION_FAILURES = 100  # VSBENCH_S3_MAX_CONNECTION_FAILURES: requests in a row with no answer, job-wide
STALL_TIMEOUT_S = 60.0  # VSBENCH_S3_STALL_TIMEOUT: seconds with requests in flight and no answer at all
VERIFY_BLOCK = 1 << 20  # bytes hashed per read when checking a local copy


@dataclass(frozen=True)
class PlannedObject:
    """One object to have on disk: the chosen source key and where it lands."""

    bin_id: int
    kind: str
    key: str
    size: int
    etag: str
    path: str  # relative to the destination root
    alternate_keys: tuple[str, ...] = ()


@dataclass
class ObjectResult:
    bin_id: int
    kind: str
    key: str
    path: str
    size: int
    status: str  # fetched | skipped | failed | stopped (not tried: the job stopped first)
    attempts: int = 0
    reason: str = ""
    permanent: bool = False  # an answer that retrying cannot change (denied, not found)


def _etag_is_md5(etag: str) -> bool:
    return len(etag) == 32 and "-" not in etag and all(c in "0123456789abcdef" for c in etag.lower())


def verify_bytes(data: bytes, size: int, etag: str) -> str:
    """Return "" when ``data`` matches the listing, else the reason it does not."""
    if len(data) != size:
        return f"size {len(data)} != listed {size}"
    if _etag_is_md5(etag) and hashlib.md5(data, usedforsecurity=False).hexdigest() != etag.lower():
        return "md5 does not match the ETag"
    return ""


def verify_local(path: Path, size: int, etag: str) -> str:
    """Like :func:`verify_bytes` for a file already on disk: "" means complete and intact, "missing"
    that nothing is there, anything else why the local copy cannot be kept (a folder in its place, a
    size or MD5 mismatch, a read error: "unreadable (...)"), so a resumed run can say why it fetched
    the file again. The MD5 is read in blocks: memory stays flat whatever the file's size."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:  # a file where a folder should be (ENOTDIR), a name too long, I/O errors
        return f"unreadable ({os_error_text(exc)})"
    if not S_ISREG(stat.st_mode):
        return "a folder, not a file" if S_ISDIR(stat.st_mode) else "not a regular file"
    if stat.st_size != size:
        return f"size {stat.st_size} != listed {size}"
    if not _etag_is_md5(etag):
        return ""
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with open(path, "rb", buffering=0) as handle:
            while block := handle.read(VERIFY_BLOCK):
                digest.update(block)
    except OSError as exc:
        return f"unreadable ({os_error_text(exc)})"
    return "" if digest.hexdigest() == etag.lower() else "md5 does not match the ETag"


def os_error_text(exc: OSError) -> str:
    """``[Errno 13] Permission denied`` without the path (the key log names the file already)."""
    if exc.errno is not None and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


def max_connection_failures() -> int:
    """Requests in a row, job-wide, that may fail with no answer before the download stops."""
    return int(_env_number("VSBENCH_S3_MAX_CONNECTION_FAILURES", MAX_CONNECTION_FAILURES, "requests", integer=True))


def stall_timeout() -> float:
    """Seconds with requests in flight and no answer before the download stops."""
    return _env_number("VSBENCH_S3_STALL_TIMEOUT", STALL_TIMEOUT_S, "seconds")


class Breaker:
    """Job-wide circuit breaker: trips after ``limit`` requests in a row without an answer, or after
    ``stall`` seconds without any answer while requests are in flight. Any HTTP answer (even a 404, a
    503 or a body failing its MD5) proves the endpoint alive and resets both."""

    def __init__(self, limit: int, stall: float) -> None:
        self.limit, self.stall = limit, stall
        self.stop = threading.Event()
        self.consecutive = 0
        self.last_answer = time.monotonic()
        self.what = ""  # what the endpoint did on the last failure, in words
        self.detail = ""  # the last failure's exception
        self.tripped = ""  # "breaker" or "stall" once tripped
        self.tripped_at = 0  # requests in a row without an answer when it tripped
        self._lock = threading.Lock()

    def answered(self) -> None:
        with self._lock:
            self.consecutive = 0
            self.last_answer = time.monotonic()

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self.consecutive += 1
            self.what, self.detail = what, short_error(exc)
            if self.consecutive >= self.limit and not self.tripped:
                self.tripped, self.tripped_at = "breaker", self.consecutive
                self.stop.set()

    def check_stall(self) -> None:
        with self._lock:
            if not self.tripped and time.monotonic() - self.last_answer >= self.stall:
                self.tripped = "stall"
                self.stop.set()


class Fetcher:
    """Fetch one object with bounded, jittered exponential backoff."""

    def __init__(self, get, dest: Path, retries: int, backoff: float,
                 explain: Callable[[BaseException], str | None] = lambda exc: None,
                 breaker: Breaker | None = None) -> None:
        self.get = get
        self.dest = dest
        self.retries = retries
        self.backoff = backoff
        self.explain = explain
        self.breaker = breaker or Breaker(MAX_CONNECTION_FAILURES, STALL_TIMEOUT_S)
        self.stop = self.breaker.stop  # set by the breaker or by the caller (a signal): no new request starts
        self.causes: list[str] = []  # job-wide causes met (first one kept per kind)
        self._lock = threading.Lock()

    def fatal(self, exc: BaseException) -> bool:
        """Errors that name a job-wide cause although not an HTTP answer (no credentials). An endpoint
        that stops answering part-way is the breaker's to judge (the listing already reached it)."""
        from botocore import exceptions as boto

        return isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError)

    def note_permanent(self, exc: BaseException) -> None:
        cause = self.explain(exc)
        if cause:
            with self._lock:
                if cause not in self.causes:
                    self.causes.append(cause)

    def __call__(self, obj: PlannedObject) -> ObjectResult:
        target = self.dest / obj.path
        reason = ""
        for attempt in range(1, self.retries + 1):
            if self.stop.is_set():
                return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "stopped", attempt - 1, reason)
            try:
                data = self.get(obj.key)
                self.breaker.answered()
                reason = verify_bytes(data, obj.size, obj.etag)
                if not reason:
                    if self.stop.is_set():  # the job has stopped (and may be cleaning up): write nothing more
                        return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "stopped", attempt)
                    try:
                        atomic_write_bytes(target, data)
                    except OSError as exc:  # a folder in the way, a full or read-only disk: not the endpoint's
                        return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "failed", attempt,
                                            f"cannot write {obj.path} under the destination: {os_error_text(exc)}",
                                            permanent=True)
                    return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, len(data), "fetched", attempt)
            except Exception as exc:  # noqa: BLE001 - every failure is retried, then reported
                reason = describe_error(exc)
                what = connection_failure(exc)
                if what:
                    self.breaker.failed(what, exc)
                else:
                    self.breaker.answered()
                if is_permanent(exc):
                    self.note_permanent(exc)
                    return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "failed", attempt, reason,
                                        permanent=True)
                if self.fatal(exc):  # missing credentials: no retry can help
                    self.note_permanent(exc)
                    return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "failed", attempt, reason,
                                        permanent=True)
            if attempt < self.retries:
                self.stop.wait(self.backoff * (2 ** (attempt - 1)) * (0.5 + random.random()))
        return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "failed", self.retries, reason)


def start_workers(fn: Callable[[PlannedObject], ObjectResult], items: list[PlannedObject], workers: int,
                   stop: threading.Event) -> queue.SimpleQueue:
    """Run ``fn`` over ``items`` on ``workers`` daemon threads; each ``(index, result or exception)`` is
    put on the returned queue, and no item is started once ``stop`` is set. The index lets the caller
    keep a byte per item, not a set of paths, for what has an answer. One queue, not a future per item waited
    on together: ``concurrent.futures.wait`` over a million pending futures costs O(n) per call.
    Daemon threads, unlike ThreadPoolExecutor's, do not hold the process at exit: after a stop
    (breaker, SIGTERM) a request still waiting on a silent endpoint must not delay the exit by a read
    timeout. A thread cut short at exit leaves at most a temporary file, which the next run ignores."""
    results: queue.SimpleQueue = queue.SimpleQueue()
    jobs = enumerate(items)
    lock = threading.Lock()

    def work() -> None:
        while not stop.is_set():
            with lock:
                job = next(jobs, None)
            if job is None:
                return
            index, item = job
            try:
                results.put((index, fn(item)))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                results.put((index, exc))

    for _ in range(min(workers, len(items))):
        threading.Thread(target=work, name="abid-download", daemon=True).start()
    return results
