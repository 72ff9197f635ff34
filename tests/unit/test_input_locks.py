"""Readers and writers of an input folder (issue 46): trainings read a folder side by side, resize
and prepare write it side by side, and the two kinds never hold it together.

Every test holds the lock from another process: flock excludes open files, so a lock held in this
process would prove nothing about another one.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vsbench.io import locks
from vsbench.io.locks import InputBusy, lock_path, reading_lock, writing_lock

ROOT = Path(__file__).resolve().parents[2]

HOLD = """
import sys
from vsbench.io.locks import reading_lock, writing_lock
lock = reading_lock if sys.argv[1] == "read" else writing_lock
with lock(sys.argv[2]) as locked:
    print("held" if locked else "unlocked", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


class Holder:
    """A process holding ``folder`` as a reader or a writer until :meth:`release`."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLD, kind, str(folder)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                        env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line == "held", line
        self.pid = self.process.pid

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0

    def __enter__(self) -> Holder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.release()


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(locks.WAIT_ENV, raising=False)


def test_readers_share_a_folder(tmp_path: Path) -> None:
    with Holder("read", tmp_path), Holder("read", tmp_path), reading_lock(tmp_path) as locked:
        assert locked


def test_writers_share_a_folder(tmp_path: Path) -> None:
    """A sharded resize's tasks write one folder side by side (each holds its own shard's lock too)."""
    with Holder("write", tmp_path), writing_lock(tmp_path) as locked:
        assert locked


def test_a_writer_is_refused_while_a_training_reads_naming_the_folder_and_the_reader(tmp_path: Path) -> None:
    with Holder("read", tmp_path) as reader:
        with pytest.raises(InputBusy) as refused, writing_lock(tmp_path, what=f"the images folder {tmp_path}"):
            pytest.fail("a writer proceeded beside a reader")
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"the images folder {tmp_path} is being read by a training: ")
    assert f"pid {reader.pid} on host" in line and locks.WAIT_ENV in line
    assert str(lock_path(tmp_path, locks.READERS)) in line
    with writing_lock(tmp_path) as locked:  # the reader gone, its line gone: the folder is free
        assert locked and json.loads(lock_path(tmp_path, locks.WRITERS).read_text())["pid"] == os.getpid()


def test_a_reader_is_refused_while_a_resize_writes(tmp_path: Path) -> None:
    with Holder("write", tmp_path) as writer, Holder("write", tmp_path):
        with pytest.raises(InputBusy) as refused, reading_lock(tmp_path):
            pytest.fail("a reader proceeded beside a writer")
    line = str(refused.value)
    assert "\n" not in line and f"{tmp_path} is being rewritten (abid resize or abid prepare) by pid " in line
    assert f"pid {writer.pid} " in line and ", and 1 more" in line and "train again" in line


def test_a_waiting_writer_proceeds_once_the_reader_leaves(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    import threading

    reader = Holder("read", tmp_path)
    entered = threading.Event()

    def write() -> None:
        with writing_lock(tmp_path, wait_s=120):
            entered.set()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        # It says it waits (once) before the reader is let go, so it was not let in beside it.
        while "[vsbench] waiting for" not in capfd.readouterr().err:
            assert thread.is_alive() and not entered.is_set()
            thread.join(0.05)
        assert not entered.is_set()
    finally:
        reader.release()
    thread.join(120)
    assert entered.is_set()


RACE = """
import os, sys, time
from vsbench.io.locks import reading_lock, writing_lock
kind, folder, log = sys.argv[1], sys.argv[2], sys.argv[3]
lock = reading_lock if kind == "R" else writing_lock
for _ in range(int(sys.argv[4])):
    with lock(folder, wait_s=600):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        os.write(fd, f"+{kind}\\n".encode())
        time.sleep(0.002)
        os.write(fd, f"-{kind}\\n".encode())
        os.close(fd)
"""


def test_readers_and_writers_racing_never_hold_a_folder_together(tmp_path: Path) -> None:
    """Six processes, three of each kind, join and leave one folder 15 times each: in the log they
    append to while holding it, no reader is ever inside beside a writer."""
    log = tmp_path / "log"
    log.write_bytes(b"")
    folder = tmp_path / "images"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    racers = [subprocess.Popen([sys.executable, "-c", RACE, kind, str(folder), str(log), "15"], cwd=ROOT, env=env)
              for kind in "RWRWRW"]
    assert [racer.wait(timeout=300) for racer in racers] == [0] * 6
    inside = {"R": 0, "W": 0}
    events = log.read_text().split()
    assert len(events) == 6 * 15 * 2
    for event in events:
        inside[event[1]] += 1 if event[0] == "+" else -1
        assert not (inside["R"] and inside["W"]), "a reader and a writer held the folder together"


def test_a_folder_where_no_lock_file_can_be_made_is_read_without_a_lock(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A dataset on a read-only mount still trains (the training re-checks its inputs' digests)."""
    real_open = os.open

    def read_only(path, flags, *args):  # noqa: ANN001 - os.open's signature
        if Path(path).parent == tmp_path:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(locks.os, "open", read_only)
    with caplog.at_level("DEBUG", logger="vsbench.io.locks"), reading_lock(tmp_path) as locked:
        assert locked is False
    lines = [r for r in caplog.records if "without the readers/writers lock" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelname == "DEBUG" and str(tmp_path) in lines[0].getMessage()
    with reading_lock(tmp_path / "missing") as locked:  # nothing to lock: the training names it itself
        assert locked is False
    assert not (tmp_path / "missing").exists()
