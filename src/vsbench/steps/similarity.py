"""The similarity pipeline's steps (embed one shard, index, search one task, score) over one
:class:`~vsbench.runspec.run.SimilarityRun`, and :func:`run_inline`, the same steps one after another
in this process with one :class:`~vsbench.retrieval.engine.Engine` (each input read once).

The fan-out is defined here once: :func:`embed_shards` and :func:`search_tasks` are what the
pipeline's ParallelFors iterate over (their components return these lists) and what the inline
runner loops over.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from vsbench.benchmarks.base import Benchmark
from vsbench.io.inputs import read_json
from vsbench.io.locks import output_lock, step_lock
from vsbench.retrieval.engine import Engine
from vsbench.runspec.run import BenchmarkRun, SimilarityRun
from vsbench.steps.base import StepResult, finish, save_figure
from vsbench.steps.evaluate import log_step_evaluations
from vsbench.tracking.names import flat_metrics
from vsbench.tracking.runs import child_run


def embed_shards(num_shards: int) -> list[int]:
    """The embed tasks: ``[0, ..., num_shards - 1]``."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1, got {num_shards}")
    return list(range(num_shards))


def search_tasks(search_shards: int, reference_shards: int, merge_ondisk: bool = False) -> list[int]:
    """The search tasks: task t searches query shard t // reference_shards in reference shard
    t % reference_shards; with ``merge_ondisk``, query shard t in the merged on-disk index (the
    whole gallery in one probe: one task per query shard)."""
    if search_shards < 1 or reference_shards < 1:
        raise ValueError(f"search_shards and reference_shards must be at least 1, got {search_shards} and "
                         f"{reference_shards}")
    return list(range(search_shards * (1 if merge_ondisk else reference_shards)))


def _search_params(run: BenchmarkRun, model: str) -> dict[str, Any]:
    return {"benchmark": run.benchmark, "model": model, "codecs": run.codecs, "k": run.k,
            "score_norm": run.score_norm or "none"}


def similarity_embed_step(
    run: SimilarityRun, out: str, *, shard: int = 0, batch_size: int = 64, device: str = "auto",
    parent_run_id: str = "", manifest_path: str | None = None, progress: bool = True, engine: Engine | None = None,
    compile: str = "auto",
    decode: str = "auto",
) -> StepResult:
    """Embed shard ``shard`` of ``run.num_shards`` of every image set; the run's ``seed`` draws
    ``{"weights": "random"}`` and is a param of the step's run. Per set, ``<set>_images_per_second``
    (images over the seconds after the model was built, as before), ``<set>_images_per_second_steady``
    and ``<set>_startup_seconds`` (vsbench.runtime.throughput). ``decode``: where the JPEGs are
    decoded (vsbench.imaging.modes; params ``decode_path`` and ``decode_reason`` say what was taken
    and why, :func:`decode_params`); metric ``decode_cpu_fallbacks`` counts the images the CPU
    decoded one by one instead of the GPU."""
    engine = engine or Engine(run, Path(out))
    params = {"benchmark": run.benchmark, "model": run.model, "shard": shard, "num_shards": run.num_shards,
              "batch_size": batch_size, "device": device, "model_options": json.dumps(run.model_options),
              "seed": run.seed, "compile": compile, "decode": decode}
    started = time.perf_counter()
    with step_lock(out, f"embed-shard-{shard}-of-{run.num_shards}"), \
            child_run(parent_run_id, f"embed-shard-{shard}-of-{run.num_shards}", params) as tracker:
        written = engine.embed_shard(run.model, shard=shard, num_shards=run.num_shards,
                                     model_options=run.model_options, batch_size=batch_size, device=device,
                                     progress=progress, seed=run.seed, compile=compile, decode=decode)
        manifests = {name: _read_manifest(path) for name, path in written.items()}
        metrics = {f"{name}_images": float(m.get("count", 0)) for name, m in manifests.items()}
        metrics.update({f"{name}_images_per_second": float(m.get("images_per_second", 0.0))
                        for name, m in manifests.items()})
        # Only where measured: a shard kept from before, or all cache hits, has no steady rate.
        metrics.update({f"{name}_{key}": float(m[field]) for name, m in manifests.items()
                        for key, field in (("images_per_second_steady", "images_per_second_steady"),
                                           ("startup_seconds", "startup_seconds"))
                        if isinstance(m.get(field), (int, float))})
        metrics["failed_images"] = float(sum(len(m.get("failed", [])) for m in manifests.values()))
        decoded = [m["decode"] for m in manifests.values() if (m.get("decode") or {}).get("on_device")]
        if decoded:
            metrics["decode_cpu_fallbacks"] = float(sum(d.get("cpu_fallbacks", 0) for d in decoded))
        tracker.log_params(decode_params(manifests))
        # The embedding cache: its key (the same for every set of one model) goes to the run's
        # params, in full to the manifest artifact; hits say how much was not embedded again.
        caches = {name: m["cache"] for name, m in manifests.items() if (m.get("cache") or {}).get("enabled")}
        metrics.update({f"{name}_cache_hits": float(c["hits"]) for name, c in caches.items()})
        keys = sorted({c["key_sha256"] for c in caches.values()})
        if keys:
            first = next(iter(caches.values()))["key"]
            tracker.log_params({"embedding_cache_key": ",".join(keys), "weights_sha256": first["weights_sha256"],
                                "preprocessing": json.dumps(first["preprocessing"], sort_keys=True)})
        return finish(tracker, StepResult(out, metrics, {"shards": written, "manifests": manifests}),
                      manifest_path, f"embed_shard_{shard}.json", started)


def decode_params(manifests: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The decode path the shards took (``decode_path``: device or workers, comma-joined where sets
    differ) and why (``decode_reason``: ``auto``'s measured source, vsbench.imaging.modes.AUTO_DECODE),
    as the run's params: what ``--decode auto`` picked is visible in MLflow's compare view. A shard
    kept from before, or a precomputed model, records none: no param then."""
    decodes = [m["decode"] for m in manifests.values() if isinstance(m.get("decode"), dict) and m["decode"].get("path")]
    if not decodes:
        return {}
    return {"decode_path": ",".join(sorted({str(d["path"]) for d in decodes})),
            "decode_reason": " | ".join(sorted({str(d.get("reason", "")) for d in decodes}))}


def _read_manifest(shard_path: str) -> dict[str, Any]:

    candidates = [Path(shard_path).with_suffix(".json"), Path(str(shard_path) + ".json")]
    for candidate in candidates:
        if candidate.exists():
            return read_json(candidate)
    return {}


def asked_embedding(model_options: str, seed: int) -> dict[str, Any]:
    """What a pipeline's index, search or score task checks its features against besides the model
    (the step commands' ``--model-options`` and ``--seed``): the model options as JSON text ("": not
    checked) and the seed (-1: not checked; a KFP parameter cannot be None)."""
    from vsbench.runspec.run import json_object

    return {"model_options": json_object(model_options, "model_options") if model_options.strip() else None,
            "seed": None if seed < 0 else seed}


def fill_tasks(reference_shards: int) -> list[int]:
    """The index step's fill tasks: one per reference shard, ``[0, ..., reference_shards - 1]``."""
    if reference_shards < 1:
        raise ValueError(f"reference_shards must be at least 1, got {reference_shards}")
    return list(range(reference_shards))


def similarity_index_step(
    run: BenchmarkRun, out: str, *, model: str = "", parent_run_id: str = "", manifest_path: str | None = None,
    engine: Engine | None = None, stage: str = "all", shard: int | None = None,
    model_options: dict[str, Any] | None = None, seed: int | None = None,
) -> StepResult:
    """Build (or reuse) each FAISS index, its references in ``run.reference_shards``; ``stage``
    ``train``, ``fill`` (with ``shard``) or ``finish`` runs one of its tasks, ``all`` the three.
    The features must come from ``run.root``'s images and from ``model`` (with ``model_options`` and
    ``seed`` where given): :class:`~vsbench.retrieval.engine.Engine` checks both before using them."""
    engine = engine or Engine(run, Path(out), model=model, model_options=model_options, seed=seed)
    params = {**_search_params(run, model), "reference_shards": run.reference_shards, "stage": stage,
              "merge_ondisk": run.merge_ondisk}
    name = f"index-{run.benchmark}" + ("" if stage == "all" else f"-{stage}") + ("" if shard is None else f"-{shard}")
    started = time.perf_counter()
    with step_lock(out, name), child_run(parent_run_id, name, params) as tracker:
        manifest = engine.index(stage, shard)
        if stage == "train":
            trained = manifest["trained"]
            metrics = {"codecs_trained": float(sum(not t["reused"] for t in trained)),
                       "codecs_reused": float(sum(t["reused"] for t in trained))}
        elif stage == "fill":
            filled = manifest["filled"]
            metrics = {"shards_filled": float(sum(not f["kept"] for f in filled)),
                       "shards_kept": float(sum(f["kept"] for f in filled)),
                       "filled_vectors": float(sum(f["count"] for f in filled))}
        else:
            indexes = manifest["indexes"]
            metrics = {"indexes": float(len(indexes)), "indexes_reused": float(sum(i["reused"] for i in indexes)),
                       "indexed_vectors": float(sum(i["count"] for i in indexes))}
        file_name = "index.json" if stage in ("all", "finish") else (
            f"index_{stage}.json" if shard is None else f"index_{stage}_{shard}.json")
        return finish(tracker, StepResult(out, metrics, manifest), manifest_path, file_name, started)


def similarity_search_step(
    run: BenchmarkRun, out: str, *, task: int = 0, model: str = "", parent_run_id: str = "",
    manifest_path: str | None = None, engine: Engine | None = None, model_options: dict[str, Any] | None = None,
    seed: int | None = None,
) -> StepResult:
    """One search task: query shard ``task // reference_shards`` in reference shard ``task % reference_shards``
    (the features checked as :func:`similarity_index_step` says)."""
    engine = engine or Engine(run, Path(out), model=model, model_options=model_options, seed=seed)
    params = {**_search_params(run, model), "task": task, "search_shards": run.search_shards,
              "reference_shards": run.reference_shards, "search_params": run.search_params or "-",
              "merge_ondisk": run.merge_ondisk}
    started = time.perf_counter()
    with step_lock(out, f"search-task-{task}-of-{run.search_tasks}"), \
            child_run(parent_run_id, f"search-{run.benchmark}-task-{task}-of-{run.search_tasks}", params) as tracker:
        manifest = engine.search(task)
        metrics = {"result_files": float(len(manifest["results"]))}
        return finish(tracker, StepResult(out, metrics, manifest), manifest_path, f"search_{task}.json", started)


def similarity_score_step(
    run: BenchmarkRun, out: str, *, model: str = "", parent_run_id: str = "", manifest_path: str | None = None,
    engine: Engine | None = None, model_options: dict[str, Any] | None = None, seed: int | None = None,
) -> StepResult:
    """Merge the search tasks' results, score; the original table and plots go to MLflow as artifacts
    (the features checked as :func:`similarity_index_step` says)."""
    from vsbench.reporting import plots

    engine = engine or Engine(run, Path(out), model=model, model_options=model_options, seed=seed)
    params = {**_search_params(run, model), "global_cap": run.global_cap or "none",
              "search_shards": run.search_shards, "search_params": run.search_params or "-"}
    started = time.perf_counter()
    began_ms = int(time.time() * 1000)  # the evaluations' start time in MLflow (wall clock, not perf_counter)
    with step_lock(out, "score"), child_run(parent_run_id, f"score-{run.benchmark}", params) as tracker:
        result = engine.score()
        metrics = flat_metrics(result.records)
        if result.csv_name:
            tracker.log_artifact(Path(out) / result.csv_name)
        saved = []
        for name, figure in result.figures.items():
            artifact = name if name.endswith(".png") else f"plots/{name}.png"
            tracker.log_figure(figure, artifact)
            save_figure(figure, Path(out) / artifact)  # beside the CSV: a command run attaches it later
            saved.append(artifact)
            plots.close(figure)
        # One MLflow run per record under the parent, plain metric names (issue 38); this step's own
        # run keeps the files and its timing, the KFP Metrics output the flat names.
        log_step_evaluations(parent_run_id, run, model or engine.model, result.records, Path(out),
                             units=result.unit_files, started_ms=began_ms)
        manifest = {"records": result.records, "csv": result.csv_name, "plots": saved, "units": result.unit_files}
        return finish(tracker, StepResult(out, metrics, manifest), manifest_path, "score.json", started,
                      tracked=("step_seconds",))


def run_inline(run: SimilarityRun, out: Path, *, batch_size: int = 64, device: str = "auto",
               progress: bool = True, bench: Benchmark | None = None, compile: str = "auto",
               decode: str = "auto") -> StepResult:
    """Every step of the similarity pipeline in this process, in the pipeline's order and fan-out,
    with one engine: the benchmark's files, the merged features and the search requests are read
    once. Returns the score step's result. The run holds ``out`` exclusively (one writer per
    folder): a second run into it stops with one line naming this one; each step's own lock is then
    this process's (locks are re-entrant within a process)."""
    with output_lock(out, what=str(out)):
        return _run_steps(run, Path(out), batch_size=batch_size, device=device, progress=progress, compile=compile,
                          decode=decode, bench=bench)


def _run_steps(run: SimilarityRun, out: Path, *, batch_size: int, device: str, progress: bool,
               compile: str = "auto", decode: str = "auto", bench: Benchmark | None = None) -> StepResult:
    engine = Engine(run, Path(out), bench=bench)  # the benchmark the run's checks read: not read twice
    for shard in embed_shards(run.num_shards):
        similarity_embed_step(run, str(out), shard=shard, batch_size=batch_size, device=device, progress=progress,
                              engine=engine, compile=compile, decode=decode)
    similarity_index_step(run, str(out), model=run.model, engine=engine)
    for task in search_tasks(run.search_shards, run.reference_shards, run.merge_ondisk):
        similarity_search_step(run, str(out), task=task, model=run.model, engine=engine)
    return similarity_score_step(run, str(out), model=run.model, engine=engine)
