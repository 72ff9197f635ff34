"""Download ABID from S3: many requests in flight, verified, resumable, atomic.

The real bucket (``s3://aft-vbi-pds``) serves ~1M small objects; throughput is bound by request
latency, not bandwidth, so a plain loop (one request in flight) is the slow way. We list once,
plan every object, skip the ones already on disk and verified (size, plus MD5 against the ETag
when the ETag is a plain MD5), and fetch the rest from a thread pool with retries and backoff.
Each object is written through a temporary file and renamed, so a killed run never leaves a
partial file under a final name; the next run simply fetches what is missing or wrong.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vsbench.abid.ids import AbidKey, parse_key, relative_path
from vsbench.storage import (
    S3AccessError,
    atomic_write_bytes,
    atomic_write_json,
    explain_s3_error,
    has_aws_credentials,
    iter_s3_objects,
    parse_s3_uri,
    s3_client,
)

PUBLIC_SOURCE = "s3://aft-vbi-pds"
PROBE_OBJECTS = 20  # when this many first objects all fail for one job-wide cause, the rest are not tried
MANIFEST_NAME = "_manifests/download.json"
MAX_LISTED_CONFLICTS = 10_000  # bounds the manifest; the count is always exact
KEEP_RULE = "the unpadded key is the canonical spelling (the challenge's ids are integers)"


@dataclass(frozen=True)
class SpellingConflict:
    """Two spellings of one id (``bin-images/00123.jpg`` and ``bin-images/123.jpg``) whose listed
    size or ETag differ: not the same object twice, so which one was kept is written down."""

    bin_id: int
    kind: str
    kept: dict[str, Any]  # key, size, etag
    dropped: list[dict[str, Any]]  # key, size, etag of each other spelling that differs
    reason: str = KEEP_RULE


def _listed(key: AbidKey, obj: dict[str, Any]) -> dict[str, Any]:
    return {"key": key.key, "size": obj["Size"], "etag": obj["ETag"]}


@dataclass(frozen=True)
class PlannedObject:
    """One object to have on disk: the chosen source key and where it lands."""

    bin_id: int
    kind: str
    key: str
    size: int
    etag: str
    path: str  # relative to the destination root
    alternate_keys: tuple[str, ...] = ()


@dataclass
class ObjectResult:
    bin_id: int
    kind: str
    key: str
    path: str
    size: int
    status: str  # fetched | skipped | failed
    attempts: int = 0
    reason: str = ""
    permanent: bool = False  # an answer that retrying cannot change (denied, not found)


@dataclass
class DownloadSummary:
    source: str
    dest: str
    listed_keys: int = 0
    ignored_keys: int = 0
    duplicate_spellings: int = 0  # keys dropped as another spelling of an id, with the same size and ETag
    spelling_conflicts: int = 0  # ids whose spellings differ in size or ETag (listed in ``conflicts``)
    planned: int = 0
    fetched: int = 0
    skipped: int = 0
    failed: int = 0
    bytes_fetched: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    cause: str = ""  # one line naming a job-wide cause and its fix (access denied, ...); "" when none
    stopped_early: bool = False  # the first objects all failed for ``cause``: the rest were not tried

    @property
    def complete(self) -> bool:
        return self.failed == 0

    @property
    def resumable(self) -> bool:
        """Whether running again can help: every failure was transient (network, timeouts, 5xx)."""
        return not self.cause and not any(f.get("permanent") for f in self.failures)

    def advice(self) -> str:
        """One line for a user: the cause and its fix, or what a re-run would do."""
        if self.cause:
            return self.cause
        permanent = sum(1 for f in self.failures if f.get("permanent"))
        if permanent:
            return (f"{self.failed} objects failed, {permanent} of them for good (denied or gone; see the "
                    "manifest); running again fetches only the transient ones")
        return f"{self.failed} objects failed on transient errors; run the same command again to resume"

    def conflict_warning(self, manifest: str = MANIFEST_NAME) -> str:
        """One line for all spelling conflicts ("" when none): how many, a few ids, where the list is."""
        if not self.spelling_conflicts:
            return ""
        shown = ", ".join(f"{c['kind']} {c['bin_id']}" for c in self.conflicts[:5])
        more = f" and {self.spelling_conflicts - 5} more" if self.spelling_conflicts > 5 else ""
        return (f"warning: {self.spelling_conflicts} ids have two spellings with different contents ({shown}{more}); "
                f"kept the unpadded key of each ({KEEP_RULE.split(' (')[0]}); both keys, sizes and ETags are "
                f"under 'conflicts' in {manifest}")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["complete"] = self.complete
        data["objects_per_second"] = round(self.fetched / self.seconds, 2) if self.seconds else 0.0
        return data


class DownloadIncomplete(RuntimeError):
    """Raised by callers that require a complete download; carries the summary."""

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
    conflicts: list[SpellingConflict] = []
    for (bin_id, kind), spellings in sorted(by_id.items()):
        if (keep_ids is not None and bin_id not in keep_ids) or bin_id % num_shards != shard:
            continue
        spellings.sort(key=lambda item: (item[0].padded, item[0].key))
        chosen, obj = spellings[0]
        differing = [_listed(key, other) for key, other in spellings[1:]
                     if (other["Size"], other["ETag"]) != (obj["Size"], obj["ETag"])]
        duplicates += len(spellings) - 1 - len(differing)
        if differing:
            conflicts.append(SpellingConflict(bin_id, kind, _listed(chosen, obj), differing))
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
    return plan, ignored, duplicates, conflicts


def _etag_is_md5(etag: str) -> bool:
    return len(etag) == 32 and "-" not in etag and all(c in "0123456789abcdef" for c in etag.lower())


def verify_bytes(data: bytes, size: int, etag: str) -> str:
    """Return "" when ``data`` matches the listing, else the reason it does not."""
    if len(data) != size:
        return f"size {len(data)} != listed {size}"
    if _etag_is_md5(etag) and hashlib.md5(data, usedforsecurity=False).hexdigest() != etag.lower():
        return "md5 does not match the ETag"
    return ""


def verify_local(path: Path, size: int, etag: str) -> str:
    """Like :func:`verify_bytes` for a file already on disk; "" means complete and intact."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return "missing"
    if stat.st_size != size:
        return f"size {stat.st_size} != listed {size}"
    if _etag_is_md5(etag):
        return verify_bytes(path.read_bytes(), size, etag)
    return ""


class PermanentFetchError(RuntimeError):
    """An answer that retrying cannot change (no such key, access denied), with its HTTP status."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.response = {"Error": {"Code": str(status or "")}, "ResponseMetadata": {"HTTPStatusCode": status}}


class _BotoGetter:
    """GET through boto3: signed requests, or an explicitly given client."""

    def __init__(self, client, bucket: str) -> None:
        self.client, self.bucket = client, bucket

    def __call__(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


class _AnonymousHttpGetter:
    """Unsigned GETs over one urllib3 connection pool.

    For a public bucket there is nothing to sign, and botocore's per-request machinery (request
    building, handlers, response parsing) is most of a small object's client CPU; a plain pooled
    GET costs about half (bench/download.py). Truncated bodies raise (enforced Content-Length)
    and are retried like any transient error.
    """

    def __init__(self, endpoint_url: str | None, bucket: str, connections: int) -> None:
        import urllib3

        base = endpoint_url.rstrip("/") + f"/{bucket}" if endpoint_url else f"https://{bucket}.s3.amazonaws.com"
        self.base = base
        self.pool = urllib3.PoolManager(maxsize=connections, retries=False,
                                        timeout=urllib3.Timeout(connect=10, read=60))

    def __call__(self, key: str) -> bytes:
        from urllib.parse import quote

        response = self.pool.request("GET", f"{self.base}/{quote(key, safe='/')}", preload_content=True,
                                     enforce_content_length=True)
        if response.status == 200:
            return response.data
        reason = f"HTTP {response.status}: {response.data[:200].decode('utf-8', 'replace')}"
        if response.status in (403, 404):
            raise PermanentFetchError(reason, response.status)
        raise RuntimeError(reason)


class _Fetcher:
    """Fetch one object with bounded, jittered exponential backoff."""

    def __init__(self, get, dest: Path, retries: int, backoff: float,
                 explain: Callable[[BaseException], str | None] = lambda exc: None) -> None:
        self.get = get
        self.dest = dest
        self.retries = retries
        self.backoff = backoff
        self.explain = explain
        self.causes: list[str] = []  # job-wide causes met (first one kept per kind)
        self._lock = threading.Lock()

    def fatal(self, exc: BaseException) -> bool:
        """Errors that name a job-wide cause although not an HTTP answer (no credentials, no endpoint)."""
        from botocore import exceptions as boto

        return isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError | boto.EndpointConnectionError)

    def note_permanent(self, exc: BaseException) -> None:
        cause = self.explain(exc)
        if cause:
            with self._lock:
                if cause not in self.causes:
                    self.causes.append(cause)

    def __call__(self, obj: PlannedObject) -> ObjectResult:
        target = self.dest / obj.path
        reason = ""
        for attempt in range(1, self.retries + 1):
            try:
                data = self.get(obj.key)
                reason = verify_bytes(data, obj.size, obj.etag)
                if not reason:
                    atomic_write_bytes(target, data)
                    return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, len(data), "fetched", attempt)
            except Exception as exc:  # noqa: BLE001 - every failure is retried, then reported
                reason = _describe(exc)
                if _is_permanent(exc):
                    self.note_permanent(exc)
                    return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "failed", attempt, reason,
                                        permanent=True)
                if self.fatal(exc):  # a wrong endpoint or missing credentials: no retry can help
                    self.note_permanent(exc)
                    return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "failed", attempt, reason,
                                        permanent=True)
            if attempt < self.retries:
                time.sleep(self.backoff * (2 ** (attempt - 1)) * (0.5 + random.random()))
        return ObjectResult(obj.bin_id, obj.kind, obj.key, obj.path, 0, "failed", self.retries, reason)


def _describe(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        return f"{error.get('Code', type(exc).__name__)}: {error.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


def _is_permanent(exc: Exception) -> bool:
    if isinstance(exc, PermanentFetchError):
        return True
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code", "") if isinstance(response, dict) else ""
    return code in {"NoSuchKey", "AccessDenied", "NoSuchBucket", "403", "404"}


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
    ``dest/_manifests/download.json`` (``download.shard-<i>-of-<n>.json`` for a shard). Never raises
    for per-object failures: the caller decides (see :class:`DownloadIncomplete`).
    """
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is not in 0..{num_shards - 1}")
    from tqdm.auto import tqdm

    started = time.perf_counter()
    location = parse_s3_uri(source)
    anonymous = client is None and not has_aws_credentials()
    client = client or s3_client(endpoint_url, max_pool_connections=max(concurrency, 10))
    dest.mkdir(parents=True, exist_ok=True)

    def explain(exc: BaseException) -> str | None:
        return explain_s3_error(exc, location.bucket, endpoint_url=endpoint_url, anonymous=anonymous)

    try:
        listing = list(iter_s3_objects(client, location))
    except Exception as exc:  # noqa: BLE001 - a job-wide cause is said once; anything else propagates
        cause = explain(exc)
        if cause is None:
            raise
        raise S3AccessError(cause) from None
    plan, ignored, duplicates, conflicts = plan_objects(listing, location.prefix, limit, shard, num_shards)
    summary = DownloadSummary(
        source=source, dest=str(dest), listed_keys=len(listing), ignored_keys=len(ignored),
        duplicate_spellings=duplicates, spelling_conflicts=len(conflicts), planned=len(plan), ignored=ignored[:100],
        conflicts=[asdict(c) for c in conflicts[:MAX_LISTED_CONFLICTS]],
    )

    todo: list[PlannedObject] = []
    for obj in plan:
        if verify_local(dest / obj.path, obj.size, obj.etag):
            todo.append(obj)
        else:
            summary.skipped += 1

    lock = threading.Lock()
    get = (_AnonymousHttpGetter(endpoint_url, location.bucket, concurrency) if anonymous
           else _BotoGetter(client, location.bucket))
    fetcher = _Fetcher(get, dest, retries, backoff, explain)
    probe = min(len(todo), PROBE_OBJECTS)
    with tqdm(total=len(todo), desc="download", unit="obj", disable=not progress) as bar:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futures = [pool.submit(fetcher, obj) for obj in todo]
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                result = future.result()
                with lock:
                    if result.status == "fetched":
                        summary.fetched += 1
                        summary.bytes_fetched += result.size
                    else:
                        summary.failed += 1
                        summary.failures.append(asdict(result))
                if on_result is not None:
                    on_result(result)
                bar.update(1)
                if (not summary.stopped_early and summary.fetched == 0 and summary.failed >= probe
                        and fetcher.causes and all(f["permanent"] for f in summary.failures)):
                    # The first objects all failed for a job-wide cause: the rest would too (1,316
                    # identical 403 lines once); stop and say the cause once.
                    summary.stopped_early = True
                    for pending in futures:
                        pending.cancel()
    if fetcher.causes and (summary.fetched == 0 or summary.stopped_early):
        summary.cause = "; ".join(fetcher.causes)
    not_tried = len(todo) - summary.fetched - summary.failed
    if summary.stopped_early and not_tried:
        summary.cause += f" ({not_tried} more objects not tried)"
        summary.failed += not_tried

    summary.failures.sort(key=lambda item: (item["bin_id"], item["kind"]))
    summary.seconds = round(time.perf_counter() - started, 3)
    atomic_write_json(dest / manifest_name(shard, num_shards), summary.as_dict())
    return summary


def manifest_name(shard: int = 0, num_shards: int = 1) -> str:
    return MANIFEST_NAME if num_shards == 1 else f"_manifests/download.shard-{shard}-of-{num_shards}.json"
