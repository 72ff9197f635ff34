"""An HTTP proxy in front of the local S3 server that can be told to fail, for outage tests.

Modes: "ok" forwards everything; "fail" answers object GETs with 503 after ``healthy_gets``
successful ones; "truncate" sends a short body (Content-Length says more, then the connection
closes). Listing requests (``?list-type=2``) always pass, so a run can plan and then meet the
outage part-way through its fetches. Keys in ``missing_keys`` are answered 404 NoSuchKey in every
mode, as for an object deleted between the listing and its GET.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class FlakyProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.mode = "ok"
        self.healthy_gets = 0
        self.missing_keys: set[str] = set()
        self.object_gets = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _error(self, status: int, code: str, message: str) -> None:
                """An S3-style error answer."""
                body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                is_listing = "list-type" in self.path
                with proxy.lock:
                    if not is_listing:
                        proxy.object_gets += 1
                    failing = not is_listing and proxy.mode != "ok" and proxy.object_gets > proxy.healthy_gets
                    mode = proxy.mode
                key = urlsplit(self.path).path.split("/", 2)[-1]  # /<bucket>/<key>
                if not is_listing and unquote(key) in proxy.missing_keys:
                    self._error(404, "NoSuchKey", "The specified key does not exist.")
                    return
                if failing and mode == "fail":
                    self._error(503, "ServiceUnavailable", "injected outage")
                    return
                status, headers, body = proxy.forward(self.command, self.path, dict(self.headers))
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                if failing and mode == "truncate":
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.close_connection = True
                    return
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def forward(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        headers = {k: v for k, v in headers.items() if k.lower() != "host"}
        headers["Host"] = self.upstream.netloc
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        connection.close()
        return response.status, response.getheaders(), body

    def __enter__(self) -> FlakyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
