"""A local S3 endpoint (moto's server) on 127.0.0.1 for the demo, the tests and the benches.

It is a real HTTP server, so boto3, s5cmd and our downloader talk to it exactly as they talk to
AWS. :meth:`LocalS3.public_bucket` attaches the same kind of policy as the real ABID bucket
(anonymous GetObject and ListBucket), so unsigned reads work against it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

ACCESS_KEY = "vsbench-local"
SECRET_KEY = "vsbench-local-secret"  # a fixed dummy for the throwaway local server, not a secret


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _moto_command() -> list[str]:
    sibling = Path(sys.executable).with_name("moto_server")
    executable = str(sibling) if sibling.exists() else shutil.which("moto_server")
    if executable is None:
        raise FileNotFoundError("moto_server not found: install the dev extra (pip install 'vsbench[dev]')")
    return [executable]


class LocalS3:
    """``with LocalS3() as s3: s3.endpoint_url`` — a moto server started and stopped around a block."""

    def __init__(self, port: int | None = None, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._log = log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> LocalS3:
        stream = open(self._log, "ab") if self._log else subprocess.DEVNULL  # noqa: SIM115
        self._process = subprocess.Popen([*_moto_command(), "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=stream, stderr=stream)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"moto_server exited with code {self._process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"moto_server did not listen on port {self.port} within {timeout} s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._process = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def admin_client(self):
        """A signed client with the server's dummy credentials (to create and fill buckets)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1")

    def public_bucket(self, name: str) -> None:
        """Create ``name`` readable and listable anonymously, like the real ABID bucket."""
        client = self.admin_client()
        client.create_bucket(Bucket=name)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"],
            }],
        }
        client.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))


def without_aws_credentials(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment with AWS credentials removed, to exercise anonymous reads."""
    source = dict(os.environ if env is None else env)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        source.pop(key, None)
    return source
