"""Content digests of a step's inputs, hashed once and remembered by a stat record.

Why: whatever a step keeps (an embed shard, a resized photo, a checkpoint) must be keyed on the
*content* of the inputs that decided it, not on their names: a photo replaced by other bytes of the
same size with its mtime restored, or ``--root`` pointed at another dataset with the same ids, must
not be answered from the old work (issue 37). Hashing every input on every re-run would cost a
re-run of an unchanged input the whole read again, so a :class:`DigestMemo` remembers, per file, the
stat record it had when it was hashed: (inode, size, mtime, ctime) in nanoseconds, as git's index
and the index step's ``.verified.json`` do. Any write, truncation, swap or rename changes that
record, and the ctime cannot be set back (``touch -r`` restores only the mtime), so an unchanged
record stands for unchanged bytes and the re-run only calls ``stat``.

**Racy entries.** A file written within the filesystem's timestamp granularity of its hashing could
be written again with the same record (git's "racily clean" problem). An entry whose mtime or
ctime is less than :data:`RACY_NS` before the moment it was hashed is therefore not remembered: it
is hashed again next time (a cost only for files written seconds before a run).

The digest is sha256, the one the embedding cache keys each image on and the one shown to users, so
each input is read once per run: the same digest serves the reuse key and the cache (hashlib's
sha256 uses the CPU's SHA extensions where present; the memo makes its speed matter only for
changed files). The memo file is the caller's (one per output it keys, so one writer each); it is
a cache, never a source of truth: an unreadable or foreign memo is no memo (everything is hashed).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vsbench.io.storage import atomic_write_text, file_sha256

MEMO_VERSION = 1
RACY_NS = 2_000_000_000  # entries changed this close to their hashing are hashed again next time
StatRecord = tuple[int, int, int, int]


def stat_record(stat: os.stat_result) -> StatRecord:
    """(inode, size, mtime_ns, ctime_ns): what changes whenever a file's bytes or identity do."""
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class DigestMemo:
    """sha256 of files, hashed only when their stat record is not the one remembered.

    ``path`` is where the memo is kept between runs (None: this process only). Entries are keyed
    on the absolute path as given (not resolved: a symlink swapped to another target changes the
    stat record, which follows links). :meth:`save` writes only the entries used since loading,
    so a memo never grows past one run's inputs.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._known: dict[str, list[Any]] = self._load()
        self._used: dict[str, list[Any]] = {}
        self.hashed = 0  # files whose bytes were read this run (the rest answered from their stat)
        self.hashed_bytes = 0

    def _load(self) -> dict[str, list[Any]]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != MEMO_VERSION or not isinstance(data.get("files"), dict):
            return {}
        return data["files"]

    def digest(self, file: str | os.PathLike[str]) -> str:
        """The sha256 of ``file``'s bytes; raises OSError when it cannot be read."""
        name = os.path.abspath(file)
        before = os.stat(name)
        record = list(stat_record(before))
        known = self._known.get(name)
        if isinstance(known, list) and len(known) == 5 and known[:4] == record and isinstance(known[4], str):
            self._used[name] = known
            return known[4]
        hashed_at = time.time_ns()
        digest = file_sha256(name)
        self.hashed += 1
        self.hashed_bytes += before.st_size
        after = list(stat_record(os.stat(name)))
        racy = hashed_at - max(before.st_mtime_ns, before.st_ctime_ns) < RACY_NS
        if after == record and not racy:  # changed while read, or too fresh to vouch for: not remembered
            self._used[name] = [*record, digest]
        return digest

    def digest_or_none(self, file: str | os.PathLike[str]) -> str | None:
        try:
            return self.digest(file)
        except OSError:
            return None

    def digests(self, files: Sequence[str | os.PathLike[str]], threads: int = 4) -> list[str | None]:
        """Digests of many files in order, None for one that cannot be read; hashlib and ``stat``
        release the GIL, so threads overlap reading and hashing."""
        if threads <= 1 or len(files) < 64:
            return [self.digest_or_none(f) for f in files]
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(pool.map(self.digest_or_none, files, chunksize=256))

    def save(self) -> None:
        """Keep this run's entries for the next (best effort: a read-only volume only costs the
        next run a hash of each input)."""
        if self.path is None:
            return
        try:
            atomic_write_text(self.path, json.dumps({"version": MEMO_VERSION, "algorithm": "sha256",
                                                     "files": self._used}, separators=(",", ":")) + "\n")
        except OSError:
            pass


def combine(named: Iterable[tuple[str, str | None]]) -> str:
    """One sha256 over (name, digest) pairs in the order given: the digest of a list of inputs.
    An unreadable input (None) is part of it as such, so it changes the key when it becomes
    readable again."""
    total = hashlib.sha256()
    for name, digest in named:
        total.update(f"{name}\0{digest or '-'}\n".encode("utf-8", "surrogateescape"))
    return total.hexdigest()


def path_digest(path: str | os.PathLike[str], memo: DigestMemo | None = None) -> str | None:
    """sha256 of a file, or of a folder's regular files (relative path and digest, sorted): what an
    option naming a file or a folder decides. None when the path does not exist or cannot be read."""
    memo = memo or DigestMemo()
    path = Path(path)
    if path.is_file():
        return memo.digest_or_none(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        digests = memo.digests(files)
        if any(d is None for d in digests):
            return None
        return combine((p.relative_to(path).as_posix(), d) for p, d in zip(files, digests))
    return None
