"""Tags that say what a run measured and with what: the data (a digest), the code, the machine.

The machine is more than a host name: the same seed gives other digits on another CPU (other
kernels: AVX-512 or AVX2, oneDNN's choices, the thread count) or with another torch or faiss
(issue 39). So every run records the CPU model, its vector instruction sets, the CPUs it may use,
the GPU, torch's and faiss's versions (``vsbench.machine.*``), and one line of them all
(``vsbench.machine``), which the regression check compares to tell a move to another node from a
model change.

Every tracked run, pipeline or command, carries the same tag names, so the report can print one
line per run ("data ... digest ...; profile ...; vsbench 0.1.0 @ abc1234 on host") whatever
produced it. Computing them must stay cheap and never fail a benchmark: the git commit is looked
up with a short timeout, and the data digest hashes the listing (paths and sizes) plus the content
of small files (metadata, ground truth), not every image byte.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

KFP_RUN_TAG = "kfp.run_id"
PIPELINE_TAG = "vsbench.pipeline"
STEP_TAG = "vsbench.step"
IMAGE_TAG = "vsbench.image"
IMAGE_ID_TAG = "vsbench.image_id"
PARENT_TAG = "mlflow.parentRunId"
VERSION_TAG = "vsbench.version"
GIT_COMMIT_TAG = "vsbench.git_commit"
HOST_TAG = "vsbench.host"
SOURCE_TAG = "vsbench.source"  # "kfp" (a pipeline's parent run) or "cli" (a command's run)
RUN_KEY_TAG = "vsbench.run_key"  # the KFP run id, or the command run's own key
DATA_DIGEST_TAG = "vsbench.data.digest"
DATA_ROOT_TAG = "vsbench.data.root"
DATA_FILES_TAG = "vsbench.data.files"
DATA_SOURCE_TAG = "vsbench.data.source"  # the bucket a download read (s3://aft-vbi-pds)
DATA_ENDPOINT_TAG = "vsbench.data.endpoint"  # the S3 endpoint it was read from: a mirror or AWS (issue 57)
PROFILE_TAG = "vsbench.profile"
BASELINE_TAG = "vsbench.baseline"  # "random-features": the run's model has untrained weights
MLFLOW_GIT_COMMIT_TAG = "mlflow.source.git.commit"
MACHINE_TAG = "vsbench.machine"  # one line of the parts below: equal lines, same kernels to expect
MACHINE_PREFIX = "vsbench.machine."  # cpu, isa, cpus, gpu, torch, faiss, kernels

# The instruction sets that decide which kernels torch, oneDNN and faiss run (x86, then Arm).
ISA_FLAGS = ("avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
             "avx2", "fma", "avx", "sse4_2", "asimd", "sve", "sve2", "bf16", "i8mm")
# Set by hand, these make torch and oneDNN pick other kernels on the same CPU: part of the machine.
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")

GIT_COMMIT_ENV = "VSBENCH_GIT_COMMIT"  # set in the images, which hold no .git
SMALL_FILE_BYTES = 1 << 20
MAX_FILES = 200_000


def git_commit() -> str:
    """The commit of the checkout vsbench runs from ("" when unknown: a wheel, an image without the env)."""
    if os.environ.get(GIT_COMMIT_ENV):
        return os.environ[GIT_COMMIT_ENV].strip()
    here = Path(__file__).resolve().parent
    try:
        result = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and len(commit) == 40 else ""


def _cpuinfo(text: str) -> tuple[str, set[str]]:
    """(model name, flags) from /proc/cpuinfo's text: x86's ``model name`` / ``flags``, Arm's
    ``Features`` (Arm kernels name no model there: the caller falls back to the architecture)."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = " ".join(value.split())
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, flags


def _gpu_names() -> str:
    """The GPUs this process sees, by name (``none`` without one). Read from the NVIDIA driver's
    /proc files, or from torch when it has already started CUDA: asking torch otherwise would start
    CUDA in a process that may fork data loaders later."""
    names: list[str] = []
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - a tag must never fail a run
        names = []
    if not names:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None or visible.strip() not in ("", "-1"):
            for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
                try:
                    text = info.read_text(errors="replace")
                except OSError:
                    continue
                names += [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model:")]
    if not names:
        return "none"
    counted = {name: names.count(name) for name in dict.fromkeys(names)}
    return ", ".join(f"{name} x{count}" if count > 1 else name for name, count in counted.items())


def _version(module: str, *distributions: str) -> str:
    """The installed version of the distribution (one of ``distributions``) that provides ``module``,
    without importing it: read from the ``<name>-<version>.dist-info`` folder beside the module
    (one folder listing; ``importlib.metadata`` would first index every path, ~0.4 s in a large
    venv, on the timed path of every command). ``none`` when the module is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return "none"
    wanted = {name.lower().replace("_", "-") for name in distributions}
    site = Path(spec.origin).resolve().parent.parent
    try:
        for info in site.iterdir():
            name, _, version = info.name.removesuffix(".dist-info").partition("-")
            if info.name.endswith(".dist-info") and name.lower().replace("_", "-") in wanted:
                return version
    except OSError:
        pass
    from importlib import metadata  # not beside it (an unusual layout): the slow, general way

    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


@functools.cache
def machine_tags() -> dict[str, str]:
    """What decides the kernels a run's numbers came from: CPU model, its vector instruction sets
    (those of :data:`ISA_FLAGS` it has), the CPUs this process may run on, the GPUs, torch's and
    faiss's versions, kernel overrides from the environment; and ``vsbench.machine``, one line of
    them all. Cheap (no torch import, no CUDA start) and never failing: an unknown part reads
    ``unknown``. Computed once per process."""
    try:
        model, flags = _cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        model, flags = "", set()
    model = model or platform.processor() or platform.machine() or "unknown"
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 0
    isa = ",".join(flag for flag in ISA_FLAGS if flag in flags) or "unknown"
    parts = {"cpu": model, "isa": isa, "cpus": str(cpus or "unknown"), "gpu": _gpu_names(),
             "torch": _version("torch", "torch"),
             "faiss": _version("faiss", "faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11", "faiss")}
    kernels = ",".join(f"{name}={os.environ[name]}" for name in KERNEL_ENV if os.environ.get(name))
    if kernels:
        parts["kernels"] = kernels
    summary = " · ".join([parts["cpu"], parts["isa"], f"{parts['cpus']} cpus", f"gpu {parts['gpu']}",
                          f"torch {parts['torch']}", f"faiss {parts['faiss']}", *([kernels] if kernels else [])])
    return {MACHINE_TAG: summary[:5000], **{MACHINE_PREFIX + key: value[:5000] for key, value in parts.items()}}


def machine_parts(tags: dict[str, str]) -> dict[str, str]:
    """A run's ``vsbench.machine.*`` tags by part name (``cpu``, ``isa`` ...); empty for a run
    logged before machines were recorded."""
    return {key[len(MACHINE_PREFIX):]: value for key, value in tags.items() if key.startswith(MACHINE_PREFIX)}


def code_tags() -> dict[str, str]:
    """vsbench's version, its git commit when known, and the machine (host name and
    :func:`machine_tags`)."""
    from vsbench import __version__

    tags = {VERSION_TAG: __version__, HOST_TAG: platform.node() or "unknown", **machine_tags()}
    commit = git_commit()
    if commit:
        tags[GIT_COMMIT_TAG] = commit
        tags[MLFLOW_GIT_COMMIT_TAG] = commit
    return tags


def _files(paths: Iterable[Path]) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for root in paths:
        if root.is_file():
            found.append((root.name, root))
            continue
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                path = Path(folder) / name
                found.append((path.relative_to(root).as_posix(), path))
                if len(found) >= MAX_FILES:
                    return found
    return found


def dataset_digest(*paths: Path) -> tuple[str, int]:
    """(sha256 hex, file count) of the data under ``paths`` (folders or files): every relative path and
    size, and the bytes of files up to 1 MiB. Same data, same digest, wherever it lies; ("", 0) if missing."""
    existing = [p for p in paths if p.exists()]
    if not existing:
        return "", 0
    digest = hashlib.sha256()
    files = sorted(_files(existing))
    for relative, path in files:
        try:
            size = path.stat().st_size
            digest.update(f"{relative}\0{size}\n".encode())
            if size <= SMALL_FILE_BYTES:
                digest.update(path.read_bytes())
        except OSError:
            digest.update(f"{relative}\0unreadable\n".encode())
    return digest.hexdigest(), len(files)


def data_tags(*paths: Path) -> dict[str, str]:
    """Tags for the data a run read: its digest, file count and where it was."""
    digest, count = dataset_digest(*paths)
    if not digest:
        return {}
    return {DATA_DIGEST_TAG: digest, DATA_FILES_TAG: str(count),
            DATA_ROOT_TAG: ", ".join(str(p) for p in paths)[:4000]}


def public_endpoint(url: str) -> str:
    """``url`` as it may be recorded: scheme, host, port and path only. A ``user:password@`` part, a
    query and a fragment (where a presigned URL carries its signature) are dropped: a run's tags are
    read by everyone with access to the store, never a place for a secret. "" when it cannot be read."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return ""
    if not parts.scheme or not host:
        return ""
    host = f"[{host}]" if ":" in host else host
    return urlunsplit((parts.scheme, f"{host}:{port}" if port is not None else host, parts.path, "", ""))


def download_tags(source: str, endpoint: str) -> dict[str, str]:
    """Where a download read its data: the bucket (``s3://aft-vbi-pds``) and the endpoint that served it
    (a local mirror such as ``http://127.0.0.1:9000``, or AWS's own), so that a run against a mirror
    no longer reads as one against the public bucket (issue 57). No credential is ever part of it."""
    return {DATA_SOURCE_TAG: public_endpoint(source) or source.split("?")[0],
            DATA_ENDPOINT_TAG: public_endpoint(endpoint) or "(unknown)"}
