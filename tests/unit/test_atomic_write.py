"""Atomic writes made piece by piece: a failing producer leaves neither the file nor a temporary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vsbench.io.storage import atomic_write_bytes, atomic_write_chunks


def test_chunks_are_written_in_order(tmp_path: Path) -> None:
    atomic_write_chunks(tmp_path / "sub" / "f.txt", (part.encode() for part in ["a", "", "bc", "d"]))
    assert (tmp_path / "sub" / "f.txt").read_bytes() == b"abcd"


def test_a_failing_producer_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    atomic_write_bytes(target, b"old")

    def broken() -> Iterator[bytes]:
        yield b"new, half"
        raise RuntimeError("producer died")

    with pytest.raises(RuntimeError, match="producer died"):
        atomic_write_chunks(target, broken())
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_a_write_that_fails_names_the_file_not_its_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk raises ENOSPC from write() with no file name; a path under a regular file fails on the
    temporary's name. Either way the error names the file being written, keeping its errno (issue 39)."""
    import errno

    from vsbench.io import storage

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(NotADirectoryError) as raised:
        atomic_write_bytes(blocker / "out.json", b"{}")
    assert raised.value.filename == str(blocker / "out.json")

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage, "_write_all", full)
    with pytest.raises(OSError) as raised:
        atomic_write_bytes(tmp_path / "f.json", b"{}")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(tmp_path / "f.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no temporary left


def test_a_faiss_index_written_to_a_full_disk_names_the_index_file(tmp_path: Path) -> None:
    """FAISS reports a failed write as a RuntimeError naming its temporary; /dev/full fails every write
    with ENOSPC, as a full disk does."""
    import errno
    import os

    import faiss
    import numpy as np

    from vsbench.index.store import _write

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    index = faiss.IndexFlatL2(8)
    index.add(np.zeros((100_000, 8), np.float32))  # more than one buffer: the write reaches the device
    with pytest.raises(OSError) as raised:
        _write(tmp_path / "trained.faiss", lambda temporary: faiss.write_index(index, "/dev/full"))
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(tmp_path / "trained.faiss"))
