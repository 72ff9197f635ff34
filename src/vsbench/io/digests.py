"""Content digests of a step's inputs, hashed once and remembered by a stat record.

Why: whatever a step keeps (an embed shard, a resized photo, a checkpoint) must be keyed on the
*content* of the inputs that decided it, not on their names: a photo replaced by other bytes of the
same size with its mtime restored, or ``--root`` pointed at another dataset with the same ids, must
not be answered from the old work (issue 37). Hashing every input on every re-run would cost a
re-run of an unchanged input the whole read again, so a :class:`DigestMemo` remembers, per file, the
stat record it had when it was hashed: (device, inode, size, mtime, ctime) in nanoseconds, as
git's index and the index step's ``.verified.json`` do. Any write, truncation, swap or rename
changes that record, and the ctime cannot be set back (``touch -r`` restores only the mtime), so an
unchanged record stands for unchanged bytes and the re-run only calls ``stat``. The device keeps
two volumes' files apart: without it, a ``--root`` switched between two filesystem images built from
similar folders was answered with the first one's digests (issue 46).

**A full check.** Where a record can lie (a filesystem image edited offline, a block-level restore,
a network or FUSE filesystem that fakes attributes: docs/reliability.md, "Threat model of the stat
shortcut"), ``VSBENCH_VERIFY_INPUTS=full`` (``--verify-inputs full``) makes every memo hash every
file again; the memo is still saved, so the next ``stat`` run starts from verified digests.

**Racy entries.** A file written within the filesystem's timestamp granularity of its hashing could
be written again with the same record (git's "racily clean" problem). An entry whose mtime or
ctime is less than :data:`RACY_NS` before the moment it was hashed is therefore not remembered: it
is hashed again next time (a cost only for files written seconds before a run).

The digest is sha256, the one the embedding cache keys each image on and the one shown to users, so
each input is read once per run: the same digest serves the reuse key and the cache (hashlib's
sha256 uses the CPU's SHA extensions where present; the memo makes its speed matter only for
changed files). The memo file is the caller's (one per output it keys, so one writer each); it is
a cache, never a source of truth: an unreadable or foreign memo is no memo (everything is hashed),
an entry whose digest is not 64 lowercase hex digits is dropped (its file is hashed), and an entry
that names other bytes than its unchanged file holds (a bit flipped inside a digest) is found by
:meth:`DigestMemo.stale` when the caller's second read disagrees, so that the caller can hash
everything again instead of blaming the file.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vsbench.io.storage import SHA256_HEX, StatRecord, atomic_write_text, file_sha256, stat_record, stat_trusted

__all__ = ["MEMO_VERSION", "RACY_NS", "DigestMemo", "StatRecord", "combine", "path_digest", "stat_record"]

# 2: names, stats and digests as three parallel lists (a quarter of the load time); 3: the device
# in each stat record (an older memo is no memo: everything is hashed once).
MEMO_VERSION = 3
RACY_NS = 2_000_000_000  # entries changed this close to their hashing are hashed again next time
RECORD_LENGTH = 5

logger = logging.getLogger(__name__)


class DigestMemo:
    """sha256 of files, hashed only when their stat record is not the one remembered.

    ``path`` is where the memo is kept between runs (None: this process only). Entries are keyed
    on the absolute path as given (not resolved: a symlink swapped to another target changes the
    stat record, which follows links). :meth:`save` writes only the entries used since loading,
    so a memo never grows past one run's inputs, and writes nothing when they are the ones loaded.
    ``trust_stat`` False (default: :func:`~vsbench.io.storage.stat_trusted`, i.e. unless
    ``VSBENCH_VERIFY_INPUTS=full``) hashes every file whatever its record; the memo is still saved.

    Cost of an unchanged re-run: one ``stat`` per file (~6-10 us here; the floor, as for git) and
    the memo's load (bench/input_keys.py).
    """

    def __init__(self, path: Path | None = None, trust_stat: bool | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.trust_stat = stat_trusted() if trust_stat is None else trust_stat
        self._known: dict[str, tuple[StatRecord, str]] = self._load() if self.trust_stat else {}
        self._used: dict[str, tuple[StatRecord, str]] = {}
        self.hashed = 0  # files whose bytes were read this run (the rest answered from their stat)
        self.hashed_bytes = 0
        self._count = threading.Lock()  # the counters are added to from the hashing threads

    def _load(self) -> dict[str, tuple[StatRecord, str]]:
        if self.path is None:
            return {}
        enabled = gc.isenabled()
        gc.disable()  # 100k small lists: the cyclic collector would run dozens of times for nothing
        try:
            data = json.loads(self.path.read_bytes())
            if not isinstance(data, dict) or data.get("version") != MEMO_VERSION:
                return {}
            names, stats, digests = data["names"], data["stats"], data["digests"]
            if not (isinstance(names, list) and isinstance(stats, list) and isinstance(digests, list)
                    and len(names) == len(stats) == len(digests)):
                return {}
            known = {name: (tuple(stat), digest) for name, stat, digest in zip(names, stats, digests)
                     if isinstance(name, str) and isinstance(stat, list) and len(stat) == RECORD_LENGTH
                     and isinstance(digest, str) and SHA256_HEX.fullmatch(digest)}
            if len(known) < len(names):
                logger.warning("%s: %d of %d entries are not a file, its stat record and a sha256 (damaged?); "
                               "their files are hashed again", self.path, len(names) - len(known), len(names))
            return known
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        finally:
            if enabled:
                gc.enable()

    def _hash(self, name: str, before: os.stat_result) -> str:
        hashed_at = time.time_ns()
        digest = file_sha256(name)
        with self._count:
            self.hashed += 1
            self.hashed_bytes += before.st_size
        record = stat_record(before)
        racy = hashed_at - max(before.st_mtime_ns, before.st_ctime_ns) < RACY_NS
        if stat_record(os.stat(name)) == record and not racy:  # changed while read, or too fresh: not remembered
            self._used[name] = (record, digest)
        return digest

    def digest(self, file: str | os.PathLike[str]) -> str:
        """The sha256 of ``file``'s bytes; raises OSError when it cannot be read."""
        name = os.path.abspath(file)
        before = os.stat(name)
        known = self._known.get(name)
        if known is not None and known[0] == stat_record(before):
            self._used[name] = known
            return known[1]
        return self._hash(name, before)

    def digest_or_none(self, file: str | os.PathLike[str]) -> str | None:
        try:
            return self.digest(file)
        except OSError:
            return None

    def digests(self, files: Sequence[str | os.PathLike[str]], threads: int = 4) -> list[str | None]:
        """Digests of many files in order, None for one that cannot be read. Every file is
        ``stat``-ed in one tight loop (threads only add lock traffic to a call this short); the
        ones whose record changed are hashed in ``threads`` threads (hashlib releases the GIL)."""
        found: list[str | None] = [None] * len(files)
        misses: list[tuple[int, str, os.stat_result]] = []
        known, used, stat, fspath, isabs = self._known, self._used, os.stat, os.fspath, os.path.isabs
        for i, file in enumerate(files):
            name = fspath(file)
            if not isabs(name):
                name = os.path.abspath(name)
            try:
                before = stat(name)
            except OSError:
                continue
            entry = known.get(name)
            if entry is not None and entry[0] == (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns,
                                                  before.st_ctime_ns):
                used[name] = entry
                found[i] = entry[1]
            else:
                misses.append((i, name, before))

        def hash_all(part: list[tuple[int, str, os.stat_result]]) -> None:
            for index, name, before in part:
                try:
                    found[index] = self._hash(name, before)
                except OSError:
                    pass

        if threads <= 1 or len(misses) < 16:
            hash_all(misses)
        else:  # chunks, not one task a file: a thread pool's map takes no chunksize (a task costs ~20 us)
            size = max(1, min(256, -(-len(misses) // (4 * threads))))
            with ThreadPoolExecutor(max_workers=threads) as pool:
                list(pool.map(hash_all, [misses[i:i + size] for i in range(0, len(misses), size)]))
        return found

    def remembered(self) -> DigestMemo:
        """A memo kept nowhere that knows this one's entries of this run: re-checking files after
        they were used (a model's weights after loading them) costs a ``stat`` each where the
        record is the one hashed, and a hash where it is not (or was never remembered: racy)."""
        again = DigestMemo(None)
        again._known = dict(self._used)
        return again

    def stale(self, files: Sequence[str | os.PathLike[str]], read: Sequence[str | None]) -> list[tuple[str, str, str]]:
        """The entries that lied: of ``files`` (with ``read``, the sha256 of the bytes the caller read
        from each afterwards), those this run answered from a remembered record, whose file still has
        that record and whose bytes hash now to what the caller read, not to the remembered digest.
        (name, remembered, actual) each. A real change between two reads changes the record (the
        ctime cannot be set back), so these are a damaged memo, not a changing dataset: the caller
        hashes everything again rather than telling the user to wait for a sync. One hash per file
        asked about (only files whose two reads disagreed)."""
        lied = []
        for file, digest in zip(files, read):
            name = os.path.abspath(file)
            entry = self._used.get(name)
            if digest is None or entry is None or entry is not self._known.get(name) or entry[1] == digest:
                continue  # hashed this run (a real race), or not a disagreement
            try:
                if stat_record(os.stat(name)) != entry[0] or file_sha256(name) != digest:
                    continue
            except OSError:
                continue
            lied.append((name, entry[1], digest))
        return lied

    def discard(self) -> None:
        """Forget every entry and delete the memo's file: what it said is not to be believed again."""
        self._known, self._used = {}, {}
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def forget(self, files: Iterable[str | os.PathLike[str]]) -> None:
        """Drop the entries of ``files`` (the next :meth:`save` leaves them out): files found to
        have changed while a step used them are hashed again by the next run, whatever their record."""
        for file in files:
            self._used.pop(os.path.abspath(file), None)

    def save(self) -> None:
        """Keep this run's entries for the next (best effort: a read-only volume only costs the
        next run a hash of each input). Nothing is written when they are the entries loaded, or when
        the memo is kept nowhere; either way, a later check in this run answers from these entries
        (a ``stat`` each) instead of hashing every file again."""
        if self.path is None or self._used == self._known:
            self._known = dict(self._used)
            return
        names = list(self._used)
        try:
            atomic_write_text(self.path, json.dumps({
                "version": MEMO_VERSION, "algorithm": "sha256", "names": names,
                "stats": [self._used[n][0] for n in names], "digests": [self._used[n][1] for n in names]},
                separators=(",", ":")) + "\n")
        except OSError:
            pass
        self._known = dict(self._used)


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
