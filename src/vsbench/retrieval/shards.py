"""Reading what the embed step wrote: an image set's finished shards, checked (all there, complete,
one embedding) and verified against their manifests' digests before their rows are read.

Why a module of its own: the index, search and score steps read features, they never embed;
:mod:`vsbench.retrieval.embed` writes the shards and its manifests say what each holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.io.features import (
    FeatureError,
    FeatureSet,
    MappedRows,
    RowSource,
    concatenate,
    load_features,
    map_npz_member,
    save_features,
)
from vsbench.io.inputs import InputError, load_arrays, read_json
from vsbench.io.storage import atomic_write_json, file_sha256, sha256_matches
from vsbench.models.weights import RANDOM_SEED

SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # an image set's name, as shard files carry it


def shard_of(ids: Sequence[Any], shard: int, num_shards: int) -> slice:
    """The contiguous slice of ``ids`` that shard ``shard`` of ``num_shards`` embeds; sizes
    differ by at most one, and the shards in order cover ``ids`` exactly once."""
    if num_shards < 1 or not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} of {num_shards}: need 0 <= shard < num_shards")
    return slice(len(ids) * shard // num_shards, len(ids) * (shard + 1) // num_shards)


def shard_stem(set_name: str, shard: int, num_shards: int) -> str:
    return f"{set_name}.shard-{shard}-of-{num_shards}"


def read_manifest(path: Path) -> dict[str, Any] | None:
    """A shard's (or merged set's) manifest, or None when missing, unreadable or not an object."""
    try:
        manifest = read_json(path)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def complete_shards(out_dir: Path, set_name: str) -> list[dict[str, Any]]:
    """The manifests of shards 0..n-1 of ``set_name``, in order; a missing or incomplete shard,
    shards from runs with different shard counts, or shards from different models are errors."""
    out_dir = Path(out_dir)
    pattern = re.compile(rf"{re.escape(set_name)}\.shard-(\d+)-of-(\d+)\.json")
    found: dict[tuple[int, int], Path] = {}
    for path in out_dir.glob(f"{set_name}.shard-*-of-*.json"):
        match = pattern.fullmatch(path.name)
        if match:
            found[(int(match[1]), int(match[2]))] = path
    if not found:
        raise FeatureError(f"{out_dir}: no shards of {set_name!r} to merge")
    counts = sorted({n for _, n in found})
    if len(counts) != 1:
        raise FeatureError(f"{out_dir}: shards of {set_name!r} from runs with different shard counts "
                           f"{counts}; remove the stale ones")
    num_shards = counts[0]
    missing = [i for i in range(num_shards) if (i, num_shards) not in found]
    if missing:
        raise FeatureError(f"{out_dir}: {set_name!r} is missing shards {missing} of {num_shards}")
    manifests = [read_manifest(found[(i, num_shards)]) or {} for i in range(num_shards)]
    incomplete = [i for i, m in enumerate(manifests) if m.get("complete") is not True]
    if incomplete:
        raise FeatureError(f"{out_dir}: shards {incomplete} of {set_name!r} are not complete")
    # The seed is part of the model: shards of one random network drawn with two seeds are two models.
    models = {json.dumps([m["model"], m["options"], m["dim"], m.get("seed", RANDOM_SEED)], sort_keys=True)
              for m in manifests}
    if len(models) != 1:
        raise FeatureError(f"{out_dir}: shards of {set_name!r} come from different models ([model, options, dim, "
                           f"seed]): {sorted(models)}")
    for manifest in manifests:
        if not isinstance(manifest.get("features"), str) or not SET_NAME.fullmatch(manifest["features"]):
            raise FeatureError(f"{out_dir}: a manifest of {set_name!r} names no feature file of its own; re-run the "
                               "embed step")
    return manifests


def _shard_changed(shard_file: Path, manifest: dict[str, Any]) -> FeatureError:
    return FeatureError(f"{shard_file}: its sha256 is not the one {shard_file.with_suffix('.json').name} records "
                        "(changed after the embed step): re-run the embed step, which embeds it again")


def open_shards(out_dir: Path, set_name: str) -> FeatureSet:
    """The features of ``set_name`` read in place from the embed step's shard files (see
    :func:`open_embeddings`, which also checks that several sets come from one model)."""
    return _open_shards(Path(out_dir), set_name)[0]


def _embedding_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """What makes two sets' descriptors comparable: one model, options, seed, AMP, libraries and
    decode (the batched device decode feeds the network other pixels: docs/fidelity.md)."""
    key = manifest.get("key") if isinstance(manifest.get("key"), dict) else {}
    inputs = key.get("inputs") if isinstance(key.get("inputs"), dict) else {}
    return {"model": manifest.get("model"), "options": manifest.get("options"), "dim": manifest.get("dim"),
            "seed": manifest.get("seed", RANDOM_SEED), "amp": key.get("amp"),
            "option_files": inputs.get("option_files"), "libraries": inputs.get("libraries"),
            "decode": key.get("decode", "pillow")}


_DECODED = {"device": "on the device (batched)", "pillow": "by Pillow"}


def open_embeddings(out_dir: Path, set_names: Sequence[str], *, model: str = "",
                    model_options: dict[str, Any] | None = None, seed: int | None = None) -> dict[str, FeatureSet]:
    """Every set's features (:func:`open_shards`), refused in one line unless all of them, shard by
    shard, were embedded by one model (name, options, seed, AMP, the files its options name,
    library versions) and, when given, by ``model`` with ``model_options`` and ``seed``: queries of
    one model searched among references of another (two runs writing one folder) would score a
    number no run computed (issue 37), and features of another model than the step asks for (issue
    46) a number of that model under this one's name."""
    out_dir = Path(out_dir)
    opened = {name: _open_shards(out_dir, name) for name in set_names}
    identities = [(f"{name} shard {i}", _embedding_identity(manifest))
                  for name, (_, manifests) in opened.items() for i, manifest in enumerate(manifests)]
    first_name, first = identities[0] if identities else ("", {})
    for name, identity in identities:
        if identity != first:
            differ = sorted(k for k in identity if identity[k] != first[k])
            if differ == ["decode"]:  # one run, its shards decoded two ways (--decode gpu on some nodes)
                raise FeatureError(
                    f"{out_dir}: {name} was decoded {_DECODED.get(identity['decode'], identity['decode'])} and {first_name} "
                    f"{_DECODED.get(first['decode'], first['decode'])}, which give other pixels (docs/fidelity.md); embed every shard "
                    "one way: run the embed step again with --decode cpu (or --decode gpu on GPU nodes only)")
            raise FeatureError(
                f"{out_dir}: the features of {name} and {first_name} come from different embeddings ("
                f"{', '.join(differ)} differ: {identity['model']} {json.dumps(identity['options'])} vs "
                f"{first['model']} {json.dumps(first['options'])}); two runs wrote this folder: re-run the embed "
                "step for this run, or use a folder of its own")
    if identities:
        _check_asked(out_dir, first, model, model_options, seed)
    failed = [(name, failure) for name, (_, manifests) in opened.items() for manifest in manifests
              for failure in manifest.get("failed") or [] if isinstance(failure, dict)]
    if failed:  # every benchmark scores every image it lists (Engine.embed_shard): named, not "no features"
        shown = "; ".join(f"{name} {f.get('id')}: {f.get('reason')}" for name, f in failed[:3])
        raise FeatureError(f"{out_dir}: {len(failed)} image(s) could not be embedded ({shown}); fix or replace "
                           "those files and run the embed step again")
    return {name: features for name, (features, _) in opened.items()}


def embedding_identity(out_dir: Path, set_name: str) -> dict[str, Any]:
    """What the features of ``set_name`` were embedded with (model, options, seed, ...): what a step that
    was not told the model records (``similarity score --track``)."""
    return _embedding_identity(complete_shards(Path(out_dir), set_name)[0])


def _check_asked(out_dir: Path, identity: dict[str, Any], model: str, model_options: dict[str, Any] | None,
                 seed: int | None) -> None:
    """Refuse features whose model, options or seed are not the ones asked for (each only when given),
    in one line naming both and the two fixes."""
    wanted = json.loads(json.dumps(model_options, sort_keys=True, default=str)) if model_options is not None else None
    differ = [what for what, asked, got in (("model", model or None, identity["model"]),
                                            ("options", wanted, identity["options"]), ("seed", seed, identity["seed"]))
              if asked is not None and asked != got]
    if not differ:
        return
    asked = {"model": model or identity["model"], "options": identity["options"] if wanted is None else wanted,
             "seed": identity["seed"] if seed is None else seed}

    def said(spec: dict[str, Any]) -> str:
        return f"{spec['model']} {json.dumps(spec['options'], sort_keys=True)} seed {spec['seed']}"

    raise FeatureError(
        f"{out_dir}: the features were embedded with {said(identity)}, this step asks for {said(asked)} "
        f"({', '.join(differ)} {'differ' if len(differ) > 1 else 'differs'}): re-run the embed step with those into this folder, or use the --out of a "
        "run that embedded with them")


def _open_shards(out_dir: Path, set_name: str) -> tuple[FeatureSet, list[dict[str, Any]]]:
    """The features of ``set_name`` read in place from the embed step's shard files, memory-mapped
    (:class:`~vsbench.io.features.MappedRows`): nothing is merged or copied.

    Why: the index step's fill tasks each read one reference shard's rows, and the search tasks only
    the queries; the gallery passes whole through no process. The shards are checked as
    :func:`merge_shards` checks them (all there, complete, one model); each file's sha256 is checked
    against its manifest before its rows are first read (once per file version: the folder's
    ``.verified.json``), so a shard changed after the embed step is named, never read."""
    out_dir = Path(out_dir)
    manifests = complete_shards(out_dir, set_name)
    ids, parts, sources = [], [], []
    for manifest in manifests:
        shard_file = out_dir / manifest["features"]
        recorded = manifest.get("features_sha256")
        if not isinstance(recorded, str) or not shard_file.is_file():
            raise _shard_changed(shard_file, manifest)

        def verify(path: Path = shard_file, digest: str = recorded, record: dict[str, Any] = manifest) -> None:
            if not sha256_matches(path, digest):
                raise _shard_changed(path, record)

        try:
            shard_ids = load_arrays(shard_file, names=("ids",))["ids"]
        except (InputError, OSError, ValueError, KeyError) as exc:
            raise FeatureError(f"{shard_file}: not a vsbench feature file ({str(exc)[:200]}); re-run the embed "
                               "step") from None
        rows = map_npz_member(shard_file, "features")
        if rows.dtype != np.float32 or len(rows) != len(shard_ids) or rows.shape[1] != manifest["dim"]:
            raise _shard_changed(shard_file, manifest)
        ids.append(shard_ids.astype(str))
        parts.append(rows)
        sources.append(RowSource(shard_file.name, recorded, verify))
    return FeatureSet(np.concatenate(ids), MappedRows(parts, sources)), manifests


def merge_shards(out_dir: Path, set_name: str) -> FeatureSet:
    """Concatenate shards 0..n-1 of ``set_name`` in order into ``out_dir/<set_name>.npz`` (with a
    summary manifest ``<set_name>.json``); a missing or incomplete shard, shards from runs with
    different shard counts, or shards from different models are errors."""
    out_dir = Path(out_dir)
    manifests = complete_shards(out_dir, set_name)
    num_shards = len(manifests)
    for manifest in manifests:  # what the embed step vouched for, not what lies there now
        shard_file = out_dir / manifest["features"]
        if file_sha256(shard_file) != manifest.get("features_sha256"):
            raise _shard_changed(shard_file, manifest)
    merged = concatenate([load_features(out_dir / m["features"]) for m in manifests])
    save_features(out_dir / f"{set_name}.npz", merged)
    seconds = sum(m["seconds"] for m in manifests)
    atomic_write_json(out_dir / f"{set_name}.json", {
        "complete": True, "set_name": set_name, "num_shards": num_shards, "model": manifests[0]["model"],
        "options": manifests[0]["options"], "seed": manifests[0].get("seed", RANDOM_SEED),
        "preprocessing": manifests[0].get("preprocessing"),
        "dim": merged.dim, "requested": sum(m["requested"] for m in manifests), "count": len(merged),
        "failed": [f for m in manifests for f in m["failed"]],
        "shards": [shard_stem(set_name, i, num_shards) for i in range(num_shards)],
        "seconds": round(seconds, 3), "features": f"{set_name}.npz",
        "features_sha256": file_sha256(out_dir / f"{set_name}.npz"),
    })
    return merged


def load_merged(out_dir: Path, set_name: str) -> FeatureSet:
    """The merged features of ``set_name`` as :func:`merge_shards` wrote them, verified against the
    sha256 its manifest records (a later step may run on another node, from a shared volume)."""
    out_dir = Path(out_dir)
    path, manifest_path = out_dir / f"{set_name}.npz", out_dir / f"{set_name}.json"
    manifest = read_manifest(manifest_path) or {}
    if not path.is_file() or manifest.get("complete") is not True:
        raise FeatureError(f"{path}: no merged features (or no complete {manifest_path.name}): run the index step "
                           "(vsbench similarity index), which merges the embedding shards")
    if file_sha256(path) != manifest.get("features_sha256"):
        raise FeatureError(f"{path}: its sha256 is not the one {manifest_path.name} records (changed after the "
                           "index step merged it): re-run the index step, which merges the shards again")
    return load_features(path)
