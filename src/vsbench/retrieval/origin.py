"""Whether the features a step is about to use were embedded from the images it was given (issue 46).

Why: the index, search and score steps read the embed step's shards under ``--out`` and checked only
that they are complete and agree with each other. ``similarity score --root OTHER`` on a folder
embedded from another dataset with the same ids scored the old features with exit 0. Each shard's
manifest records, in its key, ``inputs.images_sha256``: one sha256 over (id, sha256 of the image's
bytes) in shard order (:func:`vsbench.retrieval.embed.input_key`). :func:`check_images` recomputes it
for the ids of that shard under the ``--root`` the step was given and refuses, in one line naming the
shard and the root, features whose digest is not that one.

Cost: the digests come from the shard's own memo (``features/.inputs/<stem>.json``) by their stat
record, so a step over an unchanged root calls ``stat`` once per image and reads none. The memo is
read only: the embed step of that shard is its one writer, and a pipeline's index, search and score
tasks run side by side (a file changed since the embed step is hashed again by each step that meets
it, which is also what refuses it). Within one process (``similarity run --runner inline``, one
:class:`~vsbench.retrieval.engine.Engine`) a shard is checked once: the embed step has just taken the
same digests from the same root, and ``checked`` carries them to the later steps (bench/README.md,
"Features against their inputs", for what a check costs).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from vsbench.io.digests import DigestMemo, combine
from vsbench.io.features import FeatureError, ImageSet
from vsbench.retrieval.shards import complete_shards, shard_of, shard_stem

# The ids digest and the memo's place are defined here, not in vsbench.retrieval.embed (which writes
# them), so that the steps that only check features (index, search, score) never import torch.


def _ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()


INPUTS_DIR = ".inputs"  # the shards' digest memos: a folder of their own, so no glob of shard files meets them


def inputs_path(features_path: Path) -> Path:
    """Where a shard's :class:`~vsbench.io.digests.DigestMemo` lives: ``.inputs/<stem>.json`` beside
    its manifest (a folder of its own: globbing the shards' manifests never reads a memo as one)."""
    return features_path.parent / INPUTS_DIR / f"{features_path.stem}.json"


def recorded_images(manifest: Mapping[str, Any]) -> str | None:
    """The ``inputs.images_sha256`` a shard's manifest records in its key, or None (an older vsbench)."""
    key = manifest.get("key")
    inputs = key.get("inputs") if isinstance(key, dict) else None
    digest = inputs.get("images_sha256") if isinstance(inputs, dict) else None
    return digest if isinstance(digest, str) else None


def check_images(out_dir: Path, images: Mapping[str, ImageSet], root: str | os.PathLike[str], *,
                 checked: MutableMapping[str, str] | None = None, threads: int | None = None) -> int:
    """Refuse (:class:`~vsbench.io.features.FeatureError`, one line) the first shard of ``images``'
    sets under ``out_dir`` whose recorded image digest is not that of the images ``root`` has for
    its ids; returns how many shards were checked here.

    ``checked`` (shard stem -> digest) holds the shards known to be ``root``'s: a shard whose manifest
    still records that digest is not checked again, and each shard that passes is added. Smallest
    shards first: a wrong root is refused after the fewest reads (a root never seen is hashed)."""
    out_dir = Path(out_dir)
    threads = threads or max(2, min(8, os.cpu_count() or 2))
    todo = []
    for set_name, image_set in images.items():
        manifests = complete_shards(out_dir, set_name)
        for shard, manifest in enumerate(manifests):
            stem, recorded = shard_stem(set_name, shard, len(manifests)), recorded_images(manifest)
            shard_file = out_dir / str(manifest.get("features") or f"{stem}.npz")
            if recorded is None:
                raise FeatureError(f"{shard_file}: its manifest records no digest of the images it was embedded "
                                   "from (an older vsbench): re-run the embed step for this root into this --out")
            if checked is not None and checked.get(stem) == recorded:
                continue
            part = shard_of(image_set.ids, shard, len(manifests))
            todo.append((part.stop - part.start, stem, shard_file, manifest["key"], image_set, part))
    for _, stem, shard_file, key, image_set, part in sorted(todo, key=lambda item: item[0]):
        ids, paths, recorded = image_set.ids[part], image_set.paths[part], key["inputs"]["images_sha256"]
        if key.get("ids_sha256") != _ids_digest(ids):
            raise FeatureError(
                f"{shard_file} holds the features of other ids than --root {root} lists for it (another dataset, "
                "other --benchmark-options, or images added or removed since the embed step): re-run the embed "
                f"step for this root and options (vsbench similarity run --root {root} --out {out_dir.parent}), "
                "or use the --out of the run that embedded them")
        digests = DigestMemo(inputs_path(shard_file)).digests(paths, threads=threads)  # read only: never saved
        if combine(zip(ids, digests)) != recorded:
            unreadable = [path for path, digest in zip(paths, digests) if digest is None]
            why = (f"; {len(unreadable)} of them cannot be read, e.g. {unreadable[0]}" if unreadable else "")
            raise FeatureError(
                f"{shard_file} was embedded from other images than those --root {root} has for its {len(ids)} "
                f"ids (the image digests its manifest records are not theirs{why}): re-run the embed step for "
                f"this root (vsbench similarity run --root {root} --out {out_dir.parent}), or use the --out of "
                f"the run that embedded {root}")
        if checked is not None:
            checked[stem] = recorded
    return len(todo)
