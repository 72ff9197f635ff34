"""Tags that say what a run measured and with what: the data (a digest), the code, the machine.

Every tracked run, pipeline or command, carries the same tag names, so the report can print one
line per run ("data ... digest ...; profile ...; vsbench 0.1.0 @ abc1234 on host") whatever
produced it. Computing them must stay cheap and never fail a benchmark: the git commit is looked
up with a short timeout, and the data digest hashes the listing (paths and sizes) plus the content
of small files (metadata, ground truth), not every image byte.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path

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
PROFILE_TAG = "vsbench.profile"
BASELINE_TAG = "vsbench.baseline"  # "random-features": the run's model has untrained weights
MLFLOW_GIT_COMMIT_TAG = "mlflow.source.git.commit"

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


def code_tags() -> dict[str, str]:
    """vsbench's version, its git commit when known, and the machine (host name)."""
    from vsbench import __version__

    tags = {VERSION_TAG: __version__, HOST_TAG: platform.node() or "unknown"}
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
