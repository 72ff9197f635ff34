"""The embedding cache: one descriptor per (model key, image digest), shared by every benchmark.

Two benchmarks (or two codecs, or two nights) over the same images with the same model compute
the same descriptors; the cache makes the second run embed nothing. The *model key* holds every
input that changes a descriptor other than the image bytes:

* the model name and its options other than where the weights were read from,
* the digest of the weights actually loaded (see :func:`vsbench.models.weights.state_digest`),
* the output layer, the preprocessing (sizes, resize mode, crop rounding, mean/std, interpolation),
* the numeric precision (autocast dtype or float32) and the library versions that run the network.

A peer tool once keyed its cache without the prompt type and served query embeddings for
documents; tests/unit/test_embed_cache.py changes each field of the key and expects a miss.

Layout: ``<root>/<key digest>/key.json`` (the key in full) and ``chunk-*.npz`` files holding
``digests`` (sha256 of each image file) and ``features``. Writers add chunks under unique names
with an atomic rename, so shards embedding in parallel never overwrite one another. The root is
``VSBENCH_EMBED_CACHE`` (``off`` disables it), by default ``$XDG_CACHE_HOME/vsbench/embeddings``.
On a cluster, point it at the data volume (``/data/cache/embeddings``) so every pod shares it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.inputs import check_array_file
from vsbench.models.registry import Embedder

logger = logging.getLogger(__name__)

CACHE_ENV = "VSBENCH_EMBED_CACHE"
DISABLED = ("off", "none", "0", "false")
KEY_VERSION = 1  # bump when the meaning of a cached descriptor changes in vsbench itself
LIBRARIES = ("torch", "torchvision", "timm", "open_clip_torch", "transformers", "vsbench")
WEIGHTS_OPTIONS = ("weights", "path", "checkpoint", "config")  # where weights come from: the digest covers them


def cache_root() -> Path | None:
    """The cache folder from the environment, or None when caching is off."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in DISABLED or not value.strip() else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vsbench" / "embeddings"


def library_versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def model_key(model: str, options: dict[str, Any], embedder: Embedder, precision: str) -> dict[str, Any]:
    """Everything but the image that decides a descriptor (JSON-normalized)."""
    from vsbench.models.weights import state_digest

    architecture = {k: v for k, v in options.items() if k not in WEIGHTS_OPTIONS}
    if options.get("weights") == "random":
        architecture["weights"] = "random"  # documents the choice; the digest already pins it
    key = {
        "version": KEY_VERSION,
        "model": model,
        "options": architecture,
        "weights_sha256": embedder.weights_digest or state_digest(embedder),
        "output": embedder.output,
        "preprocessing": asdict(embedder.preprocessing),
        "precision": precision,
        "libraries": library_versions(),
    }
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()


def file_digest(path: Path) -> str | None:
    """sha256 of an image file's bytes; None when it cannot be read (the embed step reports it)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def image_digests(paths: Sequence[Path], threads: int = 4) -> list[str | None]:
    """Digests of many files; hashlib releases the GIL, so threads overlap reading and hashing."""
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return list(pool.map(file_digest, paths))


class EmbeddingCache:
    """The descriptors cached under one model key."""

    def __init__(self, root: Path, key: dict[str, Any]) -> None:
        self.key = key
        self.digest = key_digest(key)
        self.folder = Path(root) / self.digest

    def lookup(self, digests: Sequence[str | None]) -> dict[str, np.ndarray]:
        """Descriptors for the digests that are cached (reading only the chunks that hold some)."""
        wanted = {d for d in digests if d}
        found: dict[str, np.ndarray] = {}
        if not wanted or not self.folder.is_dir():
            return found
        for chunk in sorted(self.folder.glob("chunk-*.npz")):
            try:
                check_array_file(chunk)  # headers first: a damaged chunk never asks for more than it holds
                with np.load(chunk, allow_pickle=False) as data:
                    names = data["digests"]
                    rows = [i for i, d in enumerate(names.tolist()) if d in wanted and d not in found]
                    if rows:
                        features = data["features"]
                        found.update((names[i].item(), features[i]) for i in rows)
            except (OSError, ValueError, KeyError):
                continue  # a chunk being written or damaged is a miss, never an error
            if len(found) == len(wanted):
                break
        return found

    def store(self, digests: Sequence[str], features: np.ndarray) -> None:
        """Add descriptors (finite rows only) as one new chunk, written atomically."""
        if len(digests) == 0:
            return
        features = np.asarray(features, dtype=np.float32)
        finite = np.isfinite(features).all(axis=1)
        if not finite.all():
            digests = [d for d, ok in zip(digests, finite) if ok]
            features = features[finite]
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            key_file = self.folder / "key.json"
            if not key_file.exists():
                _atomic_bytes(key_file, json.dumps(self.key, indent=2, sort_keys=True).encode())
            name = f"chunk-{uuid.uuid4().hex}.npz"
            tmp = self.folder / f".{name}.tmp"
            with open(tmp, "wb") as handle:
                np.savez(handle, digests=np.asarray(digests, dtype=str), features=features)
            os.replace(tmp, self.folder / name)
        except OSError as exc:  # a cache is a shortcut: the step's own output is already safe
            logger.warning("embedding cache %s cannot be written (%s): the embeddings are kept in the step's "
                           "output but not cached; set %s to a writable folder or 'off'", self.folder,
                           exc.strerror or exc, CACHE_ENV)


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
