"""The locks of vsbench.io.locks piece by piece, fast enough to run against each mutant (issue 49).

tests/unit/test_digests_locks.py, test_run_lease.py and test_input_locks.py hold their locks from
other processes and wait on them in real time: each costs seconds. Here nothing waits and nothing
is spawned. Another holder is an open file of its own on the lock file (flock excludes open files,
not processes: :class:`Other`), and the module's clock is a stand-in whose time moves only when the
code sleeps (:class:`Clock`), so a wait, its polls and its deadline are counted, not timed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vsbench.io import locks
from vsbench.io.leases import LeaseError
from vsbench.io.locks import (
    LEASE_ENV,
    LEASE_FILE,
    LEASE_TTL_ENV,
    LOCK_FILE,
    READERS,
    WAIT_ENV,
    WRITERS,
    InputBusy,
    OutputBusy,
    claim_lease,
    lock_path,
    output_lock,
    reading_lock,
    release_lease,
    step_lock,
    writing_lock,
)

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}")
NO_PID = 4194305  # above the largest pid_max Linux allows: no process has it
ELSEWHERE = {"host": "elsewhere", "pid": 4242, "command": "vsbench similarity run --out x",
             "since": "2024-05-01T10:00:00+0000"}
GATE_SUFFIX = f"{LOCK_FILE}.{locks.GATE}"
ELSEWHERE_NAMED = "pid 4242 on host elsewhere (vsbench similarity run --out x), since 2024-05-01T10:00:00+0000"


def when(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def named(record: dict[str, Any]) -> str:
    """How a holder of this process is named in a message (written out here, not by _describe)."""
    command = " ".join(sys.argv)[:120]
    return (f"pid {os.getpid()} on host {socket.gethostname()}" + (f" ({command})" if command else "")
            + f", since {record['since']}")


class Clock:
    """``time`` as vsbench.io.locks sees it: monotonic time moves only when the code sleeps, the wall
    clock stands at ``wall``; ``on_sleep(n)`` runs after the n-th sleep (to let a holder go)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.wall = 5000.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] | None = None

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps.append(seconds)
        if len(self.sleeps) > 1000:
            raise AssertionError("waited for ever")
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(locks, "time", fake)
    monkeypatch.delenv(WAIT_ENV, raising=False)
    monkeypatch.delenv(LEASE_ENV, raising=False)
    return fake


@pytest.fixture(autouse=True)
def _signals_only_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.kill as the locks may use it: asking whether a process lives (signal 0), never signalling."""
    real_kill = os.kill

    def asking(pid: int, signal: int) -> None:
        if signal != 0:
            raise AssertionError(f"signal {signal} sent to pid {pid}")
        real_kill(pid, 0)

    monkeypatch.setattr(os, "kill", asking)


class Stderr:
    """sys.stderr for a test: a line counts as said once it is flushed (a pod's log is a pipe)."""

    def __init__(self) -> None:
        self.pending = ""
        self.said = ""

    def write(self, text: str) -> int:
        self.pending += text
        return len(text)

    def flush(self) -> None:
        self.said += self.pending
        self.pending = ""


class _Sys:
    """``sys`` as vsbench.io.locks sees it, with its own stderr (pytest's capture resets the real one's)."""

    def __init__(self, stderr: Stderr) -> None:
        self.stderr = stderr

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> Stderr:
    fake = Stderr()
    monkeypatch.setattr(locks, "sys", _Sys(fake))
    return fake


class Other:
    """Another holder of a lock file, as flock sees one: an open file of its own, locked."""

    def __init__(self, path: Path, mode: int = fcntl.LOCK_EX, record: dict[str, Any] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, mode | fcntl.LOCK_NB)
        if record is not None:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(record).encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@pytest.fixture
def others() -> Iterator[Callable[..., Other]]:
    made: list[Other] = []

    def other(path: Path, mode: int = fcntl.LOCK_EX, record: dict[str, Any] | None = None) -> Other:
        made.append(Other(path, mode, record))
        return made[-1]

    yield other
    for holder in made:
        holder.release()


def locked_elsewhere(path: Path, mode: int = fcntl.LOCK_EX) -> bool:
    """Whether a new open file of ``path`` is refused the lock ``mode``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def record_of(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def fd_of(path: Path, content: bytes, flags: int = os.O_RDWR) -> int:
    path.write_bytes(content)
    return os.open(path, flags)


# --- small parts ------------------------------------------------------------------------------------


def test_lock_paths(tmp_path: Path) -> None:
    assert locks.lock_path(tmp_path) == tmp_path / ".vsbench-lock"
    assert locks.lock_path(str(tmp_path), "embed-0") == tmp_path / ".vsbench-lock.embed-0"


def test_wait_seconds_from_the_argument_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WAIT_ENV, "7")
    assert locks.wait_seconds(2.5) == 2.5 and locks.wait_seconds(-3) == 0.0 and locks.wait_seconds(0) == 0.0
    assert locks.wait_seconds() == 7.0
    for raw, seconds in (("1.5", 1.5), (" 0 ", 0.0), ("0.25", 0.25), ("", 0.0), ("  ", 0.0)):
        monkeypatch.setenv(WAIT_ENV, raw)
        assert locks.wait_seconds() == seconds, raw
    monkeypatch.delenv(WAIT_ENV)
    assert locks.wait_seconds() == 0.0
    for raw, said in (("soon", "'soon' is not a number of seconds"), ("-1", "'-1' must be 0 or more seconds"),
                      ("nan", "'nan' must be 0 or more seconds"),
                      ("x" * 150, f"'{'x' * 100}' is not a number"), ("-" + "1" * 150, f"'-{'1' * 99}' must be 0")):
        monkeypatch.setenv(WAIT_ENV, raw)
        with pytest.raises(ValueError) as caught:
            locks.wait_seconds()
        assert str(caught.value).startswith(f"{WAIT_ENV}={said}"), (raw, str(caught.value))


def test_the_lease_lifetime_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEASE_TTL_ENV, raising=False)
    assert locks.lease_ttl() == 3600.0
    # a week exactly is allowed (make mutate's leases survivor: `<= MAX_LEASE_S` -> `<`; seen failing planted)
    for raw, seconds in (("10", 10.0), (" 0.5 ", 0.5), ("", 3600.0), ("604800", 604800.0)):
        monkeypatch.setenv(LEASE_TTL_ENV, raw)
        assert locks.lease_ttl() == seconds
    for raw, said in (("x", "'x' is not a number of seconds"),
                      ("0", "'0' must be more than 0 and at most 604800 seconds (a week)"),
                      ("-2", "'-2' must be more than 0"), ("inf", "'inf' must be more than 0 and at most"),
                      ("nan", "'nan' must be"), ("604801", "'604801' must be"), ("y" * 150, f"'{'y' * 100}' is not"),
                      ("-" + "2" * 150, f"'-{'2' * 99}' must be more")):
        monkeypatch.setenv(LEASE_TTL_ENV, raw)
        with pytest.raises(ValueError) as caught:
            locks.lease_ttl()
        assert str(caught.value).startswith(f"{LEASE_TTL_ENV}={said}"), (raw, str(caught.value))


def test_the_holder_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["vsbench", "c" * 400])
    record = locks._holder()
    assert list(record) == ["host", "pid", "command", "since"]
    assert record["host"] == socket.gethostname() and record["pid"] == os.getpid()
    assert record["command"] == ("vsbench " + "c" * 400)[:300] and len(record["command"]) == 300
    assert STAMP.fullmatch(record["since"]), record["since"]
    leased = locks._holder("token-1")
    assert list(leased) == [*record, "lease"] and leased["lease"] == "token-1" and leased["pid"] == os.getpid()


def test_a_record_is_read_from_the_start_of_the_file(tmp_path: Path) -> None:
    fd = fd_of(tmp_path / "a", b'{"pid": 5, "host": "h\xff"}')
    os.lseek(fd, 0, os.SEEK_END)
    assert locks._read_holder(fd) == {"pid": 5, "host": "h\ufffd"}
    for content in (b"", b"not json", b"[1, 2]", b'"text"'):
        other = fd_of(tmp_path / "b", content)
        assert locks._read_holder(other) == {}, content
        os.close(other)
    os.close(fd)
    assert locks._read_holder(fd) == {}  # closed: unreadable, no record


@pytest.mark.parametrize(("holder", "said"), [
    ({}, "another process (which has not written its name yet)"),
    ({"pid": 0, "host": "h"}, "another process (which has not written its name yet)"),
    ({"pid": 7, "released": "x", "host": "h"}, "another vsbench process, which has not written its name"),
    ({"pid": 7, "host": "h", "command": "cmd", "since": "S"}, "pid 7 on host h (cmd), since S"),
    ({"pid": 7, "host": "h"}, "pid 7 on host h"),
    ({"pid": 7, "host": "h", "command": "c" * 200}, f"pid 7 on host h ({'c' * 120})"),
    ({"pid": 7, "host": "h", "shared": True, "lease": "t"}, "a pipeline step (others may share it): pid 7 on host h"),
    ({"pid": 7, "host": "h", "lease": "t", "since": "S"}, "a pipeline run (for all its steps): pid 7 on host h, since S"),
])
def test_a_holder_is_named_in_words(holder: dict[str, Any], said: str) -> None:
    assert locks._describe(holder) == said


def test_a_step_is_admitted_by_its_runs_token_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def admitted(record: dict[str, Any], token: str | None) -> bool:
        if token is None:
            monkeypatch.delenv(LEASE_ENV, raising=False)
        else:
            monkeypatch.setenv(LEASE_ENV, token)
        fd = fd_of(tmp_path / "record", json.dumps(record).encode())
        try:
            return locks._admitted(fd)
        finally:
            os.close(fd)

    run = {**ELSEWHERE, "lease": "tok"}
    assert admitted(run, "tok")
    assert not admitted(run, "another")
    assert not admitted({**run, "released": "2024"}, "tok")
    assert not admitted(ELSEWHERE, "tok") and not admitted(ELSEWHERE, "") and not admitted(run, None)
    assert not admitted({**ELSEWHERE, "lease": ""}, "")


def test_the_leased_folders_of_a_pipeline() -> None:
    assert locks.leased_folders(None) == [] and locks.leased_folders("  ") == []  # type: ignore[arg-type]
    assert locks.leased_folders(" /data/x ") == ["/data/x"]
    assert locks.leased_folders(' ["/a", "/b"] ') == ["/a", "/b"]
    assert locks.leased_folders('{"a": 1}') == ['{"a": 1}']  # not a list: one folder of that name
    for text in ('["/a", ""]', "[1]", '[1, ""]', '["/a", 2]'):
        with pytest.raises(ValueError, match="must be a folder or a JSON list of folders"):
            locks.leased_folders(text)
    with pytest.raises(ValueError) as caught:
        locks.leased_folders("[" + "9" * 300 + ", 1]")
    assert str(caught.value) == f"lease folders {('[' + '9' * 199)!r} must be a folder or a JSON list of folders"


def test_times_are_local_and_to_the_second() -> None:
    seconds = 86400.0 * (365 + 180)  # mid 1971, whatever the time zone
    assert locks._when(seconds) == when(seconds) and STAMP.fullmatch(when(seconds)) and when(seconds).startswith("1971-")


# --- output_lock: the one-writer lock ---------------------------------------------------------------


def test_a_lock_writes_its_holder_and_marks_it_released(tmp_path: Path, clock: Clock,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "a" / "out"
    with umask(0o022), caplog.at_level(logging.DEBUG, logger="vsbench.io.locks"), \
            output_lock(out, lease="tok") as path:
        assert path == out / LOCK_FILE and locked_elsewhere(path, fcntl.LOCK_SH)
        assert path.stat().st_mode & 0o777 == 0o644
        record = record_of(path)
        assert list(record) == ["host", "pid", "command", "since", "lease"] and record["lease"] == "tok"
        assert record["pid"] == os.getpid() and STAMP.fullmatch(record["since"])
    assert not locked_elsewhere(path)
    done = record_of(path)
    assert list(done) == ["host", "pid", "command", "since", "released"] and done["pid"] == os.getpid()
    assert STAMP.fullmatch(done["released"]) and clock.sleeps == []
    assert "taking over" not in caplog.text  # a fresh file: nobody's record
    with caplog.at_level(logging.DEBUG, logger="vsbench.io.locks"), output_lock(out) as path:
        assert "lease" not in record_of(path)
    assert "taking over" not in caplog.text  # a released record: taken without a word


def test_a_record_left_by_a_dead_holder_is_taken_over_in_one_debug_line(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    lock_path(tmp_path).write_text(json.dumps(ELSEWHERE) + " " * 500)
    with caplog.at_level(logging.DEBUG, logger="vsbench.io.locks"), output_lock(tmp_path) as path:
        assert record_of(path)["pid"] == os.getpid()
    said = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    assert said == [f"{path}: taking over the lock record of {ELSEWHERE_NAMED}, which no longer holds it"]


def test_a_lock_held_on_file_descriptor_0_is_let_go_too(tmp_path: Path) -> None:
    """A process started with its stdin closed gets descriptor 0 for its lock file."""
    try:
        stdin = os.dup(0)
    except OSError:
        stdin = -1
    else:
        os.close(0)
    try:
        with output_lock(tmp_path) as path:
            assert os.fstat(0).st_ino == path.stat().st_ino and locked_elsewhere(path)
        assert not locked_elsewhere(path)
    finally:
        if stdin >= 0:
            os.dup2(stdin, 0)
            os.close(stdin)


def test_a_busy_output_is_refused_at_once_in_one_line(tmp_path: Path, clock: Clock, stderr: Stderr,
                                                      others: Callable[..., Other]) -> None:
    out = tmp_path / "out"
    others(lock_path(out), record=ELSEWHERE)
    tail = (f"is being written by another vsbench run: {ELSEWHERE_NAMED}. Wait for it to finish (or set "
            f"{WAIT_ENV} to wait), or choose another output folder; the lock is {lock_path(out)}")
    with pytest.raises(OutputBusy) as caught, output_lock(out):
        pytest.fail("a second writer got in")
    assert str(caught.value) == f"{out} {tail}"
    with pytest.raises(OutputBusy) as caught, output_lock(str(out), what="the features"):
        pytest.fail("a second writer got in")
    assert str(caught.value) == f"the features {tail}"
    assert clock.sleeps == [] and stderr.said == stderr.pending == ""


def test_a_waiting_run_says_so_once_and_goes_on_when_the_holder_lets_go(
        tmp_path: Path, clock: Clock, stderr: Stderr, others: Callable[..., Other]) -> None:
    out = tmp_path / "out"
    holder = others(lock_path(out), record=ELSEWHERE)
    clock.on_sleep = lambda n: holder.release() if n == 3 else None
    with output_lock(out, wait_s=10) as path:
        assert record_of(path)["pid"] == os.getpid() and locked_elsewhere(path)
    assert clock.sleeps == [0.5, 0.5, 0.5]
    assert stderr.said == f"[vsbench] waiting for {out}: held by {ELSEWHERE_NAMED}\n" and stderr.pending == ""


def test_a_waiting_run_stops_at_its_deadline(tmp_path: Path, clock: Clock, stderr: Stderr,
                                             others: Callable[..., Other], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    others(lock_path(out), record=ELSEWHERE)
    with pytest.raises(OutputBusy, match="is being written by another vsbench run"), \
            output_lock(out, what="the index", wait_s=1.0):
        pytest.fail("got in")
    assert clock.sleeps == [0.5, 0.5]
    assert stderr.said == f"[vsbench] waiting for the index: held by {ELSEWHERE_NAMED}\n"
    monkeypatch.setenv(WAIT_ENV, "1.5")  # no argument: the environment's
    with pytest.raises(OutputBusy), output_lock(out):
        pytest.fail("got in")
    assert clock.sleeps == [0.5] * 5


def test_a_lock_file_removed_by_its_holder_is_made_and_locked_anew(tmp_path: Path, clock: Clock,
                                                                   others: Callable[..., Other]) -> None:
    for out, remove in ((tmp_path / "one", [lambda p: p.unlink()]),
                        (tmp_path / "two" / "out", [lambda p: p.unlink(), lambda p: p.parent.rmdir(),
                                                    lambda p: p.parent.parent.rmdir()])):
        holder = others(lock_path(out), record=ELSEWHERE)

        def let_go(n: int, holder: Other = holder, remove: list = remove, out: Path = out) -> None:
            if n == 1:
                for step in remove:
                    step(lock_path(out))
                holder.release()

        clock.on_sleep = let_go
        with umask(0o022), output_lock(out, wait_s=10) as path:
            assert path.exists() and record_of(path)["pid"] == os.getpid()
            assert locked_elsewhere(path)  # the new file is the one locked
            assert path.stat().st_mode & 0o777 == 0o644
        assert clock.sleeps == [0.5]
        clock.sleeps.clear()


def test_a_folder_replaced_by_a_file_while_waiting_is_an_error(tmp_path: Path, clock: Clock,
                                                               others: Callable[..., Other]) -> None:
    out = tmp_path / "out"
    holder = others(lock_path(out), record=ELSEWHERE)

    def replace(n: int) -> None:
        lock_path(out).unlink()
        out.rmdir()
        out.write_text("a file now")
        holder.release()

    clock.on_sleep = replace
    with pytest.raises(FileExistsError), output_lock(out, wait_s=10):
        pytest.fail("locked a folder that is a file")
    os.fstat(1)  # nothing of this process was closed on the way out


def test_steps_share_the_folder_and_a_whole_run_excludes_them(tmp_path: Path, clock: Clock,
                                                              others: Callable[..., Other]) -> None:
    out = tmp_path / "out"
    others(lock_path(out), fcntl.LOCK_SH, record={**ELSEWHERE, "shared": True})
    with step_lock(out, "embed-0") as unit:
        assert unit == lock_path(out, "embed-0") and locked_elsewhere(unit, fcntl.LOCK_SH)
        record = record_of(lock_path(out))
        assert list(record) == ["host", "pid", "command", "since", "shared"]
        assert record["shared"] is True and record["pid"] == os.getpid()
        assert "shared" not in record_of(unit)
    assert record_of(lock_path(out))["shared"] is True  # a shared record is never marked released
    with pytest.raises(OutputBusy) as caught, output_lock(out):
        pytest.fail("a whole run got in beside a step")
    assert "a pipeline step (others may share it): pid " in str(caught.value)


def test_a_step_is_refused_while_a_whole_run_holds_the_folder(tmp_path: Path, clock: Clock,
                                                              others: Callable[..., Other]) -> None:
    out = tmp_path / "out"
    others(lock_path(out), record=ELSEWHERE)
    with pytest.raises(OutputBusy, match=re.escape(ELSEWHERE_NAMED)), step_lock(out, "score"):
        pytest.fail("a step got in beside a whole run")


def test_a_filesystem_without_locks_warns_and_writes_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING, logger="vsbench.io.locks"), output_lock(tmp_path) as path:
        assert path.read_text() == ""
    assert path.read_text() == ""
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: this filesystem cannot lock files (No locks available); going on without the one-writer lock"]


def _refuse_open(monkeypatch: pytest.MonkeyPatch, suffix: str, *, read_only_too: bool = False) -> list[int]:
    """os.open as another user's lock file ending in ``suffix`` meets it; returns the flags asked for."""
    real_open = os.open
    asked: list[int] = []

    def refusing(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith(suffix):
            asked.append(flags)
            if flags & (os.O_RDWR | os.O_WRONLY) or read_only_too:
                raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(locks.os, "open", refusing)
    return asked


def test_a_lock_file_this_user_cannot_write_locks_and_keeps_its_record(tmp_path: Path, clock: Clock,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        others: Callable[..., Other]) -> None:
    out = tmp_path / "out"
    holder = others(lock_path(out), record=ELSEWHERE)
    asked = _refuse_open(monkeypatch, LOCK_FILE)
    with pytest.raises(OutputBusy, match=re.escape(ELSEWHERE_NAMED)), output_lock(out):
        pytest.fail("got in")
    assert asked == [os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, os.O_RDONLY | os.O_CLOEXEC]
    holder.release()
    with output_lock(out) as path:  # locked, the record left as it is (it cannot be written)
        assert locked_elsewhere(path) and record_of(path) == ELSEWHERE
    with step_lock(out, "embed-0"):
        assert locked_elsewhere(lock_path(out), fcntl.LOCK_EX) and not locked_elsewhere(lock_path(out), fcntl.LOCK_SH)
    assert record_of(lock_path(out)) == ELSEWHERE


def test_a_lock_file_that_cannot_be_opened_is_one_warning_and_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    _refuse_open(monkeypatch, LOCK_FILE, read_only_too=True)
    with caplog.at_level(logging.WARNING, logger="vsbench.io.locks"), output_lock(tmp_path) as path:
        assert path == lock_path(tmp_path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: cannot open the lock file (Permission denied); going on without the one-writer lock"]


# --- a pipeline run's lease (run_lease): its own steps are admitted ------------------------------------


def test_a_step_of_the_holding_run_is_admitted_and_its_steps_exclude_each_other(
        tmp_path: Path, clock: Clock, stderr: Stderr, others: Callable[..., Other],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    run = {**ELSEWHERE, "lease": "tok"}
    others(lock_path(out), record=run)
    monkeypatch.setenv(LEASE_ENV, "tok")
    unit = lock_path(out, locks.RUN_UNIT)
    with output_lock(out) as path:
        assert path == unit and locked_elsewhere(unit, fcntl.LOCK_SH)
        assert list(record_of(unit)) == ["host", "pid", "command", "since"] and record_of(unit)["pid"] == os.getpid()
    os.fstat(1)
    assert record_of(lock_path(out)) == run and "released" in record_of(unit)  # the run's record untouched
    # A step writing the whole folder excludes the run's other steps, which share the run's unit.
    step = others(unit, fcntl.LOCK_SH, record={**ELSEWHERE, "shared": True})
    tail = (f"is being written by another vsbench run: a pipeline step (others may share it): {ELSEWHERE_NAMED}. "
            f"Wait for it to finish (or set {WAIT_ENV} to wait), or choose another output folder; the lock is {unit}")
    with pytest.raises(OutputBusy) as caught, output_lock(out):
        pytest.fail("got in beside the run's other step")
    assert str(caught.value) == f"{out} {tail}"
    with pytest.raises(OutputBusy) as caught, output_lock(out, what="the features"):
        pytest.fail("got in beside the run's other step")
    assert str(caught.value) == f"the features {tail}" and clock.sleeps == []
    # A wait is the step's whole wait, its folder's poll included.
    clock.on_sleep = lambda n: step.release()
    with output_lock(out, wait_s=10):
        pass
    assert clock.sleeps == [0.5]
    assert stderr.said == (f"[vsbench] waiting for {out}: held by a pipeline step (others may share it): "
                           f"{ELSEWHERE_NAMED}\n")
    # Steps side by side share the run's unit.
    others(unit, fcntl.LOCK_SH, record={**ELSEWHERE, "shared": True})
    with step_lock(out, "embed-1", what="the features"):
        assert locked_elsewhere(unit, fcntl.LOCK_EX) and not locked_elsewhere(unit, fcntl.LOCK_SH)


@pytest.mark.parametrize("token", ["", "another", "released"])
def test_any_other_process_is_refused_by_a_run(tmp_path: Path, clock: Clock, others: Callable[..., Other],
                                               monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    out = tmp_path / "out"
    run = {**ELSEWHERE, "lease": "tok", **({"released": "2024"} if token == "released" else {})}
    others(lock_path(out), record=run)
    monkeypatch.setenv(LEASE_ENV, "tok" if token == "released" else token)
    with pytest.raises(OutputBusy) as caught, output_lock(out):
        pytest.fail("admitted")
    assert ("a pipeline run (for all its steps): " if token != "released" else "another vsbench process") \
        in str(caught.value)
    assert not unit_exists(out)


def unit_exists(out: Path) -> bool:
    return lock_path(out, locks.RUN_UNIT).exists()


def test_a_named_output_is_never_admitted_by_a_token(tmp_path: Path, clock: Clock, others: Callable[..., Other],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    others(lock_path(out, "lease"), record={**ELSEWHERE, "lease": "tok"})
    monkeypatch.setenv(LEASE_ENV, "tok")
    with pytest.raises(OutputBusy), output_lock(out, name="lease"):
        pytest.fail("admitted into a named output")
    assert not unit_exists(out)


# --- readers and writers of an input folder ----------------------------------------------------------


def test_opening_a_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lock"
    assert locks._open_lock_file(path, False) == -1 and not path.exists()
    with umask(0o022):
        fd = locks._open_lock_file(path, True)
    assert path.stat().st_mode & 0o777 == 0o644
    assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    os.pwrite(fd, b"xy", 0)
    assert os.pread(fd, 2, 0) == b"xy"
    os.close(fd)
    fd = locks._open_lock_file(path, False)
    os.pwrite(fd, b"z", 0)
    assert os.pread(fd, 2, 0) == b"zy" and fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    os.close(fd)
    asked = _refuse_open(monkeypatch, "lock")
    for create in (False, True):  # another user's file: read-only (flock needs no more)
        fd = locks._open_lock_file(path, create)
        assert fd >= 0 and os.pread(fd, 2, 0) == b"zy" and fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        os.close(fd)
    assert asked[1] == asked[3] == os.O_RDONLY | os.O_CLOEXEC
    monkeypatch.undo()
    _refuse_open(monkeypatch, "lock", read_only_too=True)
    assert locks._open_lock_file(path, True) == -1 and locks._open_lock_file(path, False) == -1


def test_holder_lines_are_the_json_objects_of_the_file(tmp_path: Path) -> None:
    fd = fd_of(tmp_path / "readers", b'{"pid": 1}\n[2]\nnot json\n{"host": "h\xff"}\n\n{"pid": 3}\n')
    assert locks._holder_lines(fd) == [{"pid": 1}, {"host": "h\ufffd"}, {"pid": 3}]
    os.close(fd)
    assert locks._holder_lines(fd) == []


def test_a_holder_is_alive_unless_its_process_on_this_host_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    here = socket.gethostname()
    real_kill, sent = os.kill, []

    def probing(pid: int, signal: int) -> None:  # os.kill, that only ever asks (a signal would be a bug)
        sent.append((pid, signal))
        real_kill(pid, 0)

    monkeypatch.setattr(os, "kill", probing)
    assert locks._alive({"host": here, "pid": os.getpid()})
    assert not locks._alive({"host": here, "pid": NO_PID})
    assert sent == [(os.getpid(), 0), (NO_PID, 0)]
    assert locks._alive({"host": "elsewhere", "pid": NO_PID})  # another host's: cannot be told
    assert locks._alive({"host": here, "pid": str(NO_PID)}) and locks._alive({"host": here})
    assert len(sent) == 2

    def not_mine(pid: int, signal: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", not_mine)
    assert locks._alive({"host": here, "pid": NO_PID})  # someone else's process: alive


def test_the_holders_of_a_kind_are_named_the_first_and_a_count(tmp_path: Path) -> None:
    here = socket.gethostname()
    dead = {"host": here, "pid": NO_PID, "since": "S0"}
    first = {"host": here, "pid": os.getpid(), "command": "one", "since": "S1"}
    second = {"host": "elsewhere", "pid": 7, "command": "two"}

    def described(*records: dict[str, Any]) -> str:
        fd = fd_of(tmp_path / "holders", "".join(json.dumps(r) + "\n" for r in records).encode())
        try:
            return locks._describe_holders(fd)
        finally:
            os.close(fd)

    assert described(dead, first) == f"pid {os.getpid()} on host {here} (one), since S1"
    assert described(dead, first, second) == f"pid {os.getpid()} on host {here} (one), since S1, and 1 more"
    assert described(first, second, second) == f"pid {os.getpid()} on host {here} (one), since S1, and 2 more"
    assert described(dead) == described() == "another process (which has not written its name)"


def test_flock_says_whether_it_got_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    path.write_text("")
    one, two = os.open(path, os.O_RDONLY), os.open(path, os.O_RDONLY)
    try:
        assert locks._flock(one, fcntl.LOCK_EX | fcntl.LOCK_NB) is True
        assert locks._flock(two, fcntl.LOCK_SH | fcntl.LOCK_NB) is False
    finally:
        os.close(one)
        os.close(two)
    with pytest.raises(OSError) as caught:
        locks._flock(one, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert caught.value.errno == errno.EBADF


def test_rewrite_replaces_the_lines(tmp_path: Path) -> None:
    fd = fd_of(tmp_path / "readers", b"x" * 100)
    locks._rewrite(fd, [{"a": 1}, {"b": 2}])
    assert (tmp_path / "readers").read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    locks._rewrite(fd, [])
    assert (tmp_path / "readers").read_bytes() == b""
    os.close(fd)
    read_only = os.open(tmp_path / "readers", os.O_RDONLY)
    locks._rewrite(read_only, [{"a": 1}])  # another user's file: the lines are not kept, no error
    os.close(read_only)
    assert (tmp_path / "readers").read_bytes() == b""


def test_readers_share_a_folder_each_with_a_line_of_its_own(tmp_path: Path, clock: Clock) -> None:
    readers = lock_path(tmp_path, READERS)
    readers.write_text(json.dumps({"host": socket.gethostname(), "pid": NO_PID}) + "\n")  # a dead reader's
    with reading_lock(tmp_path) as one:
        assert one is True and [r["pid"] for r in lines_of(readers)] == [os.getpid()]
        with reading_lock(str(tmp_path)) as two:
            assert two is True
            mine = lines_of(readers)
            assert [r["pid"] for r in mine] == [os.getpid()] * 2 and mine[0]["token"] != mine[1]["token"]
            assert set(mine[0]) == {"host", "pid", "command", "since", "token"}
        assert lines_of(readers) == mine[:1]
    assert readers.read_text() == "" and not lock_path(tmp_path, WRITERS).exists()
    with writing_lock(tmp_path) as one, writing_lock(tmp_path) as two:
        assert one is two is True and len(lines_of(lock_path(tmp_path, WRITERS))) == 2
    with reading_lock(tmp_path) as again:  # the writers' file is there, free
        assert again is True
    assert clock.sleeps == []


def test_a_writer_is_refused_while_a_training_reads(tmp_path: Path, clock: Clock, stderr: Stderr) -> None:
    with reading_lock(tmp_path):
        reader = lines_of(lock_path(tmp_path, READERS))[0]
        for what in ("", "the images"):
            with pytest.raises(InputBusy) as refused, writing_lock(tmp_path, what=what):
                pytest.fail("a writer got in beside a reader")
            assert str(refused.value) == (
                f"{what or tmp_path} is being read by a training: {named(reader)}. Wait for the training to finish "
                f"(or set {WAIT_ENV} to wait), or write into another folder; the lock is {lock_path(tmp_path, READERS)}")
    assert clock.sleeps == [] and stderr.said == ""
    with writing_lock(tmp_path) as locked:  # the reader gone: the folder is free
        assert locked is True


def test_a_training_is_refused_while_a_folder_is_rewritten(tmp_path: Path, clock: Clock) -> None:
    with writing_lock(tmp_path), writing_lock(tmp_path):
        writer = lines_of(lock_path(tmp_path, WRITERS))[0]
        with pytest.raises(InputBusy) as refused, reading_lock(tmp_path, what="the tasks"):
            pytest.fail("a reader got in beside a writer")
    assert str(refused.value) == (
        f"the tasks is being rewritten (abid resize or abid prepare) by {named(writer)}, and 1 more: a training must "
        f"not read it while it changes. Wait for it to finish (or set {WAIT_ENV} to wait), then train again; the lock "
        f"is {lock_path(tmp_path, WRITERS)}")


@pytest.mark.parametrize("kind", [READERS, WRITERS])
def test_a_waiting_holder_says_so_once_and_joins_when_the_other_kind_leaves(
        tmp_path: Path, clock: Clock, stderr: Stderr, kind: str) -> None:
    first, then = (writing_lock, reading_lock) if kind == READERS else (reading_lock, writing_lock)
    held = contextlib.ExitStack()
    held.enter_context(first(tmp_path))
    holder = lines_of(lock_path(tmp_path, WRITERS if kind == READERS else READERS))[0]
    clock.on_sleep = lambda n: held.close() if n == 2 else None
    with then(tmp_path, wait_s=10) as locked:
        assert locked is True
    assert clock.sleeps == [0.5, 0.5]
    doing = "writing it (abid resize or abid prepare)" if kind == READERS else "reading it (a training)"
    assert stderr.said == f"[vsbench] waiting for {tmp_path}: {named(holder)} is {doing}\n" and stderr.pending == ""


def test_a_waiting_holder_stops_at_its_deadline(tmp_path: Path, clock: Clock, stderr: Stderr) -> None:
    with reading_lock(tmp_path), pytest.raises(InputBusy), writing_lock(tmp_path, what="the images", wait_s=1):
        pytest.fail("got in")
    assert clock.sleeps == [0.5, 0.5] and stderr.said.startswith("[vsbench] waiting for the images: pid ")


def test_a_holders_file_this_user_cannot_write_still_locks(tmp_path: Path, clock: Clock,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    readers = lock_path(tmp_path, READERS)
    readers.write_text(json.dumps({"pid": NO_PID}) + "\n")
    _refuse_open(monkeypatch, READERS)
    with reading_lock(tmp_path) as locked:
        assert locked is True and locked_elsewhere(readers, fcntl.LOCK_EX)
        with pytest.raises(InputBusy), writing_lock(tmp_path):
            pytest.fail("got in")
    assert lines_of(readers) == [{"pid": NO_PID}]  # unwritable: left as it was


def test_a_folder_without_lock_files_is_used_without_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with reading_lock(tmp_path / "missing") as locked:
        assert locked is False
    _refuse_open(monkeypatch, GATE_SUFFIX, read_only_too=True)
    with reading_lock(tmp_path) as locked:
        assert locked is False
    with writing_lock(tmp_path) as locked:
        assert locked is False



# --- a cluster run's lease file ---------------------------------------------------------------------


def test_a_claim_writes_the_lease_and_a_renewal_keeps_its_start(tmp_path: Path, clock: Clock,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEASE_TTL_ENV, "100")
    out = tmp_path / "out"
    assert claim_lease(out, "") == "none" and not out.exists()
    assert claim_lease(str(out), "run-a", now=1000.0) == "claimed"
    lease = {"run": "run-a", "expires": 1100.0, "renewed": when(1000.0), "since": when(1000.0),
             "host": socket.gethostname(), "taken_over": []}
    assert json.loads((out / LEASE_FILE).read_text()) == lease
    assert sorted(p.name for p in out.iterdir()) == [LEASE_FILE, ".vsbench-lock.lease"]
    assert claim_lease(out, "run-a", now=1050.0) == "renewed"
    assert json.loads((out / LEASE_FILE).read_text()) == {**lease, "expires": 1150.0, "renewed": when(1050.0)}
    assert claim_lease(out, "run-a") == "renewed"  # no time given: the clock's
    assert json.loads((out / LEASE_FILE).read_text())["expires"] == 5100.0
    assert release_lease(out, "run-a") is True
    assert json.loads((out / LEASE_FILE).read_text()) == {**lease, "expires": 5100.0, "renewed": when(5000.0),
                                                          "released": when(5000.0)}
    assert sorted(p.name for p in out.iterdir()) == [LEASE_FILE, ".vsbench-lock.lease"]
    assert release_lease(out, "run-a") is False  # released already
    assert claim_lease(out, "run-a", now=6000.0) == "claimed"  # released: a new start
    assert json.loads((out / LEASE_FILE).read_text())["since"] == when(6000.0)
    assert release_lease(out, "run-a") is True
    assert claim_lease(out, "run-b", now=6001.0) == "claimed"  # released: free for the next run, nothing taken over
    assert json.loads((out / LEASE_FILE).read_text())["taken_over"] == []
    assert clock.sleeps == []


def test_a_live_lease_of_another_run_refuses_until_it_expires(tmp_path: Path, clock: Clock, stderr: Stderr,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(LEASE_TTL_ENV, "100")
    out = tmp_path / "out"
    claim_lease(out, "run-a", now=1000.0)
    with pytest.raises(OutputBusy) as caught:
        claim_lease(out, "run-b", now=1099.5)
    assert str(caught.value) == (
        f"{out} is leased by pipeline run run-a until {when(1100.0)} (renewed by its steps): wait for it to finish, "
        f"or choose another output folder; if that run is dead, remove {out / LEASE_FILE}")
    assert release_lease(out, "run-b") is False and "released" not in json.loads((out / LEASE_FILE).read_text())
    with caplog.at_level(logging.WARNING, logger="vsbench.io.locks"):
        assert claim_lease(out, "run-b", now=1100.0) == "taken over"  # expired at the very second
    assert [r.getMessage() for r in caplog.records] == [
        f"{out}: taking over the lease of pipeline run run-a, which expired at {when(1100.0)} unrenewed (killed "
        "without its exit handler?)"]
    assert stderr.said == f"[vsbench] warning: {out}: taking over the expired lease of pipeline run run-a\n"
    lease = json.loads((out / LEASE_FILE).read_text())
    assert lease["run"] == "run-b" and lease["taken_over"] == ["run-a"] and lease["since"] == when(1100.0)
    with pytest.raises(OutputBusy) as caught:
        claim_lease(out, "run-a", now=1101.0)
    assert str(caught.value) == (f"{out}: the lease of run run-a expired and was taken over by run run-b, whose "
                                 "outputs it may now hold: run this pipeline again (a new run)")
    assert claim_lease(out, "run-b", now=1102.0) == "renewed"


def test_a_lease_file_without_a_run_or_an_end_is_refused(tmp_path: Path, clock: Clock) -> None:
    """A lease vsbench writes always names its run and its end; one without either was written by
    hand, and is refused rather than taken over (issue 54; it was taken over before)."""
    (tmp_path / LEASE_FILE).write_text(json.dumps({"run": "run-a"}))
    with pytest.raises(LeaseError, match=r"expires: Field required.*remove it.*wait until pipeline run 'run-a'"):
        claim_lease(tmp_path, "run-b", now=0.5)
    (tmp_path / LEASE_FILE).write_text(json.dumps({"taken_over": ["run-c"], "expires": 1.0}))
    with pytest.raises(LeaseError, match=r"run: Field required"):
        claim_lease(tmp_path, "run-c", now=1.0)


def test_a_lease_remembers_the_last_twenty_runs_it_was_taken_from(tmp_path: Path, clock: Clock,
                                                                   stderr: Stderr) -> None:
    taken = [f"run-{i}" for i in range(25)]
    (tmp_path / LEASE_FILE).write_text(json.dumps({"run": "old", "expires": 10.0, "taken_over": taken}))
    assert claim_lease(tmp_path, "new", now=20.0) == "taken over"
    assert json.loads((tmp_path / LEASE_FILE).read_text())["taken_over"] == [*taken[-19:], "old"]


def test_under_a_local_run_a_lease_is_only_checked(tmp_path: Path, clock: Clock,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    claim_lease(tmp_path, "cluster-run", now=1000.0)
    before = (tmp_path / LEASE_FILE).read_text()
    monkeypatch.setenv(LEASE_ENV, "a-local-run")
    assert claim_lease(tmp_path, "cluster-run", now=1001.0) == "checked"
    assert release_lease(tmp_path, "cluster-run") is False
    assert (tmp_path / LEASE_FILE).read_text() == before
    assert claim_lease(tmp_path / "new", "local-kfp-id") == "checked" and not (tmp_path / "new" / LEASE_FILE).exists()


def test_release_needs_a_run_and_a_lease_file(tmp_path: Path, clock: Clock) -> None:
    assert release_lease(tmp_path / "nowhere", "run-a") is False and not (tmp_path / "nowhere").exists()
    claim_lease(tmp_path, "run-a", now=1000.0)
    assert release_lease(tmp_path, "") is False
    assert "released" not in json.loads((tmp_path / LEASE_FILE).read_text())


@pytest.mark.parametrize("step", ["claim", "release"])
def test_a_busy_lease_lock_is_waited_for_half_a_minute(tmp_path: Path, clock: Clock, step: str,
                                                       others: Callable[..., Other]) -> None:
    out = tmp_path / "out"
    claim_lease(out, "run-a", now=1000.0)
    others(lock_path(out), record=ELSEWHERE)  # the folder's own lock is not the lease's
    others(lock_path(out, "lease"), record=ELSEWHERE)
    with pytest.raises(OutputBusy) as caught:
        if step == "claim":
            claim_lease(out, "run-a", now=1001.0)
        else:
            release_lease(out, "run-a")
    assert str(caught.value).startswith(f"{out} (its run lease) is being written by another vsbench run: pid 4242")
    assert clock.sleeps == [0.5] * 60
