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
