"""Storage helpers: s3:// and local URIs, atomic writes, safe paths.

Every file vsbench writes goes through :func:`atomic_write_bytes` (or a wrapper), so a reader
never sees a partial file under its final name: a crash leaves at most a ``.tmp-*`` sibling,
which the next run ignores and overwrites.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from vsbench.io.inputs import WordedInputError

TMP_MARKER = ".tmp-"
DIGEST_BLOCK = 8 << 20  # bytes hashed per read: large enough that the hash, not the calls, costs the time


SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # how vsbench writes every sha256 it keeps or checks (fullmatch it)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 hex of a file's bytes, read in blocks (memory stays small whatever the file's size).
    Every digest vsbench records of a file of its own (embed shards, index files, search results)
    is this one, so a record written by one step is checked by another the same way."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while block := handle.read(DIGEST_BLOCK):
            digest.update(block)
    return digest.hexdigest()


VERIFIED_JSON = ".verified.json"


def sha256_matches(path: Path, sha256: str) -> bool:
    """Whether ``path``'s bytes hash to ``sha256``, hashing only when the file is not the one last
    verified: the folder's ``.verified.json`` holds, per file, the stat record (:func:`stat_record`)
    it had when its bytes last hashed to the recorded digest. Any write, truncation, swap or rename
    changes that record (the ctime cannot be set back), so it stands for the file's bytes the way
    git's index does; hashing a 256 MB index shard on every search task was a quarter of the
    search's time (bench/integrity.py), and every fill task of a 10 GB gallery would read it all
    again. With ``VSBENCH_VERIFY_INPUTS=full`` (:func:`stat_trusted`) the file is hashed every time."""
    stat = path.stat()
    if stat_trusted() and _read_verified(path.parent).get(path.name) == [*stat_record(stat), sha256]:
        return True
    if file_sha256(path) != sha256:
        return False
    remember_verified(path, sha256)
    return True


StatRecord = tuple[int, int, int, int, int]
VERIFY_INPUTS_ENV = "VSBENCH_VERIFY_INPUTS"
VERIFY_MODES = ("stat", "full")


def stat_record(stat: os.stat_result) -> StatRecord:
    """(device, inode, size, mtime_ns, ctime_ns): what changes whenever a file's bytes or identity do.

    The device makes the record unique per filesystem object: (inode, size, mtime, ctime) alone can
    be equal for two files on two volumes built from similar folders (issue 46). A device number
    that is not stable (some network or overlay filesystems renumber on remount) only costs a
    re-hash. Inode generations would say more but are not portable (no ``os.stat`` field)."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def verify_inputs_mode() -> str:
    """``stat`` (an unchanged stat record stands for unchanged bytes: the default) or ``full``
    (every file hashed again), from ``VSBENCH_VERIFY_INPUTS``; ``--verify-inputs`` sets it for the
    process, so subprocess and container steps inherit it. Raises ValueError (one line naming the
    variable and the valid values) for anything else."""
    raw = os.environ.get(VERIFY_INPUTS_ENV, "").strip()
    if not raw:
        return "stat"
    if raw not in VERIFY_MODES:
        raise ValueError(f"{VERIFY_INPUTS_ENV}={raw[:100]!r} is not one of {', '.join(VERIFY_MODES)} "
                         "(--verify-inputs sets it; full hashes every input again)")
    return raw


def use_verify_inputs(mode: str, name: str = "verify_inputs") -> None:
    """Set the mode for this process and the steps it starts (a pipeline component's ``verify_inputs``
    parameter; "" leaves the environment's). Raises ValueError naming ``name`` and the valid values."""
    if mode:
        os.environ[VERIFY_INPUTS_ENV] = checked_verify_inputs(mode, name)


def checked_verify_inputs(mode: str, name: str = "verify_inputs") -> str:
    """``mode`` when it is one of :data:`VERIFY_MODES`; else ValueError naming ``name`` and them."""
    if mode not in VERIFY_MODES:
        raise ValueError(f"{name}: {str(mode)[:100]!r} is not one of {', '.join(VERIFY_MODES)}")
    return mode


def stat_trusted() -> bool:
    """Whether a remembered stat record may stand for a file's bytes (:func:`verify_inputs_mode`)."""
    return verify_inputs_mode() == "stat"


def _read_verified(folder: Path) -> dict[str, Any]:
    """The folder's record of verified files; anything unreadable is no record (files are hashed)."""
    try:
        verified = json.loads((folder / VERIFIED_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return verified if isinstance(verified, dict) else {}


def remember_verified(path: Path, sha256: str) -> None:
    """Record that ``path``, as it stands now, hashed to ``sha256`` (best effort: a read-only
    volume only costs the next reader a hash)."""
    try:
        verified = _read_verified(path.parent)
        verified[path.name] = [*stat_record(path.stat()), sha256]
        atomic_write_json(path.parent / VERIFIED_JSON, verified)
    except OSError:
        pass


def _file_mode() -> int:
    """The mode a plain ``open()`` would give under the current umask (mkstemp makes 0600 files,
    which other pods or users sharing a data volume could not read)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_TMP_COUNTER = itertools.count()
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


class UnsafePathError(WordedInputError):
    """A dataset-supplied relative path tried to leave its root (``..``, absolute, or empty)."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading slash; either "" or ends with "/"

    def key(self, relative: str) -> str:
        return f"{self.prefix}{relative}"

    def uri(self, relative: str = "") -> str:
        return f"s3://{self.bucket}/{self.prefix}{relative}"


def is_s3_uri(uri: str | os.PathLike[str]) -> bool:
    return str(uri).startswith("s3://")


def parse_s3_uri(uri: str) -> S3Location:
    """``s3://bucket/some/prefix`` -> S3Location("bucket", "some/prefix/")."""
    if not is_s3_uri(uri):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"s3 URI without a bucket: {uri!r}")
    prefix = prefix.strip("/")
    return S3Location(bucket, f"{prefix}/" if prefix else "")


def local_path(uri: str | os.PathLike[str]) -> Path:
    """Accept ``file:///x``, ``/x`` or ``x``; refuse s3:// (the caller must download first)."""
    text = str(uri)
    if is_s3_uri(text):
        raise ValueError(f"expected a local path, got {text!r}")
    text = text.removeprefix("file://")
    return Path(text)


def safe_join(root: Path, relative: str) -> Path:
    """Join a path taken from a dataset file under ``root``, refusing anything that escapes it."""
    if not relative or relative.strip() == "":
        raise UnsafePathError("empty path")
    pure = PurePosixPath(relative.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts:
        raise UnsafePathError(f"path escapes the dataset root: {relative!r}")
    return root.joinpath(*pure.parts)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary sibling and an atomic rename.

    The temporary's name is unique to this process (pid and a counter) and created with
    ``O_EXCL``, so the common case is one open, one write and one rename: the resize step writes
    one small file per image, and mkstemp's random names, a mkdir per call and a separate chmod
    were ~5% of its time per image (a file object and ``Path`` arithmetic another ~2%: plain
    ``os`` calls on strings here). The mode follows the umask, as a plain ``open()``'s.
    """
    atomic_write_chunks(path, (data,), fsync=fsync)


def atomic_write_chunks(path: str | os.PathLike[str], chunks: Iterable[bytes], *, fsync: bool = False) -> None:
    """:func:`atomic_write_bytes` for content made piece by piece, so it is never whole in memory.

    A chunk producer that raises leaves no file under ``path`` (the temporary is removed).
    """
    with _temporary_sibling(path, fsync) as fd:
        for chunk in chunks:
            _write_all(fd, chunk)


class HashingWriter:
    """A write-only binary file over a descriptor that keeps the SHA-256 and the count of the bytes
    it was given: the digest of exactly what was written, from the same bytes."""

    closed = False

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._sha256 = hashlib.sha256()
        self._size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        _write_all(self._fd, view)  # type: ignore[arg-type]
        self._sha256.update(view)
        self._size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self._size

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        return None

    def close(self) -> None:  # the descriptor is :func:`atomic_writer`'s to close
        return None

    def hexdigest(self) -> str:
        return self._sha256.hexdigest()


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, fsync: bool = False) -> Iterator[HashingWriter]:
    """:func:`atomic_write_chunks` for a writer that pushes its bytes (pyarrow's Parquet writer): a
    :class:`HashingWriter` whose bytes land under ``path`` when the block ends, or are removed when
    it raises. Why: a unit file made in memory first was held twice (the writer's growing buffer,
    then its copy as ``bytes``), ~100 MB at a million queries (issue 54)."""
    with _temporary_sibling(path, fsync) as fd:
        yield HashingWriter(fd)


@contextlib.contextmanager
def _temporary_sibling(path: str | os.PathLike[str], fsync: bool) -> Iterator[int]:
    """A descriptor on a new temporary sibling of ``path``, renamed over ``path`` when the block
    ends (after an fsync when asked), removed when it raises."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    folder = folder or "."
    tmp = os.path.join(folder, f".{name}{TMP_MARKER}{os.getpid()}-{next(_TMP_COUNTER)}")
    with naming(path):
        try:
            fd = os.open(tmp, _TMP_FLAGS, 0o666)
        except FileNotFoundError:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, _TMP_FLAGS, 0o666)
        except FileExistsError:  # left by a dead process that had this pid: a random name instead
            fd, tmp = tempfile.mkstemp(prefix=f".{name}{TMP_MARKER}", dir=folder)
            os.fchmod(fd, _file_mode())
        try:
            try:
                yield fd
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError while writing ``path`` names ``path``: not its temporary sibling (``--out`` given
    as a file was reported through a ``.name.tmp-...`` the user never made), and not nothing (a full
    disk raises ENOSPC from ``write`` with no file name, which read "unexpected OSError"). The
    error keeps its type (errno), so callers that tell ENOENT from ENOSPC still can."""
    try:
        yield
    except OSError as exc:
        named = exc.filename
        if named is not None and not is_temporary(os.path.basename(os.fspath(named))):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may be partial)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any, *, indent: int | None = 2) -> None:
    """Deterministic JSON (sorted keys off: we keep insertion order, which is ours to control)."""
    atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def is_temporary(name: str) -> bool:
    return TMP_MARKER in name and name.startswith(".")


def _unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def has_aws_credentials() -> bool:
    """Whether boto3 finds credentials (environment, config files, an attached role)."""
    import boto3

    return boto3.session.Session().get_credentials() is not None


S3_CONNECT_TIMEOUT_S = 5.0  # VSBENCH_S3_CONNECT_TIMEOUT: a TCP (and TLS) handshake with S3 takes milliseconds
S3_READ_TIMEOUT_S = 15.0  # VSBENCH_S3_READ_TIMEOUT: longest wait for any byte of an answer (S3's first byte: < 1 s)
S3_LIST_ATTEMPTS = 3  # VSBENCH_S3_LIST_ATTEMPTS: tries of one listing page (botocore's standard retries)


def _env_number(name: str, default: float, what: str, *, integer: bool = False) -> float:
    """A positive number from the environment, or the default; a bad value is one line naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw.replace("_", ""))
    except ValueError:
        raise ValueError(f"{name}={raw[:100]!r} is not a number of {what}") from None
    if not value > 0 or value == float("inf") or (integer and value != int(value)):
        raise ValueError(f"{name}={raw[:100]!r} must be a positive {'whole ' if integer else ''}number of {what}")
    return int(value) if integer else value


def s3_connect_timeout() -> float:
    """Seconds to wait for a connection to the S3 endpoint: ``VSBENCH_S3_CONNECT_TIMEOUT`` (5)."""
    return _env_number("VSBENCH_S3_CONNECT_TIMEOUT", S3_CONNECT_TIMEOUT_S, "seconds")


def s3_read_timeout() -> float:
    """Seconds to wait for any byte of an S3 answer: ``VSBENCH_S3_READ_TIMEOUT`` (15)."""
    return _env_number("VSBENCH_S3_READ_TIMEOUT", S3_READ_TIMEOUT_S, "seconds")


def s3_list_attempts() -> int:
    """Tries of each listing request (and other single S3 calls): ``VSBENCH_S3_LIST_ATTEMPTS`` (3)."""
    return int(_env_number("VSBENCH_S3_LIST_ATTEMPTS", S3_LIST_ATTEMPTS, "tries", integer=True))


def s3_client(endpoint_url: str | None = None, *, max_pool_connections: int = 64, unsigned: bool | None = None,
              attempts: int | None = None):
    """A boto3 S3 client: signed when the environment has credentials, anonymous otherwise.

    The real ABID bucket is public, so anonymous reads are the default that always works;
    credentials are only ever taken from the environment (or an attached role), never from
    arguments, so no secret ends up in a pipeline spec or a log.

    Timeouts suit S3, not botocore's defaults (60 s each): a dead or silent endpoint costs seconds
    per request (``VSBENCH_S3_CONNECT_TIMEOUT``, ``VSBENCH_S3_READ_TIMEOUT``). ``attempts`` is the
    number of tries per call (default ``VSBENCH_S3_LIST_ATTEMPTS``); the downloader's GETs pass 1 and
    retry themselves, with their own accounting.
    """
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    session = boto3.session.Session()
    if unsigned is None:
        unsigned = not has_aws_credentials()
    config = Config(
        signature_version=UNSIGNED if unsigned else None,
        max_pool_connections=max_pool_connections,
        retries={"max_attempts": attempts or s3_list_attempts(), "mode": "standard"},
        connect_timeout=s3_connect_timeout(),
        read_timeout=s3_read_timeout(),
    )
    region = session.region_name or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return session.client("s3", endpoint_url=endpoint_url, config=config, region_name=region)


class S3AccessError(RuntimeError):
    """S3 refused the whole job for one reason (access denied, no bucket, no or bad credentials,
    wrong endpoint or region): the message is one line naming the cause and the fix. Running the
    same command again cannot help, unlike a transient failure. ``exit_code`` is 2 where what the
    user typed is wrong (an endpoint that is not S3, a bucket that does not exist), else 1."""

    one_line = True  # an expected failure: its message says all (the CLI prints no traceback)

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _error_code(exc: BaseException) -> tuple[str, int | None]:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return "", None
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, status


def explain_s3_error(exc: BaseException, bucket: str, *, endpoint_url: str | None, anonymous: bool) -> str | None:
    """One line naming the cause of a job-wide S3 failure and its fix, or None when ``exc`` is not
    one (a transient network error, or a problem of one object)."""
    from botocore import exceptions as boto

    where = f"s3://{bucket}" + (f" at {endpoint_url}" if endpoint_url else "")
    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        return (f"no AWS credentials found for {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "(or AWS_PROFILE), or read a public bucket anonymously by setting none")
    if isinstance(exc, boto.ConnectTimeoutError):
        return (f"the S3 endpoint {_endpoint_of(exc, endpoint_url)} accepted no connection within "
                f"{s3_connect_timeout():g} s (VSBENCH_S3_CONNECT_TIMEOUT): check --endpoint-url (scheme, host and "
                "port) and the network")
    if isinstance(exc, boto.EndpointConnectionError):
        return (f"cannot connect to the S3 endpoint {_endpoint_of(exc, endpoint_url)}: "
                "check --endpoint-url (scheme, host and port) and the network")
    if isinstance(exc, boto.ReadTimeoutError):
        return (f"the S3 endpoint {_endpoint_of(exc, endpoint_url)} sent no answer within {s3_read_timeout():g} s "
                f"(VSBENCH_S3_READ_TIMEOUT) for s3://{bucket}, {s3_list_attempts()} tries "
                "(VSBENCH_S3_LIST_ATTEMPTS): check --endpoint-url and the network, then run the same command again")
    if isinstance(exc, boto.ConnectionClosedError | boto.ResponseStreamingError | boto.IncompleteReadError):
        return (f"the S3 endpoint {_endpoint_of(exc, endpoint_url)} closed the connection before answering for "
                f"s3://{bucket} ({str(exc)[:100]}), {s3_list_attempts()} tries (VSBENCH_S3_LIST_ATTEMPTS): check "
                "--endpoint-url and the network, then run the same command again")
    code, status = _error_code(exc)
    if code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
        if anonymous:
            return (f"the bucket {where} refused anonymous reads (HTTP 403 AccessDenied): set AWS credentials "
                    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE) or check the bucket policy")
        return (f"the bucket {where} refused these credentials (HTTP 403 AccessDenied): check that their IAM "
                "policy and the bucket policy allow s3:ListBucket and s3:GetObject")
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"):
        return (f"{where} rejected the credentials ({code}): check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
                "and AWS_SESSION_TOKEN")
    if code == "NoSuchBucket":
        return f"the bucket {where} does not exist: check the s3:// URI (and --endpoint-url for a non-AWS store)"
    if code in ("PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException",
                "301") or status == 301:
        return (f"the bucket {where} is in another region than the client's ({code or 'HTTP 301'}): set "
                "AWS_DEFAULT_REGION (or AWS_REGION) to the bucket's region")
    return None


def _not_s3(exc: BaseException, bucket: str, endpoint_url: str | None) -> str | None:
    """One line when the endpoint answered, but not as S3 does: an HTTP error with no S3 error code in
    its body (a plain web server's bare 404 or 501), or a body that is not S3's XML. A real S3 (AWS,
    MinIO, moto) always names its error (``NoSuchBucket``), so this is a wrong ``--endpoint-url``."""
    from botocore.parsers import ResponseParserError

    where = _endpoint_of(exc, endpoint_url)
    fix = (f"check --endpoint-url (the S3 API's URL, e.g. http://host:9000 for MinIO) and that the bucket "
           f"{bucket!r} is served there")
    if isinstance(exc, ResponseParserError):
        return f"the endpoint {where} answered for s3://{bucket} with something that is not S3's XML: {fix}"
    if isinstance(exc, RecursionError) and endpoint_url:  # botocore follows a web server's 301s to a bucket region
        return (f"the endpoint {where} redirected every request for s3://{bucket} (HTTP 301 with no region): it is "
                f"not an S3 endpoint; {fix}")
    code, status = _error_code(exc)
    operation = getattr(exc, "operation_name", "") or "the request"
    if isinstance(status, int) and status >= 400 and (not code or code.isdigit()):
        return (f"the endpoint {where} answered {operation} on s3://{bucket} with a bare HTTP {status} (no S3 "
                f"error code): it is not an S3 endpoint, or not one serving this bucket; {fix}")
    return None


def s3_access_error(exc: BaseException, bucket: str, *, endpoint_url: str | None,
                    anonymous: bool) -> S3AccessError | None:
    """The job-wide cause behind ``exc`` or any error it wraps (boto3's S3UploadFailedError wraps the
    ClientError), as an :class:`S3AccessError`; None when there is none (a transient error, a bug).
    For bucket-wide calls (a listing, an upload), where an answer that is not S3's means the endpoint."""
    for inner in exception_chain(exc):
        cause = explain_s3_error(inner, bucket, endpoint_url=endpoint_url, anonymous=anonymous)
        if cause:
            return S3AccessError(cause, 2 if _error_code(inner)[0] == "NoSuchBucket" else 1)
        cause = _not_s3(inner, bucket, endpoint_url)
        if cause:
            return S3AccessError(cause, 2)
    return None


@contextmanager
def s3_errors(bucket: str, *, endpoint_url: str | None, anonymous: bool) -> Iterator[None]:
    """Every S3 call that concerns the whole bucket runs in here: a job-wide cause (wrong endpoint,
    no bucket, denied, no connection) becomes one :class:`S3AccessError` line naming the endpoint or
    bucket and the fix; anything else propagates unchanged."""
    try:
        yield
    except S3AccessError:
        raise
    except Exception as exc:  # noqa: BLE001 - explained, or raised unchanged
        error = s3_access_error(exc, bucket, endpoint_url=endpoint_url, anonymous=anonymous)
        if error is None:
            raise
        raise error from None


def exception_chain(exc: BaseException, depth: int = 4) -> list[BaseException]:
    """``exc`` and the errors it wraps (arguments, botocore's ``error`` keyword, causes), a few levels deep."""
    found: list[BaseException] = []
    todo = [exc]
    while todo and len(found) < 4 * depth:
        current = todo.pop(0)
        if current is None or any(current is seen for seen in found):
            continue
        found.append(current)
        kwargs = getattr(current, "kwargs", None)
        wrapped = [kwargs.get("error")] if isinstance(kwargs, dict) else []
        todo += [arg for arg in (*current.args, *wrapped, current.__cause__, current.__context__)
                 if isinstance(arg, BaseException)]
    return found


def _endpoint_of(exc: BaseException, endpoint_url: str | None) -> str:
    kwargs = getattr(exc, "kwargs", {}) or {}
    url = kwargs.get("endpoint_url") or endpoint_url or "https://s3.amazonaws.com"
    if "://" in url:  # botocore names the whole request URL: keep the scheme and host
        scheme, _, rest = url.partition("://")
        url = f"{scheme}://{rest.split('/', 1)[0]}"
    return url


def iter_s3_objects(client, location: S3Location, sub_prefix: str = "") -> Iterator[dict[str, Any]]:
    """Yield ``{"Key", "Size", "ETag"}`` for every object under ``location.prefix + sub_prefix``."""
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=location.bucket, Prefix=location.key(sub_prefix)):
        for obj in page.get("Contents", []):
            yield {"Key": obj["Key"], "Size": int(obj["Size"]), "ETag": obj.get("ETag", "").strip('"')}


def upload_tree(local_dir: Path, uri: str, client, *, workers: int = 16, endpoint_url: str | None = None,
                anonymous: bool = False) -> int:
    """Upload every file under ``local_dir`` to the s3:// ``uri``; returns the number uploaded.

    The first failure stops the uploads not yet started; one with a job-wide cause (an endpoint that
    is not S3 or not there, no bucket, denied) is one :class:`S3AccessError` line naming it."""
    from concurrent.futures import ThreadPoolExecutor

    location = parse_s3_uri(uri)
    files = [p for p in sorted(local_dir.rglob("*")) if p.is_file() and not is_temporary(p.name)]

    def put(path: Path) -> None:
        key = location.key(path.relative_to(local_dir).as_posix())
        client.upload_file(str(path), location.bucket, key)

    endpoint_url = endpoint_url or getattr(getattr(client, "meta", None), "endpoint_url", None)
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        with s3_errors(location.bucket, endpoint_url=endpoint_url, anonymous=anonymous):
            for future in [pool.submit(put, path) for path in files]:
                future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return len(files)
