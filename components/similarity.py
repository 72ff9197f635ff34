"""Kubeflow components of the similarity engine: embed (one shard), index, search (one task), score."""


from kfp import dsl
from kfp.dsl import Artifact, Metrics, Output

from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def shard_list(num_shards: int) -> list[int]:
    """``[0, ..., num_shards - 1]``: the items a ParallelFor fans out over."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1, got {num_shards}")
    return list(range(num_shards))


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def embed_shard(
    benchmark: str, root: str, out: str, model: str, shard: int, num_shards: int, benchmark_options: str,
    model_options: str, batch_size: int, device: str, experiment: str, kfp_run_id: str,
    manifest: Output[Artifact], metrics: Output[Metrics], seed: int = 0,
):
    """Embed shard ``shard`` of every image set of ``benchmark`` with ``model`` (resumable);
    ``seed`` draws ``{"weights": "random"}`` (0 when a caller gives none, as before it existed).

    Runs inside a ParallelFor, so it finds the MLflow parent run by the KFP run id (see
    ``vsbench.tracking.parent_run_for``) rather than taking it from the opening task."""
    from vsbench.retrieval.engine import load_json_option
    from vsbench.steps.abid import similarity_embed_step
    from vsbench.tracking import parent_run_for

    parent_run_id = parent_run_for(experiment, kfp_run_id)
    result = similarity_embed_step(
        benchmark, root, out, model, shard=shard, num_shards=num_shards,
        benchmark_options=load_json_option(benchmark_options, "benchmark_options"),
        model_options=load_json_option(model_options, "model_options"), batch_size=batch_size, device=device,
        parent_run_id=parent_run_id, manifest_path=manifest.path, progress=False, seed=seed)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def search_tasks(search_shards: int, reference_shards: int) -> list[int]:
    """``[0, ..., search_shards x reference_shards - 1]``: task t searches query shard t // reference_shards
    in reference shard t % reference_shards."""
    if search_shards < 1 or reference_shards < 1:
        raise ValueError(f"search_shards and reference_shards must be at least 1, got {search_shards} and "
                         f"{reference_shards}")
    return list(range(search_shards * reference_shards))


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def index(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, score_norm: str, reference_shards: int,
    benchmark_options: str, parent_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics],
):
    """Merge the embedding shards; train each codec (faiss-gpu when present) and persist its index in
    ``reference_shards`` parts under ``out/index`` (reused when built before for the same inputs)."""
    from vsbench.retrieval.engine import load_json_option
    from vsbench.steps.abid import similarity_index_step

    result = similarity_index_step(
        benchmark, root, out, model=model, codecs=codecs, k=k, score_norm=score_norm,
        reference_shards=reference_shards, benchmark_options=load_json_option(benchmark_options, "benchmark_options"),
        parent_run_id=parent_run_id, manifest_path=manifest.path)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def search(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, score_norm: str, search_params: str,
    task: int, search_shards: int, reference_shards: int, benchmark_options: str, experiment: str, kfp_run_id: str,
    manifest: Output[Artifact], metrics: Output[Metrics],
):
    """Search task ``task``: one query shard in one reference shard of every index (resumable).

    Runs inside a ParallelFor, so it finds the MLflow parent run by the KFP run id."""
    from vsbench.retrieval.engine import load_json_option
    from vsbench.steps.abid import similarity_search_step
    from vsbench.tracking import parent_run_for

    result = similarity_search_step(
        benchmark, root, out, task=task, search_shards=search_shards, reference_shards=reference_shards,
        model=model, codecs=codecs, k=k, score_norm=score_norm, search_params=search_params,
        benchmark_options=load_json_option(benchmark_options, "benchmark_options"),
        parent_run_id=parent_run_for(experiment, kfp_run_id), manifest_path=manifest.path)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def score(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, global_cap: int, score_norm: str,
    search_params: str, search_shards: int, benchmark_options: str, parent_run_id: str, manifest: Output[Artifact],
    metrics: Output[Metrics],
):
    """Merge the search tasks' results into each query's global top k; the benchmark's own metrics."""
    from vsbench.retrieval.engine import load_json_option
    from vsbench.steps.abid import similarity_score_step

    result = similarity_score_step(
        benchmark, root, out, model=model, codecs=codecs, k=k, global_cap=global_cap, score_norm=score_norm,
        search_shards=search_shards, search_params=search_params,
        benchmark_options=load_json_option(benchmark_options, "benchmark_options"),
        parent_run_id=parent_run_id, manifest_path=manifest.path)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)
