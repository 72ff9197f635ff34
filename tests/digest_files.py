"""What the digest tests share: files old enough for the stat memo to remember (the fixture that
treats every file as settled, ``settled``, is in tests/conftest.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from vsbench.io import digests


def old_file(path: Path, data: bytes) -> Path:
    """A file written long enough ago that the memo may remember it (not "racily clean")."""
    path.write_bytes(data)
    past = time.time_ns() - 10 * digests.RACY_NS
    os.utime(path, ns=(past, past))
    return path
