"""The two building blocks of issue 37: content digests remembered by stat (``DigestMemo``) and the
one-writer lock (``output_lock``/``step_lock``)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.digest_files import old_file
from vsbench.io import locks
from vsbench.io.digests import MEMO_VERSION, DigestMemo, combine, path_digest
from vsbench.io.locks import OutputBusy, output_lock, step_lock


def test_the_memo_hashes_once_and_answers_an_unchanged_file_from_its_stat(tmp_path: Path, settled: None) -> None:
    image = old_file(tmp_path / "a.jpg", b"abc" * 1000)
    memo = DigestMemo(tmp_path / "memo.json")
    assert memo.digest(image) == hashlib.sha256(b"abc" * 1000).hexdigest() and memo.hashed == 1
    memo.save()
    again = DigestMemo(tmp_path / "memo.json")
    assert again.digest(image) == hashlib.sha256(b"abc" * 1000).hexdigest() and again.hashed == 0


@pytest.mark.parametrize("change", ["same-size-mtime-restored", "truncated", "swapped", "replaced-by-rename"])
def test_any_change_of_the_bytes_is_seen_whatever_the_mtime(tmp_path: Path, settled: None, change: str) -> None:
    first, second = old_file(tmp_path / "a.jpg", b"a" * 100), old_file(tmp_path / "b.jpg", b"b" * 100)
    memo = DigestMemo(tmp_path / "memo.json")
    memo.digests([first, second], threads=1)
    memo.save()
    stat = first.stat()
    if change == "same-size-mtime-restored":
        first.write_bytes(b"c" * 100)
        os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        expected = b"c" * 100
    elif change == "truncated":
        first.write_bytes(b"a" * 50)
        os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        expected = b"a" * 50
    elif change == "swapped":
        first.rename(tmp_path / "t")
        second.rename(first)
        (tmp_path / "t").rename(second)
        expected = b"b" * 100
    else:
        replacement = tmp_path / "new"
        replacement.write_bytes(b"d" * 100)
        os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        replacement.rename(first)
        expected = b"d" * 100
    again = DigestMemo(tmp_path / "memo.json")
    assert again.digest(first) == hashlib.sha256(expected).hexdigest()


def test_a_file_hashed_right_after_it_was_written_is_not_remembered(tmp_path: Path) -> None:
    """Git's racily clean case: a write within the timestamp's granularity could keep the record."""
    fresh = tmp_path / "fresh.jpg"
    fresh.write_bytes(b"x")
    memo = DigestMemo(tmp_path / "memo.json")
    memo.digest(fresh)
    memo.save()
    assert not (tmp_path / "memo.json").exists()
    assert DigestMemo(tmp_path / "memo.json").digests([fresh]) == [hashlib.sha256(b"x").hexdigest()]


@pytest.mark.parametrize("content", ["not json", '{"version": 99, "names": []}', "[]",
                                     '{"version": 2, "names": ["X"], "stats": [[1, 2, 3]], "digests": ["0"]}',
                                     '{"version": 2, "names": ["X"], "stats": [[1, 2, 3, 4]]}'])
def test_an_unreadable_or_foreign_memo_is_no_memo(tmp_path: Path, settled: None, content: str) -> None:
    image = old_file(tmp_path / "a.jpg", b"a")
    (tmp_path / "memo.json").write_text(content.replace("X", str(image)))
    memo = DigestMemo(tmp_path / "memo.json")
    assert memo.digest(image) == hashlib.sha256(b"a").hexdigest() and memo.hashed == 1


def test_a_forged_memo_entry_for_another_stat_is_not_believed(tmp_path: Path, settled: None) -> None:
    image = old_file(tmp_path / "a.jpg", b"a")
    stat = image.stat()
    for ctime in (stat.st_ctime_ns - 1, stat.st_ctime_ns):
        forged = [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, ctime]
        (tmp_path / "memo.json").write_text(json.dumps({"version": MEMO_VERSION, "names": [str(image)], "stats": [forged],
                                                        "digests": ["0" * 64]}))
        memo = DigestMemo(tmp_path / "memo.json")
        # another stat: hashed; the very stat: believed (the memo is the run's own, beside its outputs)
        assert memo.digests([image]) == [hashlib.sha256(b"a").hexdigest() if ctime != stat.st_ctime_ns else "0" * 64]


def test_unreadable_files_are_none_and_change_the_combined_digest(tmp_path: Path) -> None:
    present = old_file(tmp_path / "a", b"a")
    memo = DigestMemo()
    found = memo.digests([present, tmp_path / "missing"], threads=1)
    assert found[0] and found[1] is None
    assert combine([("a", found[0]), ("b", None)]) != combine([("a", found[0]), ("b", found[0])])
    assert combine([("a", "1"), ("b", "2")]) != combine([("b", "2"), ("a", "1")])


def test_a_folders_digest_covers_names_and_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.bin").write_bytes(b"1")
    before = path_digest(folder)
    (folder / "sub" / "a.bin").rename(folder / "sub" / "b.bin")
    assert path_digest(folder) != before
    assert path_digest(tmp_path / "nothing") is None


def test_many_files_hash_in_threads_in_order(tmp_path: Path) -> None:
    paths = [old_file(tmp_path / f"{i}", str(i).encode()) for i in range(200)]
    assert DigestMemo().digests(paths, threads=4) == [hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)]


# --- locks ---------------------------------------------------------------------------------------

HOLD = """
import sys, time
from vsbench.io.locks import output_lock, step_lock
if sys.argv[2] == "run":
    lock = output_lock(sys.argv[1])
else:
    lock = step_lock(sys.argv[1], sys.argv[2])
with lock:
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(folder: Path, unit: str = "run") -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), unit], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_held_folder_is_one_line_naming_the_folder_the_holder_and_the_fix(tmp_path: Path) -> None:
    proc = _holder(tmp_path / "out")
    try:
        with pytest.raises(OutputBusy) as caught, output_lock(tmp_path / "out"):
            pass
        message = str(caught.value)
        assert "\n" not in message and str(tmp_path / "out") in message and f"pid {proc.pid}" in message
        assert "VSBENCH_LOCK_WAIT_S" in message and "another output folder" in message
    finally:
        _stop(proc)


def test_a_lock_left_by_a_killed_holder_is_taken_over(tmp_path: Path) -> None:
    _stop(_holder(tmp_path / "out"))
    with output_lock(tmp_path / "out") as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_pipeline_steps_share_the_folder_but_not_their_output(tmp_path: Path) -> None:
    """Parallel tasks of one pipeline run side by side; the same task twice does not, and a whole
    run in the folder waits for all of them."""
    proc = _holder(tmp_path / "out", "embed-shard-0-of-2")
    try:
        with step_lock(tmp_path / "out", "embed-shard-1-of-2"):
            pass
        with pytest.raises(OutputBusy, match="embed-shard-0-of-2"), step_lock(tmp_path / "out", "embed-shard-0-of-2"):
            pass
        with pytest.raises(OutputBusy, match="a pipeline step"), output_lock(tmp_path / "out"):
            pass
    finally:
        _stop(proc)
    proc = _holder(tmp_path / "out")
    try:
        with pytest.raises(OutputBusy), step_lock(tmp_path / "out", "score"):
            pass
    finally:
        _stop(proc)


def test_within_one_process_the_lock_is_reentrant(tmp_path: Path) -> None:
    with output_lock(tmp_path), step_lock(tmp_path, "score"), output_lock(tmp_path):
        pass
    with step_lock(tmp_path, "a"), step_lock(tmp_path, "b"):
        pass


def test_a_waiting_run_goes_on_when_the_holder_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks, "POLL_S", 0.02)
    proc = _holder(tmp_path / "out")
    threading.Timer(0.3, _stop, [proc]).start()
    with output_lock(tmp_path / "out", wait_s=60):
        pass
    monkeypatch.setenv(locks.WAIT_ENV, "soon")
    with pytest.raises(ValueError, match="VSBENCH_LOCK_WAIT_S='soon' is not a number of seconds"):
        locks.wait_seconds()


def test_a_filesystem_without_locks_warns_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with output_lock(tmp_path):
        pass
    assert "cannot lock files" in caplog.text


def test_an_output_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputBusy, match="cannot be an output folder"), output_lock(tmp_path / "file"):
        pass


def test_misses_hashed_in_threads_equal_a_serial_hash_missing_files_included(tmp_path: Path) -> None:
    files = [tmp_path / f"{i}.bin" for i in range(300)]
    for i, path in enumerate(files):
        path.write_bytes(bytes([i % 256]) * (i + 1))
    files.insert(17, tmp_path / "missing.bin")
    threaded = DigestMemo()
    assert threaded.digests(files, threads=3) == DigestMemo().digests(files, threads=1)
    assert threaded.hashed == 300 and threaded.hashed_bytes == sum(range(1, 301))


def test_a_lock_file_this_user_cannot_write_still_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock file made by another user (the host's, seen by a step in the image as user 10001):
    flock needs no write access, so the lock holds; only the holder's record is not written."""
    proc = _holder(tmp_path / "out")
    real_open = os.open

    def as_another_user(path: str, flags: int, *args: int) -> int:
        if str(path).endswith(locks.LOCK_FILE) and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(locks.os, "open", as_another_user)
    try:
        with pytest.raises(OutputBusy, match=f"pid {proc.pid}"), output_lock(tmp_path / "out"):
            pass
    finally:
        _stop(proc)
    with output_lock(tmp_path / "out") as path:
        assert json.loads(path.read_text())["pid"] == proc.pid  # the record stays the last writable holder's
