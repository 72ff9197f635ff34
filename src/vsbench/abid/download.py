"""Download ABID from S3: many requests in flight, verified, resumable, atomic.

The real bucket (``s3://aft-vbi-pds``) serves ~1M small objects; throughput is bound by request
latency, not bandwidth, so a plain loop (one request in flight) is the slow way. We list once,
plan every object, skip the ones already on disk and verified (size, plus MD5 against the ETag
when the ETag is a plain MD5), and fetch the rest from a thread pool with retries and backoff.
Each object is written through a temporary file and renamed, so a killed run never leaves a
partial file under a final name; the next run simply fetches what is missing or wrong.

A dead or silent endpoint costs seconds, not hours: requests time out in seconds
(``VSBENCH_S3_CONNECT_TIMEOUT``, ``VSBENCH_S3_READ_TIMEOUT``), and a job-wide circuit breaker stops
the whole download after ``VSBENCH_S3_MAX_CONNECTION_FAILURES`` requests in a row failed at the
connection level (refused, reset, timed out, closed mid-answer: never a 404 or a bad MD5 of one
object) or ``VSBENCH_S3_STALL_TIMEOUT`` seconds without an answer. It then says so in one line
naming the endpoint. The manifest is written on every exit (success, failure, breaker, SIGTERM,
SIGINT) whenever the destination holds anything of the run; a run that fetched nothing removes
the folders it created.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vsbench.abid.fetch import (
    Breaker,
    Fetcher,
    ObjectResult,
    PlannedObject,
    max_connection_failures,
    stall_timeout,
    start_workers,
    verify_local,
)
from vsbench.abid.ids import AbidKey, parse_key, relative_path
from vsbench.abid.s3_get import (
    AnonymousHttpGetter,
    BotoGetter,
)
from vsbench.io.locks import LOCK_FILE, lock_path, output_lock, step_lock
from vsbench.io.progress import progress_bar
from vsbench.io.storage import (
    TMP_MARKER,
    S3AccessError,
    atomic_write_json,
    explain_s3_error,
    has_aws_credentials,
    is_temporary,
    iter_s3_objects,
    parse_s3_uri,
    s3_client,
    s3_errors,
)

PUBLIC_SOURCE = "s3://aft-vbi-pds"
PROBE_OBJECTS = 20  # when this many first objects all fail for one job-wide cause, the rest are not tried
MANIFEST_NAME = "_manifests/download.json"
MAX_LISTED_CONFLICTS = 10_000  # bounds the manifest; the count is always exact
KEEP_RULE = "the unpadded key is the canonical spelling (the challenge's ids are integers)"


@dataclass(frozen=True)
class SpellingConflict:
    """One id whose two spellings (``bin-images/00123.jpg`` and ``bin-images/123.jpg``) differ in
    listed size or ETag, for its image, its metadata or both: not the same object twice, so which
    one was kept is written down. One per id, as the counts are per id."""

    bin_id: int
    kinds: tuple[str, ...]  # "image", "metadata" or both, in that order
    objects: dict[str, dict[str, Any]]  # kind -> {"kept": {key, size, etag}, "dropped": [{key, size, etag}, ...]}
    reason: str = KEEP_RULE


CONFLICT_LABELS = ("image", "metadata", "image and metadata")


def conflict_kinds(conflicts: Iterable[SpellingConflict]) -> dict[str, int]:
    """Ids per combination of colliding kinds, always in the order of :data:`CONFLICT_LABELS` (so the
    warning line reads the same whichever id comes first); combinations with no id are left out."""
    counts = dict.fromkeys(CONFLICT_LABELS, 0)
    for conflict in conflicts:
        counts[" and ".join(conflict.kinds)] += 1
    return {label: count for label, count in counts.items() if count}


def _listed(key: AbidKey, obj: dict[str, Any]) -> dict[str, Any]:
    return {"key": key.key, "size": obj["Size"], "etag": obj["ETag"]}


@dataclass
class DownloadSummary:
    source: str
    dest: str
    listed_keys: int = 0
    ignored_keys: int = 0
    duplicate_spellings: int = 0  # keys dropped as another spelling of an id, with the same size and ETag
    spelling_conflicts: int = 0  # ids whose spellings differ in size or ETag (listed in ``conflicts``)
    spelling_conflict_kinds: dict[str, int] = field(default_factory=dict)  # ids per colliding kinds
    planned: int = 0
    fetched: int = 0  # refetched objects included
    refetched: int = 0  # of ``fetched``: a local copy was there but damaged (the key log says how)
    skipped: int = 0
    failed: int = 0
    bytes_fetched: int = 0
    seconds: float = 0.0  # the whole run: listing, checking the local copies, fetching
    fetch_seconds: float = 0.0  # from the first request to the last answer: the time the rates are over
    failures: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    cause: str = ""  # one line naming a job-wide cause and its fix (access denied, ...); "" when none
    stopped_early: bool = False  # the first objects all failed for ``cause``: the rest were not tried
    endpoint: str = ""  # where the objects were fetched from
    stopped_by: str = ""  # "", "breaker", "stall", "SIGTERM" or "SIGINT": the job stopped before trying every object
    not_tried: int = 0  # objects counted in ``failed`` that were never tried (or whose try was cut short)
    keys_log: str = ""  # one JSON line per planned object of this run (:class:`KeyLog`), relative to ``dest``

    @property
    def complete(self) -> bool:
        return self.failed == 0

    @property
    def resumable(self) -> bool:
        """Whether running again can help: every failure was transient (network, timeouts, 5xx, a stop)."""
        return (not self.cause or bool(self.stopped_by)) and not any(f.get("permanent") for f in self.failures)

    def advice(self) -> str:
        """One line for a user: the cause and its fix, or what a re-run would do."""
        if self.cause:
            return self.cause
        permanent = sum(1 for f in self.failures if f.get("permanent"))
        if permanent:
            where = str(Path(self.dest) / self.keys_log) if self.keys_log else "the manifest"
            return (f"{self.failed} {_objects(self.failed)} failed, {permanent} of them for a reason no retry changes (denied, "
                    f"gone, or a local path that cannot be written; {where} says which "
                    "and why); fix those, then run the same command again to resume")
        return (f"{self.failed} {_objects(self.failed)} failed on transient errors; run the same command again "
                "to resume")

    def conflict_warning(self, manifest: str = MANIFEST_NAME) -> str:
        """One line for all spelling conflicts ("" when none): how many, a few ids, where the list is."""
        if not self.spelling_conflicts:
            return ""
        kinds = ", ".join(f"{label}: {count}" for label, count in self.spelling_conflict_kinds.items())
        shown = ", ".join(str(c["bin_id"]) for c in self.conflicts[:5])
        more = ", ..." if self.spelling_conflicts > 5 else ""
        ids = "id" if self.spelling_conflicts == 1 else "ids"
        has = "has" if self.spelling_conflicts == 1 else "have"
        listed = (f" (the first {len(self.conflicts):,} ids)" if len(self.conflicts) < self.spelling_conflicts
                  else "")
        return (f"warning: {self.spelling_conflicts:,} {ids} {has} two spellings with different contents ({kinds}; "
                f"{ids} {shown}{more}); "
                f"kept the unpadded key of each ({KEEP_RULE.split(' (')[0]}); both keys, sizes and ETags are "
                f"under 'conflicts'{listed} in {manifest}")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["complete"] = self.complete
        data.update(self.rates())
        return data

    def rates(self) -> dict[str, float]:
        """Objects and megabytes per second over what was transferred and its own time: a re-run that
        refetched one object and skipped 10,000 verified ones is not "0.33 objects/s" over the listing."""
        seconds = self.fetch_seconds
        return {"objects_per_second": round(self.fetched / seconds, 2) if seconds else 0.0,
                "megabytes_per_second": round(self.bytes_fetched / 1e6 / seconds, 2) if seconds else 0.0}

    def transfer_line(self) -> str:
        """What was transferred, at what rate, and what was kept, in one line."""
        kept = (f"; {self.skipped:,} {_objects(self.skipped)} already on disk, verified against the listing and kept"
                if self.skipped else "")
        if not self.fetched:
            return f"transferred nothing{kept}"
        rates = self.rates()
        return (f"transferred {self.fetched:,} {_objects(self.fetched)} ({self.bytes_fetched / 1e6:,.1f} MB) in "
                f"{self.fetch_seconds:g} s: {rates['objects_per_second']:g} objects/s, "
                f"{rates['megabytes_per_second']:g} MB/s{kept}")


def _objects(count: int) -> str:
    return "object" if count == 1 else "objects"


class DownloadIncomplete(RuntimeError):
    """Raised by callers that require a complete download; carries the summary."""

    one_line = True  # an expected failure: its message says all (the CLI prints no traceback)

    def __init__(self, summary: DownloadSummary) -> None:
        self.summary = summary
        super().__init__(
            f"download incomplete: {summary.failed} of {summary.planned} objects failed: {summary.advice()}"
        )


def plan_objects(
    listing: Iterable[dict[str, Any]], prefix: str, limit: int | None = None, shard: int = 0, num_shards: int = 1,
) -> tuple[list[PlannedObject], list[str], int, list[SpellingConflict]]:
    """Choose one key per (bin id, kind); returns (plan, ignored keys, duplicate spellings, conflicts).

    When both ``523.jpg`` and ``00523.jpg`` exist they are the same bin: the unpadded key is
    taken (the canonical spelling) and the other recorded as an alternate. Spellings with the same
    listed size and ETag count as duplicates (the same object twice); any that differ make one
    :class:`SpellingConflict` for the id, and the unpadded key is still the one kept. ``limit`` keeps the
    ``limit`` smallest bin ids that have an image, with their metadata. With ``num_shards`` > 1
    only bins with ``id % num_shards == shard`` are planned, so shards can run on separate nodes.
    """
    by_id: dict[tuple[int, str], list[tuple[AbidKey, dict[str, Any]]]] = {}
    ignored: list[str] = []
    for obj in listing:
        parsed = parse_key(obj["Key"], prefix)
        if parsed is None:
            ignored.append(obj["Key"])
            continue
        by_id.setdefault((parsed.bin_id, parsed.kind), []).append((parsed, obj))

    keep_ids: set[int] | None = None
    if limit is not None:
        image_ids = sorted(bin_id for bin_id, kind in by_id if kind == "image")
        keep_ids = set(image_ids[:limit])

    plan: list[PlannedObject] = []
    duplicates = 0
    differing_by_id: dict[int, dict[str, dict[str, Any]]] = {}
    for (bin_id, kind), spellings in sorted(by_id.items()):
        if (keep_ids is not None and bin_id not in keep_ids) or bin_id % num_shards != shard:
            continue
        spellings.sort(key=lambda item: (item[0].padded, item[0].key))
        chosen, obj = spellings[0]
        differing = [_listed(key, other) for key, other in spellings[1:]
                     if (other["Size"], other["ETag"]) != (obj["Size"], obj["ETag"])]
        duplicates += len(spellings) - 1 - len(differing)
        if differing:
            differing_by_id.setdefault(bin_id, {})[kind] = {"kept": _listed(chosen, obj), "dropped": differing}
        plan.append(
            PlannedObject(
                bin_id=bin_id,
                kind=kind,
                key=chosen.key,
                size=obj["Size"],
                etag=obj["ETag"],
                path=relative_path(bin_id, chosen.kind),
                alternate_keys=tuple(item[0].key for item in spellings[1:]),
            )
        )
    conflicts = [SpellingConflict(bin_id, tuple(k for k in ("image", "metadata") if k in objects), objects)
                 for bin_id, objects in sorted(differing_by_id.items())]
    return plan, ignored, duplicates, conflicts


def no_abid_objects(source: str, prefix: str, keys: list[str]) -> str:
    """One line for a listing without a single ABID key: how many keys, and the prefix that would fit."""
    if not keys:
        return (f"no objects under {source}: the bucket (or prefix) is empty; check the s3:// URI")
    hint = ""
    *parent, last = prefix.rstrip("/").split("/") if prefix.strip("/") else [""]
    if last in ("bin-images", "metadata"):  # one level too deep: --source s3://BUCKET/bin-images
        bucket = source.removeprefix("s3://").split("/", 1)[0]
        above = "/".join(["s3:/", bucket, *parent])
        hint = (f"; {source} is ABID's {last}/ folder itself: use the folder above it, {above}, as --source "
                f"(it holds bin-images/ and metadata/)")
    for key in [] if hint else keys:
        for folder in ("bin-images/", "metadata/"):
            at = key.find("/" + folder)
            if at >= 0 and parse_key(key, key[: at + 1]) is not None:
                bucket = source.removeprefix("s3://").split("/", 1)[0]
                hint = f"; ABID keys sit under s3://{bucket}/{key[:at]}: use that as --source"
                break
        if hint:
            break
    listed = f"{len(keys)} key listed" if len(keys) == 1 else f"{len(keys)} keys listed"
    return (f"no ABID objects under {source}: {listed}, none named {prefix}bin-images/<id>.jpg or "
            f"{prefix}metadata/<id>.json (e.g. {keys[0]}){hint}")


class DownloadInterrupted(RuntimeError):
    """SIGTERM or SIGINT stopped a download; the manifest (when anything was fetched) is written. The
    message is one line; ``exit_code`` is the shell's 128 + the signal number."""

    def __init__(self, signum: int, summary: DownloadSummary | None, manifest: Path | None) -> None:
        self.signum, self.summary = signum, summary
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        if summary is None:
            message = f"interrupted by {name} while listing; nothing was fetched"
        else:
            kept = f"the manifest is {manifest}; " if manifest else ""
            message = (f"interrupted by {name}: {summary.fetched:,} objects fetched, {summary.skipped:,} already "
                       f"there, {summary.not_tried:,} not tried; {kept}run the same command again to resume")
        super().__init__(message)


class _Signalled(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum: int, frame: Any) -> None:
    raise _Signalled(signum)


def _catch_signals() -> dict[int, Any]:
    """SIGTERM and SIGINT raise :class:`_Signalled` in the main thread (SIGTERM would otherwise kill the
    process before any manifest is written); returns the handlers to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[signum] = signal.signal(signum, _raise_signalled)
        except (ValueError, OSError):  # not settable here (embedded interpreter)
            pass
    return previous


class KeyLog:
    """What this run did with each planned object, one JSON line each, named by the manifest.

    The manifest only counts; after a resume a user needs to know which file was fetched again and
    why. Lines are ``{"key", "path", "status", "reason", "attempts", "size"}`` with ``status`` one of
    ``fetched``, ``refetched`` (a local copy was there but damaged: ``reason`` says how: size, MD5,
    unreadable, a folder in its place), ``skipped`` (the local copy verified against the listing),
    ``failed`` (``reason``; and when a damaged local copy stays, how it is damaged) or ``not_tried``
    (the job stopped first); ``size`` is the bytes on disk for the key after this run (0 when none). Lines stream to a temporary file from the one thread
    that counts results, so memory stays flat at a million keys; the file takes its name when the
    manifest is written, and is removed with everything else when the run leaves nothing behind.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.parent / f".{path.name}{TMP_MARKER}{os.getpid()}"
        self._folder_existed = path.parent.exists()
        self._file: Any = None

    def write(self, obj: PlannedObject, status: str, reason: str = "", attempts: int = 0, size: int = 0) -> None:
        self._open()
        self._file.write(json.dumps({"key": obj.key, "path": obj.path, "status": status, "reason": reason,
                                     "attempts": attempts, "size": size}, separators=(",", ":")) + "\n")

    def _open(self) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self._tmp, "w", encoding="utf-8")  # noqa: SIM115 - closed in keep()/discard()

    def keep(self) -> None:
        """Close the log and give it its name (an empty log when nothing was planned)."""
        self._open()
        self._file.close()
        os.replace(self._tmp, self.path)

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._tmp.unlink(missing_ok=True)
            if not self._folder_existed:
                try:
                    self.path.parent.rmdir()
                except OSError:
                    pass


def keys_log_name(shard: int = 0, num_shards: int = 1) -> str:
    return manifest_name(shard, num_shards).removesuffix(".json") + ".keys.jsonl"


LAYOUT_FOLDERS = ("bin-images", "metadata", "_manifests")  # what a run makes under its destination


class DestinationError(ValueError):
    """A destination the run could not write into (a file in the way, no write permission): refused
    before anything is listed or created, in one line naming the path and the fix."""

    one_line = True


def check_destination(dest: Path) -> None:
    """Refuse ``dest`` when its nearest existing folder is not a writable folder, or when a file sits
    where the run keeps ``bin-images/``, ``metadata/`` or ``_manifests/``: found part-way, these
    failed every object (or the key log) after the listing, and left what was fetched without a manifest."""
    for folder in [dest, *dest.parents]:
        if not (folder.exists() or folder.is_symlink()):
            continue
        if not folder.is_dir():
            what = "is a file" if folder.is_file() else "is not a folder"
            raise DestinationError(f"cannot download into {dest}: {folder} {what}; choose another --dest "
                                   "(or move that file)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise DestinationError(f"cannot download into {dest}: {folder} is not writable by this user; "
                                   "choose another --dest or fix its permissions")
        break
    for name in LAYOUT_FOLDERS:
        path = dest / name
        if (path.exists() or path.is_symlink()) and not path.is_dir():
            raise DestinationError(f"cannot download into {dest}: {path} is not a folder, and the download keeps "
                                   f"its {name}/ there; move that file, or choose another --dest")


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` (itself included) that does not exist yet, or None."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        missing = folder
    return missing


def folders_to_create(dest: Path) -> list[Path]:
    """The folders a run may create that were not there before it: the outermost missing folder of
    ``dest`` when ``dest`` is new, else those of ``bin-images/``, ``metadata/`` and ``_manifests/`` that
    are missing. ``dest`` is resolved (as :func:`download_abid` writes through it): for ``new/../x``
    that is ``x``."""
    resolved = dest.resolve()
    first = _first_missing(resolved)
    if first is not None:
        return [first]
    return [resolved / name for name in LAYOUT_FOLDERS if not (resolved / name).exists()]


def _is_own_temporary(name: str) -> bool:
    """A temporary file of this process (``.name.tmp-<pid>`` or ``.name.tmp-<pid>-<n>``): another process
    (a shard running beside this one into the same folder) may be about to rename its own."""
    return is_temporary(name) and re.search(rf"{re.escape(TMP_MARKER)}{os.getpid()}(-\d+)?$", name) is not None


def _remove_all_created(created: list[Path]) -> None:
    """Remove what a run that fetched nothing created: its lock files first (it still holds them; a
    run waiting on one sees it unlinked and locks the new file: :func:`~vsbench.io.locks.output_lock`),
    then the folders it made."""
    for path in created:
        if path.name.startswith(LOCK_FILE):
            try:
                path.unlink()
            except OSError:
                pass
    for path in created:
        if not path.name.startswith(LOCK_FILE):
            _remove_created(path)


def _remove_created(root: Path) -> None:
    """Remove what a run that fetched nothing created under ``root`` (a folder it made): empty folders and
    its own temporary files only, deepest first; anything else is left where it is."""
    if not root.is_dir() or root.is_symlink():
        return
    for folder, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            if _is_own_temporary(name):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
        try:
            os.rmdir(folder)
        except OSError:
            pass


def download_abid(
    source: str,
    dest: Path,
    *,
    limit: int | None = None,
    endpoint_url: str | None = None,
    concurrency: int = 64,
    retries: int = 5,
    backoff: float = 0.2,
    progress: bool = True,
    client=None,
    on_result: Callable[[ObjectResult], None] | None = None,
    shard: int = 0,
    num_shards: int = 1,
) -> DownloadSummary:
    """Mirror ``source`` (``s3://bucket[/prefix]``) into ``dest`` in the challenge's layout.

    Returns the summary and writes it, with every failure and its reason, to
    ``dest/_manifests/download.json`` (``download.shard-<i>-of-<n>.json`` for a shard), with the key
    log beside it. ``dest`` is resolved first (the summary records the resolved path). Never raises
    for per-object failures: the caller decides (see :class:`DownloadIncomplete`). A job-wide cause
    found while listing raises :class:`S3AccessError`; SIGTERM or SIGINT raises
    :class:`DownloadInterrupted` after writing the manifest. A run that fails having fetched nothing
    writes no manifest (unless one was there) and removes the folders it created.
    """
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is not in 0..{num_shards - 1}")
    started = time.perf_counter()
    location = parse_s3_uri(source)
    limit_failures, stall = max_connection_failures(), stall_timeout()  # bad settings: refused before anything
    check_destination(dest)
    # Every write goes through the resolved path: writing through "new/../x" would create "new" as well.
    dest = dest.resolve()
    created = folders_to_create(dest)
    # One writer per destination (issue 37): shards of one job share it, each holding its own shard.
    unit = "" if num_shards == 1 else f"download-shard-{shard}-of-{num_shards}"
    # A run that fetches nothing removes the lock file it made; a shard only its own (the folder's is
    # shared with the other shards, which may be holding it).
    own_lock = lock_path(dest, unit)
    if not (own_lock.exists() or own_lock.is_symlink()):
        created.append(own_lock)
    with output_lock(dest) if not unit else step_lock(dest, unit):
        manifest = dest / manifest_name(shard, num_shards)
        had_manifest = manifest.exists()
        log = KeyLog(dest / keys_log_name(shard, num_shards))
        previous = _catch_signals()
        summary: DownloadSummary | None = None
        try:
            try:
                summary = _download(source, location, dest, limit=limit, endpoint_url=endpoint_url,
                                    concurrency=concurrency, retries=retries, backoff=backoff, progress=progress,
                                    client=client, on_result=on_result, shard=shard, num_shards=num_shards,
                                    limit_failures=limit_failures, stall=stall, started=started, log=log)
                _finish(summary, dest, manifest, had_manifest, created, started, log)
                return summary
            except _Signalled as signalled:
                for signum in previous:  # a second signal must not cut the manifest short
                    signal.signal(signum, signal.SIG_IGN)
                summary = getattr(signalled, "summary", None) or summary
                kept = _finish(summary, dest, manifest, had_manifest, created, started, log)
                raise DownloadInterrupted(signalled.signum, summary, kept) from None
            except Exception:  # e.g. a job-wide cause while listing: leave nothing
                log.discard()
                _remove_all_created(created)
                raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _finish(summary: DownloadSummary | None, dest: Path, manifest: Path, had_manifest: bool, created: list[Path],
            started: float, log: KeyLog) -> Path | None:
    """Write the manifest (and name the key log) when ``dest`` holds anything of the run (or had one);
    otherwise remove what the run created. Returns the manifest's path when written."""
    if summary is not None:
        summary.failures.sort(key=lambda item: (item["bin_id"], item["kind"]))
        summary.seconds = round(time.perf_counter() - started, 3)
        if summary.complete or summary.fetched or summary.skipped or had_manifest:
            log.keep()
            summary.keys_log = log.path.relative_to(dest).as_posix()
            atomic_write_json(manifest, summary.as_dict())
            return manifest
    log.discard()
    _remove_all_created(created)
    return None


def _download(source: str, location, dest: Path, *, limit, endpoint_url, concurrency, retries, backoff, progress,
              client, on_result, shard, num_shards, limit_failures, stall, started, log: KeyLog) -> DownloadSummary:

    anonymous = client is None and not has_aws_credentials()
    lister = client or s3_client(endpoint_url)

    def explain(exc: BaseException) -> str | None:
        return explain_s3_error(exc, location.bucket, endpoint_url=endpoint_url, anonymous=anonymous)

    with s3_errors(location.bucket, endpoint_url=endpoint_url, anonymous=anonymous):  # a job-wide cause: one line
        listing = list(iter_s3_objects(lister, location))
    plan, ignored, duplicates, conflicts = plan_objects(listing, location.prefix, limit, shard, num_shards)
    if len(ignored) == len(listing):  # not one ABID key: a wrong bucket or prefix, not an empty shard
        raise S3AccessError(no_abid_objects(source, location.prefix, ignored), 2)  # a wrong bucket or prefix
    summary = DownloadSummary(
        source=source, dest=str(dest), listed_keys=len(listing), ignored_keys=len(ignored),
        duplicate_spellings=duplicates, spelling_conflicts=len(conflicts),
        spelling_conflict_kinds=conflict_kinds(conflicts), planned=len(plan), ignored=ignored[:100],
        conflicts=[asdict(c) for c in conflicts[:MAX_LISTED_CONFLICTS]],
    )

    todo: list[PlannedObject] = []
    damaged: dict[int, str] = {}  # index in ``todo`` -> why the local copy was not kept (only damaged ones)
    for obj in plan:
        local = verify_local(dest / obj.path, obj.size, obj.etag)
        if not local:
            summary.skipped += 1
            log.write(obj, "skipped", "verified against the listing", size=obj.size)
            continue
        if local != "missing":
            damaged[len(todo)] = local
        todo.append(obj)
    answered = bytearray(len(todo))  # 1 where the object has a result (the rest are logged as not tried)

    if anonymous:
        get = AnonymousHttpGetter(endpoint_url, location.bucket, concurrency)
        summary.endpoint = endpoint_url or get.base
    else:
        getter_client = client or s3_client(endpoint_url, max_pool_connections=max(concurrency, 10), attempts=1)
        get = BotoGetter(getter_client, location.bucket)
        summary.endpoint = endpoint_url or getattr(getattr(getter_client, "meta", None), "endpoint_url", "") or ""
    breaker = Breaker(limit_failures, stall)
    fetcher = Fetcher(get, dest, retries, backoff, explain, breaker)
    probe = min(len(todo), PROBE_OBJECTS)
    results: queue.SimpleQueue | None = None

    def drain(first_wait: float | None) -> int:
        """Count the results that are in (waiting ``first_wait`` s for one, or not at all); returns how many."""
        done = []
        try:
            if first_wait is not None:
                done.append(results.get(timeout=first_wait))
            while True:
                done.append(results.get_nowait())
        except queue.Empty:
            pass
        for index, result in done:
            if isinstance(result, BaseException):
                raise result
            if result.status == "stopped":
                continue  # counted with the objects never tried
            answered[index] = 1
            planned = todo[index]
            if result.status == "fetched":
                summary.fetched += 1
                summary.bytes_fetched += result.size
                if index in damaged:
                    summary.refetched += 1
                    log.write(planned, "refetched", f"local copy damaged: {damaged[index]}", result.attempts,
                              result.size)
                else:
                    log.write(planned, "fetched", "", result.attempts, result.size)
            else:
                summary.failed += 1
                summary.failures.append(asdict(result))
                kept = f"; the damaged local copy stays ({damaged[index]})" if index in damaged else ""
                log.write(planned, "failed", result.reason + kept, result.attempts)
            if on_result is not None:
                on_result(result)
            bar.update(1)
        return len(done)

    bar = progress_bar(total=len(todo), desc="download", unit="obj", disable=not progress)
    try:
        with bar:
            fetch_started = time.perf_counter()
            results = start_workers(fetcher, todo, concurrency, fetcher.stop)
            received = 0
            while received < len(todo):
                received += drain(0.25)
                if (not summary.stopped_early and summary.fetched == 0 and summary.failed >= probe
                        and fetcher.causes and all(f["permanent"] for f in summary.failures)):
                    # The first objects all failed for a job-wide cause: the rest would too (1,316
                    # identical 403 lines once); stop and say the cause once.
                    summary.stopped_early = True
                    fetcher.stop.set()
                breaker.check_stall()
                if fetcher.stop.is_set():
                    drain(None)  # objects written just before the stop are counted as fetched
                    break
    except _Signalled as signalled:
        fetcher.stop.set()
        if results is not None:
            drain(None)
        _account(summary, fetcher, breaker, todo, interrupted=signal.Signals(signalled.signum).name)
        _log_not_tried(log, todo, answered, f"the job stopped on {signal.Signals(signalled.signum).name}")
        signalled.summary = summary  # type: ignore[attr-defined]
        raise
    finally:
        fetcher.stop.set()  # no new request starts; those in flight end within the timeouts, unawaited
        if results is not None:
            summary.fetch_seconds = round(time.perf_counter() - fetch_started, 3)
    _account(summary, fetcher, breaker, todo)
    _log_not_tried(log, todo, answered, summary.cause or summary.stopped_by or "the job stopped first")
    return summary


def _log_not_tried(log: KeyLog, todo: list[PlannedObject], answered: bytearray, why: str) -> None:
    for obj, done in zip(todo, answered, strict=True):
        if not done:
            log.write(obj, "not_tried", why)


def _account(summary: DownloadSummary, fetcher: Fetcher, breaker: Breaker, todo: list[PlannedObject],
             interrupted: str = "") -> None:
    """Count the objects never tried and name the job-wide cause (one line), if any."""
    if fetcher.causes and (summary.fetched == 0 or summary.stopped_early):
        summary.cause = "; ".join(fetcher.causes)
    summary.not_tried = len(todo) - summary.fetched - summary.failed
    summary.failed += summary.not_tried
    if summary.stopped_early and summary.not_tried:
        summary.cause += f" ({summary.not_tried} more objects not tried)"
    elif interrupted:
        summary.stopped_by = interrupted
    elif breaker.tripped and summary.not_tried:
        summary.stopped_by = breaker.tripped
        if breaker.tripped == "breaker":
            what = f"{breaker.what} on {breaker.tripped_at} requests in a row ({breaker.detail})"
        else:
            what = (f"answered nothing for {breaker.stall:g} s (VSBENCH_S3_STALL_TIMEOUT) with requests in flight "
                    f"({'last: ' + breaker.what if breaker.what else 'none had timed out yet'})")
        summary.cause = (f"the S3 endpoint {summary.endpoint} {what}; stopped with {summary.fetched:,} of "
                         f"{len(todo):,} objects fetched and {summary.not_tried:,} not tried: check --endpoint-url "
                         "and the network, then run the same command again to resume")


def manifest_name(shard: int = 0, num_shards: int = 1) -> str:
    return MANIFEST_NAME if num_shards == 1 else f"_manifests/download.shard-{shard}-of-{num_shards}.json"
