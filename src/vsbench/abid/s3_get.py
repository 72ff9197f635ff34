"""One object's GET from S3 and how its failure is worded: the two getters (boto3 for signed requests,
plain pooled HTTP for anonymous ones), which failures no retry changes, and which mean that no answer
came at all (the downloader's circuit breaker counts those). Split from :mod:`vsbench.abid.download`,
which plans, schedules and accounts for the objects."""

from __future__ import annotations

import re

from vsbench.io.storage import exception_chain, s3_connect_timeout, s3_read_timeout


class PermanentFetchError(RuntimeError):
    """An answer that retrying cannot change (no such key, access denied), with its HTTP status and
    S3 error code (``NoSuchKey``; the status when the body names none)."""

    def __init__(self, reason: str, status: int | None = None, code: str = "") -> None:
        super().__init__(reason)
        self.response = {"Error": {"Code": code or str(status or "")}, "ResponseMetadata": {"HTTPStatusCode": status}}


def http_error_reason(status: int, body: bytes) -> tuple[str, str]:
    """(one-line reason, S3 error code or "") of an error answer: ``HTTP 404 NoSuchKey: The specified key
    does not exist.`` from S3's XML body, else the status and the body's first 200 characters."""
    text = body[:2000].decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]{1,100})</Code>", text)
    message = re.search(r"<Message>([^<]{0,300})</Message>", text)
    if code:
        return f"HTTP {status} {code.group(1)}: {message.group(1) if message else ''}".rstrip(": "), code.group(1)
    return f"HTTP {status}: {text[:200]}".rstrip(": "), ""


class BotoGetter:
    """GET through boto3: signed requests, or an explicitly given client."""

    def __init__(self, client, bucket: str) -> None:
        self.client, self.bucket = client, bucket

    def __call__(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


class AnonymousHttpGetter:
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
                                        timeout=urllib3.Timeout(connect=s3_connect_timeout(), read=s3_read_timeout()))

    def __call__(self, key: str) -> bytes:
        from urllib.parse import quote

        response = self.pool.request("GET", f"{self.base}/{quote(key, safe='/')}", preload_content=True,
                                     enforce_content_length=True)
        if response.status == 200:
            return response.data
        reason, code = http_error_reason(response.status, response.data)
        if response.status in (403, 404):
            raise PermanentFetchError(reason, response.status, code)
        raise RuntimeError(reason)


def connection_failure(exc: BaseException) -> str | None:
    """What the endpoint did when ``exc`` means no answer came at all (refused, reset, timed out, closed
    mid-answer), in words; None for an answer (any HTTP status) or a problem of one object."""
    import urllib3.exceptions as u3
    from botocore import exceptions as boto

    if isinstance(exc, boto.ConnectTimeoutError | u3.ConnectTimeoutError) and not isinstance(
            exc, u3.NewConnectionError):
        return f"accepted no connection within {s3_connect_timeout():g} s (VSBENCH_S3_CONNECT_TIMEOUT)"
    if isinstance(exc, boto.ReadTimeoutError | u3.ReadTimeoutError | TimeoutError):
        return f"sent no answer within {s3_read_timeout():g} s (VSBENCH_S3_READ_TIMEOUT)"
    text = " ".join(str(inner) for inner in exception_chain(exc)).lower()
    if isinstance(exc, u3.NewConnectionError | boto.EndpointConnectionError | ConnectionRefusedError):
        return "refused the connection" if "refused" in text else "could not be connected to"
    if isinstance(exc, boto.ConnectionClosedError | boto.ResponseStreamingError | boto.IncompleteReadError
                  | u3.ProtocolError | u3.SSLError | u3.ProxyError | ConnectionError):
        if "reset" in text:
            return "reset the connection"
        return "closed the connection before a whole answer"
    if isinstance(exc, boto.HTTPClientError | boto.ConnectionError):
        return f"failed at the connection level ({type(exc).__name__})"
    return None


def short_error(exc: BaseException) -> str:
    """The exception's type and its OS error, if any (``NewConnectionError: [Errno 111] Connection refused``):
    urllib3's and botocore's own texts repeat the pool and the URL, which the message already names."""
    for inner in exception_chain(exc):
        if isinstance(inner, OSError) and inner.strerror:
            return f"{type(exc).__name__}: {inner.strerror}"
        found = re.search(r"\[Errno -?\d+\] [^'\")\]]+", str(inner))
        if found:
            return f"{type(exc).__name__}: {found.group(0).strip()}"
    return type(exc).__name__


def describe_error(exc: Exception) -> str:
    if isinstance(exc, PermanentFetchError):  # its message already names the status, code and S3's message
        return str(exc)
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        return f"{error.get('Code', type(exc).__name__)}: {error.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


def is_permanent(exc: Exception) -> bool:
    if isinstance(exc, PermanentFetchError):
        return True
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code", "") if isinstance(response, dict) else ""
    return code in {"NoSuchKey", "AccessDenied", "NoSuchBucket", "403", "404"}
