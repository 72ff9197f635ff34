"""One similarity engine for every benchmark: embed, index, search, score.

The steps are separable so that a pipeline can fan each out over shards and nodes:

* ``embed_benchmark_shard``: shard i of n of every image set of the benchmark;
* ``index_benchmark``: merge the embedding shards, then build and persist each FAISS index the
  benchmark's searches need (:class:`vsbench.index.plan.SearchRequest`), its references split into
  ``reference_shards`` indexes (reused when built before for the same inputs);
* ``search_benchmark``: one (query shard, reference shard) task of ``search_shards x reference_shards``;
* ``score_benchmark``: merge the tasks' results into each query's global top k and score them with
  the benchmark's own metrics.

``evaluate_benchmark`` does index, search and score in memory, in one process: same numbers
(tests/unit/test_sharded_search.py). Benchmarks that rank without FAISS (VSD's float32 cosine as its
original, patch pairs, product search) have no index to build or search; their score step evaluates.
The original benchmark's table (``disc_metrics.csv``, ``copydays_metrics.csv``, ...) is written beside
``metrics.json``, which holds the flat records that also go to MLflow and KFP.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from vsbench.benchmarks.base import EvalResult, EvalSettings
from vsbench.benchmarks.registry import load_benchmark
from vsbench.io.inputs import read_json
from vsbench.io.storage import atomic_write_json, atomic_write_text
from vsbench.retrieval.features import FeatureSet

FEATURES_DIR = "features"
INDEX_DIR = "index"
SEARCH_DIR = "search"
INDEX_MANIFEST = "manifest.json"


def embed_benchmark_shard(
    benchmark: str, root: Path, out: Path, model: str, *, shard: int = 0, num_shards: int = 1,
    benchmark_options: dict[str, Any] | None = None, model_options: dict[str, Any] | None = None,
    batch_size: int = 64, device: str = "auto", workers: int = 2, progress: bool = True, seed: int = 0,
) -> dict[str, str]:
    """Embed shard ``shard`` of every image set; returns set name -> shard file. ``seed`` draws
    ``{"weights": "random"}`` networks (the same seed, the same network)."""
    from vsbench.retrieval.embed import embed_image_set

    bench = load_benchmark(benchmark, root, **(benchmark_options or {}))
    written = {}
    for set_name, images in bench.image_sets().items():
        path = embed_image_set(model, images, out / FEATURES_DIR, set_name=set_name, shard=shard,
                               num_shards=num_shards, batch_size=batch_size, device=device, workers=workers,
                               model_options=model_options, progress=progress, seed=seed)
        written[set_name] = str(path)
    return written


def merge_benchmark(benchmark: str, root: Path, out: Path,
                    benchmark_options: dict[str, Any] | None = None) -> dict[str, FeatureSet]:
    from vsbench.retrieval.embed import merge_shards

    bench = load_benchmark(benchmark, root, **(benchmark_options or {}))
    return {name: merge_shards(out / FEATURES_DIR, name) for name in bench.image_sets()}


def evaluate_benchmark(
    benchmark: str, root: Path, out: Path, settings: EvalSettings,
    benchmark_options: dict[str, Any] | None = None,
) -> EvalResult:
    """Search and score merged features in this process; writes ``metrics.json`` and the benchmark's CSV."""
    bench = load_benchmark(benchmark, root, **(benchmark_options or {}))
    return _write_result(benchmark, out, bench.evaluate(_merged_features(bench, out), settings))


def index_benchmark(
    benchmark: str, root: Path, out: Path, settings: EvalSettings, *, reference_shards: int = 1,
    benchmark_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge the embedding shards and persist every index the benchmark searches (see the module
    docstring); returns (and writes to ``out/index/manifest.json``) what was built or reused."""
    from vsbench.index.store import build_index

    bench = load_benchmark(benchmark, root, **(benchmark_options or {}))
    merge_benchmark(benchmark, root, out, benchmark_options)
    requests = search_requests(bench, _merged_features(bench, out), settings)
    indexes = []
    for request in requests:
        for info in build_index(request, out / INDEX_DIR, reference_shards=reference_shards, use_gpu=settings.use_gpu):
            indexes.append({"search": request.name, "folder": str(info.folder), **info.meta})
    manifest: dict[str, Any] = {"benchmark": benchmark, "reference_shards": reference_shards, "indexes": indexes}
    if not requests:
        manifest["note"] = f"{benchmark} ranks without a FAISS index (see its module); nothing to build"
    atomic_write_json(out / INDEX_DIR / INDEX_MANIFEST, manifest)
    return manifest


def search_benchmark(
    benchmark: str, root: Path, out: Path, settings: EvalSettings, *, task: int = 0, search_shards: int = 1,
    reference_shards: int = 1, benchmark_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Search task ``task`` of ``search_shards x reference_shards``: query shard ``task // reference_shards``
    in reference shard ``task % reference_shards`` of every index; finished results are kept."""
    from vsbench.index.store import search_shard

    if not 0 <= task < search_shards * reference_shards:
        raise ValueError(f"search task {task} does not exist: there are {search_shards} query shard(s) x "
                         f"{reference_shards} reference shard(s) = {search_shards * reference_shards} tasks")
    query_shard, reference_shard = divmod(task, reference_shards)
    bench = load_benchmark(benchmark, root, **(benchmark_options or {}))
    _check_reference_shards(out, reference_shards)
    written = []
    for request in search_requests(bench, _merged_features(bench, out), settings):
        written += search_shard(request, out / INDEX_DIR, out / SEARCH_DIR, query_shard=query_shard,
                                query_shards=search_shards, reference_shard=reference_shard,
                                use_gpu=settings.use_gpu)
    return {"task": task, "query_shard": query_shard, "reference_shard": reference_shard,
            "search_shards": search_shards, "reference_shards": reference_shards,
            "results": [str(path) for path in written]}


def score_benchmark(
    benchmark: str, root: Path, out: Path, settings: EvalSettings, *, search_shards: int = 1,
    benchmark_options: dict[str, Any] | None = None,
) -> EvalResult:
    """Merge every search task's results and score them; writes ``metrics.json`` and the benchmark's CSV.
    A missing or stale task result is an error naming it."""
    from vsbench.index.store import collect

    bench = load_benchmark(benchmark, root, **(benchmark_options or {}))
    features = _merged_features(bench, out)
    requests = search_requests(bench, features, settings)
    if not requests:
        return _write_result(benchmark, out, bench.evaluate(features, settings))
    results = {request.name: collect(request, out / INDEX_DIR, out / SEARCH_DIR, query_shards=search_shards)
               for request in requests}
    return _write_result(benchmark, out, bench.score(features, settings, results))


def search_requests(bench: Any, features: dict[str, FeatureSet], settings: EvalSettings) -> list[Any]:
    """The benchmark's FAISS searches; none for benchmarks that rank otherwise."""
    ask = getattr(bench, "search_requests", None)
    return [] if ask is None else ask(features, settings)


def _check_reference_shards(out: Path, reference_shards: int) -> None:
    path = out / INDEX_DIR / INDEX_MANIFEST
    try:
        built = read_json(path).get("reference_shards")
    except (OSError, ValueError, AttributeError):
        raise ValueError(f"{path}: no index manifest; run the index step first") from None
    if built != reference_shards:
        raise ValueError(f"{path}: the index was built with {built} reference shard(s), the search asks for "
                         f"{reference_shards}; use the same number in both steps")


def _merged_features(bench: Any, out: Path) -> dict[str, FeatureSet]:
    from vsbench.retrieval.embed import load_merged

    return {name: load_merged(out / FEATURES_DIR, name) for name in bench.image_sets()}


def _write_result(benchmark: str, out: Path, result: EvalResult) -> EvalResult:
    atomic_write_json(out / "metrics.json", {"benchmark": benchmark, "records": result.records})
    if result.csv_name:
        rows = result.csv_rows if result.csv_rows is not None else result.records
        atomic_write_text(out / result.csv_name, records_to_csv(rows, result.csv_columns))
    return result


def records_to_csv(records: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """The original table: columns in the benchmark's own names, matched to the rows' keys as they
    are or, for our MLflow-safe records, lower-cased with '-' as '_' (``accuracy-at-1`` <- ``accuracy_at_1``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        lookup = {key.lower(): value for key, value in record.items()}
        writer.writerow([record[column] if column in record else lookup.get(column.lower().replace("-", "_"), "")
                         for column in columns])
    return buffer.getvalue()


def flat_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """One flat MLflow/KFP metrics dict: ``<variant>__<metric>`` for every numeric field, where the
    variant joins the record's string fields (``PCAW512,L2norm,Flat`` -> ``PCAW512_L2norm_Flat``)."""
    out: dict[str, float] = {}
    for record in records:
        labels = [str(v) for v in record.values() if isinstance(v, str)]
        prefix = "__".join(_safe(label) for label in labels)
        for key, value in record.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{prefix}__{key}" if prefix else key] = float(value)
    return out


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).strip("_") or "x"


def load_json_option(text: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value
