"""Feature files: the one on-disk format every model, shard and precomputed submission uses.

A feature file is an ``.npz`` holding ``ids`` (unicode strings, one per row) and ``features``
(float32, N x D). It is written atomically and loaded with ``allow_pickle=False``, so a feature
file can never run code. Shards of one image set concatenate in shard order.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsbench.io.inputs import QUOTE_CHARS, InputError, WordedInputError, load_arrays
from vsbench.io.storage import atomic_write_bytes


@dataclass(frozen=True)
class ImageSet:
    """Images to embed: ids (unique) and their files, in order; a benchmark's image set."""

    ids: tuple[str, ...]
    paths: tuple[Path, ...]

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.paths):
            raise ValueError(f"{len(self.ids)} ids for {len(self.paths)} paths")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("image ids must be unique within an image set")



class FeatureError(WordedInputError):
    """A feature file or array that cannot be used, with the file and the reason (an InputError,
    so the CLI and the fuzz tests treat it as the user's input problem it is)."""


@dataclass(frozen=True)
class FeatureSet:
    ids: np.ndarray  # (N,) unicode
    features: np.ndarray  # (N, D) float32

    def __post_init__(self) -> None:
        if self.features.ndim != 2:
            raise FeatureError(f"features must be 2-D, got shape {self.features.shape}")
        if len(self.ids) != len(self.features):
            raise FeatureError(f"{len(self.ids)} ids for {len(self.features)} feature rows")

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    def __len__(self) -> int:
        return len(self.ids)

    def check_finite(self, source: str = "features") -> None:
        bad = ~np.isfinite(self.features).all(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise FeatureError(f"{source}: row {row} (id {self.ids[row]!r}) has NaN or infinite values "
                               f"({int(bad.sum())} such rows)")

    def select(self, ids: Sequence[str], source: str = "features") -> FeatureSet:
        """Rows in the order of ``ids``; an id that is missing is an error naming it."""
        position = {str(i): n for n, i in enumerate(self.ids.tolist())}
        missing = [i for i in ids if i not in position]
        if missing:
            raise FeatureError(f"{source}: {len(missing)} ids have no features, e.g. {missing[:3]}")
        rows = np.fromiter((position[i] for i in ids), dtype=np.int64, count=len(ids))
        return FeatureSet(np.asarray(ids, dtype=str), self.features[rows])


def save_features(path: Path, features: FeatureSet) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, ids=np.asarray(features.ids, dtype=str), features=np.ascontiguousarray(features.features,
                                                                                            dtype=np.float32))
    atomic_write_bytes(path, buffer.getvalue())


def load_features(path: Path) -> FeatureSet:
    try:
        data = load_arrays(path)  # size and headers checked before any array is read
        ids, features = data["ids"], data["features"]
    except InputError as exc:  # already names the file
        raise FeatureError(str(exc)) from None
    except (OSError, ValueError, KeyError) as exc:
        raise FeatureError(f"{path}: not a vsbench feature file ({str(exc)[:QUOTE_CHARS]})") from None
    if ids.ndim != 1 or not (ids.dtype.kind in "US" or ids.size == 0):
        raise FeatureError(f"{path}: ids must be a 1-D array of strings, got {ids.shape} {ids.dtype}")
    if not (np.issubdtype(features.dtype, np.number) or features.dtype == np.bool_):
        raise FeatureError(f"{path}: features must be numbers, got dtype {features.dtype}")
    try:
        return FeatureSet(ids.astype(str), features.astype(np.float32, copy=False))
    except FeatureError as exc:
        raise FeatureError(f"{path}: {exc}") from None


def concatenate(parts: Sequence[FeatureSet]) -> FeatureSet:
    if not parts:
        raise FeatureError("no feature shards to concatenate")
    dims = {p.dim for p in parts}
    if len(dims) != 1:
        raise FeatureError(f"shards disagree on the feature dimension: {sorted(dims)}")
    return FeatureSet(np.concatenate([p.ids for p in parts]), np.concatenate([p.features for p in parts]))
