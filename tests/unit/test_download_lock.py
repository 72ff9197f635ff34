"""Issue 37: one ``abid download`` writes a ``--dest`` at a time (shards of one job side by side).

The lock is taken before the bucket is listed, so these need no S3 endpoint: a run that gets past
the lock would fail on the closed port instead."""

from __future__ import annotations

import threading
import time

import pytest
from typer.testing import CliRunner

from tests.locking import held_elsewhere
from vsbench.abid.download import download_abid
from vsbench.cli.app import app
from vsbench.io.locks import OutputBusy, lock_path, output_lock, step_lock

NOWHERE = "http://127.0.0.1:9"  # discard port: nothing answers


def test_a_second_download_into_a_held_dest_stops_with_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("VSBENCH_LOCK_WAIT_S", raising=False)
    dest = tmp_path / "abid"
    with held_elsewhere(output_lock(dest)):
        result = CliRunner().invoke(app, ["abid", "download", "--dest", str(dest), "--source", "s3://bucket",
                                          "--endpoint-url", NOWHERE])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {dest} is being written by another vsbench run"), lines
    assert sorted(p.name for p in dest.iterdir()) == [".vsbench-lock"]  # nothing listed, nothing made


def test_download_shards_share_their_dest_and_exclude_the_same_shard_and_a_whole_run(tmp_path, monkeypatch):
    monkeypatch.delenv("VSBENCH_LOCK_WAIT_S", raising=False)
    dest = tmp_path / "abid"
    with held_elsewhere(step_lock(dest, "download-shard-0-of-2")):
        with pytest.raises(OutputBusy, match="download-shard-0-of-2"):
            download_abid("s3://bucket", dest, endpoint_url=NOWHERE, shard=0, num_shards=2, progress=False)
        with pytest.raises(OutputBusy):
            download_abid("s3://bucket", dest, endpoint_url=NOWHERE, progress=False)
        # the other shard gets past the lock (and then fails on the closed port, not on the lock)
        with pytest.raises(Exception) as other:  # noqa: PT011 - whatever the endpoint's failure is
            download_abid("s3://bucket", dest, endpoint_url=NOWHERE, shard=1, num_shards=2, progress=False)
        assert not isinstance(other.value, OutputBusy)


def test_a_run_waiting_on_a_lock_file_its_holder_removed_locks_the_new_one(tmp_path):
    """A download that fetched nothing removes what it made, its lock file included, while holding
    it: a run that was waiting on that file must not count a lock on an unlinked file as the lock."""
    folder = tmp_path / "dest"
    held, released, got = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:
        with output_lock(folder) as path:
            held.set()
            time.sleep(0.3)  # the waiter is polling the same file by now
            path.unlink()
            folder.rmdir()
        released.set()

    def waiter() -> None:
        with output_lock(folder, wait_s=10):
            got.set()
            time.sleep(1.0)

    first = threading.Thread(target=holder)
    first.start()
    held.wait(5)
    second = threading.Thread(target=waiter)
    second.start()
    assert got.wait(10) and released.is_set()
    assert lock_path(folder).exists()  # the waiter made and locked a file that is there
    with pytest.raises(OutputBusy):
        with output_lock(folder, wait_s=0):
            pass
    second.join(10)
    first.join(10)
