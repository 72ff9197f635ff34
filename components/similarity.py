"""Kubeflow components of the similarity engine: shard list, embed (one shard), evaluate."""


from kfp import dsl
from kfp.dsl import Artifact, Metrics, Output

from vsbench.platform.images import CPU_IMAGE, GPU_IMAGE


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
    manifest: Output[Artifact], metrics: Output[Metrics],
):
    """Embed shard ``shard`` of every image set of ``benchmark`` with ``model`` (resumable).

    Runs inside a ParallelFor, so it finds the MLflow parent run by the KFP run id (see
    ``vsbench.tracking.parent_run_for``) rather than taking it from the opening task."""
    from vsbench.similarity import load_json_option
    from vsbench.steps import similarity_embed_step
    from vsbench.tracking import parent_run_for

    parent_run_id = parent_run_for(experiment, kfp_run_id)
    result = similarity_embed_step(
        benchmark, root, out, model, shard=shard, num_shards=num_shards,
        benchmark_options=load_json_option(benchmark_options, "benchmark_options"),
        model_options=load_json_option(model_options, "model_options"), batch_size=batch_size, device=device,
        parent_run_id=parent_run_id, manifest_path=manifest.path, progress=False)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def evaluate(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, global_cap: int, score_norm: str,
    benchmark_options: str, parent_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics],
):
    """Merge shards, build the FAISS codecs (faiss-gpu when present), search, score."""
    from vsbench.similarity import load_json_option
    from vsbench.steps import similarity_evaluate_step

    result = similarity_evaluate_step(
        benchmark, root, out, model=model, codecs=codecs, k=k, global_cap=global_cap, score_norm=score_norm,
        benchmark_options=load_json_option(benchmark_options, "benchmark_options"), parent_run_id=parent_run_id,
        manifest_path=manifest.path)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)
