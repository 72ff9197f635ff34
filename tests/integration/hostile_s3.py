"""A tiny S3 stand-in on 127.0.0.1 that lists a bucket and then misbehaves, for the dead- and
silent-endpoint tests of ``abid download`` (issue 28, item 9).

It answers ``ListObjectsV2`` (path style, one page) and object GETs. What an object GET gets past the
first ``healthy_gets`` is set by ``mode``:

* ``"ok"``: the object;
* ``"reset"``: the connection is reset (RST, SO_LINGER 0) without a byte of answer;
* ``"silent"``: nothing, ever: the request waits until the server is closed;
* ``"kill"``: the server dies: it stops listening (later connections are refused) and resets every
  open connection.

``listing="silent"`` makes even the listing wait forever (a listener that accepts and never answers).
"""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


def _reset(connection: socket.socket) -> None:
    try:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()
    except OSError:
        pass


class HostileS3:
    def __init__(self, bucket: str, objects: dict[str, bytes], *, mode: str = "ok", healthy_gets: int = 0,
                 listing: str = "ok") -> None:
        self.bucket, self.objects = bucket, objects
        self.mode, self.healthy_gets, self.listing = mode, healthy_gets, listing
        self.object_gets = 0  # object GETs received
        self.keys_got: list[str] = []  # the key of each, in order (a retry after a client timeout repeats one)
        self.served = 0  # objects answered whole
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.killed = False
        self.connections: set[socket.socket] = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with fake.lock:
                    fake.connections.add(self.connection)

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:
                    pass
                with fake.lock:
                    fake.connections.discard(self.connection)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if "list-type" in url.query:
                    if fake.listing == "silent":
                        fake.closing.wait(120)
                        self.close_connection = True
                        return
                    self._send(200, fake.listing_xml(), "application/xml")
                    return
                key = unquote(url.path).removeprefix(f"/{fake.bucket}/")
                with fake.lock:
                    fake.object_gets += 1
                    fake.keys_got.append(key)
                    misbehave = fake.object_gets > fake.healthy_gets and fake.mode != "ok"
                    mode = fake.mode
                if fake.killed or (misbehave and mode == "kill"):
                    fake.kill()
                    self.close_connection = True
                    return
                if misbehave and mode == "reset":
                    _reset(self.connection)
                    self.close_connection = True
                    return
                if misbehave and mode == "silent":
                    fake.closing.wait(120)
                    self.close_connection = True
                    return
                data = fake.objects.get(key)
                if data is None:
                    self._send(404, b"<Error><Code>NoSuchKey</Code></Error>", "application/xml")
                    return
                self._send(200, data, "binary/octet-stream", etag=hashlib.md5(data).hexdigest())
                with fake.lock:
                    fake.served += 1

            def _send(self, status: int, body: bytes, kind: str, etag: str = "") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                if etag:
                    self.send_header("ETag", f'"{etag}"')
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False
            request_queue_size = 256  # 64 connections at once must not overflow the backlog (SYNs dropped: connect timeouts)

            def handle_error(self, request, client_address) -> None:  # resets and kills are the point
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def listing_xml(self) -> bytes:
        items = "".join(
            f"<Contents><Key>{key}</Key><LastModified>2017-01-01T00:00:00.000Z</LastModified>"
            f"<ETag>&quot;{hashlib.md5(data).hexdigest()}&quot;</ETag><Size>{len(data)}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
            for key, data in sorted(self.objects.items()))
        return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
                f'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>{self.bucket}</Name><Prefix></Prefix>'
                f"<KeyCount>{len(self.objects)}</KeyCount><MaxKeys>100000</MaxKeys><IsTruncated>false</IsTruncated>"
                f"{items}</ListBucketResult>").encode()

    def kill(self) -> None:
        """Stop listening (later connections are refused) and reset every open connection."""
        with self.lock:
            if self.killed:
                return
            self.killed = True
            connections = list(self.connections)
        self.server.shutdown()  # called from a handler's thread, never the serving one
        self.server.socket.close()
        for connection in connections:
            _reset(connection)

    def __enter__(self) -> HostileS3:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


def abid_objects(n: int) -> dict[str, bytes]:
    """``n`` small images in the ABID layout (metadata omitted: the plan needs none)."""
    return {f"bin-images/{i}.jpg": hashlib.sha256(str(i).encode()).digest() * 8 for i in range(1, n + 1)}
