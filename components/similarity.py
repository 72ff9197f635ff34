"""Kubeflow components of the similarity engine: embed (one shard), index, search (one task), score.

Each step that writes ``out`` holds its run's lease on it (``vsbench.io.locks.folder_lease``: the
lease file names the KFP run, ``kfp_run_id``; another run's live lease refuses the step in one line).
The run id is a parameter, given ``dsl.PIPELINE_JOB_ID_PLACEHOLDER``, not an environment variable:
KFP v2 does not resolve placeholders in ``set_env_variable`` (kubeflow/pipelines#10111); "" (a
caller that gives none) checks no lease.
"""


from kfp import dsl
from kfp.dsl import Artifact, Metrics, Output

from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def shard_list(num_shards: int) -> list[int]:
    """``[0, ..., num_shards - 1]``: the items a ParallelFor fans out over."""
    from vsbench.steps.similarity import embed_shards

    return embed_shards(num_shards)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def embed_shard(
    benchmark: str, root: str, out: str, model: str, shard: int, num_shards: int, benchmark_options: str,
    model_options: str, batch_size: int, device: str, experiment: str, kfp_run_id: str,
    manifest: Output[Artifact], metrics: Output[Metrics], seed: int = 0, compile: str = "auto",
    decode: str = "auto", verify_inputs: str = "",
):
    """Embed shard ``shard`` of every image set of ``benchmark`` with ``model`` (resumable);
    ``seed`` draws ``{"weights": "random"}`` (0 when a caller gives none, as before it existed);
    ``compile``: ``torch.compile`` of the network, auto (on CUDA), on or off; ``decode``: where the
    JPEGs are decoded (auto: the path measured faster on the pod's device; vsbench.imaging.modes).

    Runs inside a ParallelFor, so it finds the MLflow parent run by the KFP run id (see
    ``vsbench.tracking.runs.parent_run_for``) rather than taking it from the opening task."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.runspec.run import SimilarityRun
    from vsbench.steps.similarity import similarity_embed_step
    from vsbench.tracking.runs import parent_run_for

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)

    run = SimilarityRun.parse(benchmark=benchmark, root=root, model=model, num_shards=num_shards,
                        benchmark_options=benchmark_options, model_options=model_options, seed=seed)
    with folder_lease(out, kfp_run_id):  # this run's lease on out, renewed while it works
        result = similarity_embed_step(run, out, shard=shard, batch_size=batch_size, device=device,
                                       parent_run_id=parent_run_for(experiment, kfp_run_id), manifest_path=manifest.path,
                                       progress=False, compile=compile, decode=decode)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def search_tasks(search_shards: int, reference_shards: int, merge_ondisk: bool = False) -> list[int]:
    """``[0, ..., search_shards x reference_shards - 1]``: task t searches query shard t // reference_shards
    in reference shard t % reference_shards; with ``merge_ondisk``, ``[0, ..., search_shards - 1]``, each
    query shard searched once in the merged on-disk index."""
    from vsbench.steps.similarity import search_tasks as tasks

    return tasks(search_shards, reference_shards, merge_ondisk)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def index(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, score_norm: str, reference_shards: int,
    benchmark_options: str, parent_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics],
    stage: str = "all", merge_ondisk: bool = False, verify_inputs: str = "", kfp_run_id: str = "",
    model_options: str = "", seed: int = -1,
):
    """The index step under ``out/index``: ``train`` trains each codec once (faiss-gpu when present)
    and writes it trained and empty, for the fill tasks; ``all`` trains, fills every one of
    ``reference_shards`` shards and finishes in this one task (``merge_ondisk``: IVF shards merged
    into one on-disk index). Everything is reused when built before for the same inputs."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.runspec.run import BenchmarkRun
    from vsbench.steps.similarity import asked_embedding, similarity_index_step

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)

    run = BenchmarkRun.parse(benchmark=benchmark, root=root, codecs=codecs, k=k, score_norm=score_norm,
                       reference_shards=reference_shards, benchmark_options=benchmark_options,
                       merge_ondisk=merge_ondisk)
    with folder_lease(out, kfp_run_id):  # this run's lease on out, renewed while it works
        result = similarity_index_step(run, out, model=model, parent_run_id=parent_run_id, manifest_path=manifest.path,
                                       stage=stage, **asked_embedding(model_options, seed))
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def index_finish(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, score_norm: str, reference_shards: int,
    benchmark_options: str, parent_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics],
    merge_ondisk: bool = False, verify_inputs: str = "", kfp_run_id: str = "",
    model_options: str = "", seed: int = -1,
):
    """The index step's last task: check that every reference shard was filled from this trained
    codec and these features, then write ``index.json`` (what the searches read). Reads only the
    shards' records and the training rows: a small task. With ``merge_ondisk`` (IVF codecs) it
    first merges the shards' inverted lists into one on-disk index, reading each shard mapped, list
    by list: its memory stays small, its disk writes are the gallery's codes once."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.runspec.run import BenchmarkRun
    from vsbench.steps.similarity import asked_embedding, similarity_index_step

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)

    run = BenchmarkRun.parse(benchmark=benchmark, root=root, codecs=codecs, k=k, score_norm=score_norm,
                       reference_shards=reference_shards, benchmark_options=benchmark_options,
                       merge_ondisk=merge_ondisk)
    with folder_lease(out, kfp_run_id):  # this run's lease on out, renewed while it works
        result = similarity_index_step(run, out, model=model, parent_run_id=parent_run_id, manifest_path=manifest.path,
                                       stage="finish", **asked_embedding(model_options, seed))
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def index_fill(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, score_norm: str, reference_shards: int,
    shard: int, benchmark_options: str, experiment: str, kfp_run_id: str, manifest: Output[Artifact],
    metrics: Output[Metrics], verify_inputs: str = "",
    model_options: str = "", seed: int = -1,
):
    """Fill reference shard ``shard`` of every codec's trained index, reading only its rows, in place,
    from the embed step's shard files (its memory grows with the shard, not the gallery); a shard
    already filled from the same trained codec and rows is kept.

    Runs inside a ParallelFor, so it finds the MLflow parent run by the KFP run id."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.runspec.run import BenchmarkRun
    from vsbench.steps.similarity import asked_embedding, similarity_index_step
    from vsbench.tracking.runs import parent_run_for

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)

    run = BenchmarkRun.parse(benchmark=benchmark, root=root, codecs=codecs, k=k, score_norm=score_norm,
                       reference_shards=reference_shards, benchmark_options=benchmark_options)
    with folder_lease(out, kfp_run_id):  # this run's lease on out, renewed while it works
        result = similarity_index_step(run, out, model=model, parent_run_id=parent_run_for(experiment, kfp_run_id),
                                       manifest_path=manifest.path, stage="fill", shard=shard,
                                       **asked_embedding(model_options, seed))
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def search(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, score_norm: str, search_params: str,
    task: int, search_shards: int, reference_shards: int, benchmark_options: str, experiment: str, kfp_run_id: str,
    manifest: Output[Artifact], metrics: Output[Metrics], merge_ondisk: bool = False, verify_inputs: str = "",
    model_options: str = "", seed: int = -1,
):
    """Search task ``task``: one query shard in one reference shard of every index, or with
    ``merge_ondisk`` in the merged on-disk index (resumable).

    Runs inside a ParallelFor, so it finds the MLflow parent run by the KFP run id."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.runspec.run import BenchmarkRun
    from vsbench.steps.similarity import asked_embedding, similarity_search_step
    from vsbench.tracking.runs import parent_run_for

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)

    run = BenchmarkRun.parse(benchmark=benchmark, root=root, codecs=codecs, k=k, score_norm=score_norm,
                       search_params=search_params, search_shards=search_shards, reference_shards=reference_shards,
                       benchmark_options=benchmark_options, merge_ondisk=merge_ondisk)
    with folder_lease(out, kfp_run_id):  # this run's lease on out, renewed while it works
        result = similarity_search_step(run, out, task=task, model=model,
                                        parent_run_id=parent_run_for(experiment, kfp_run_id), manifest_path=manifest.path,
                                        **asked_embedding(model_options, seed))
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def score(
    benchmark: str, root: str, out: str, model: str, codecs: str, k: int, global_cap: int, score_norm: str,
    search_params: str, search_shards: int, benchmark_options: str, parent_run_id: str, manifest: Output[Artifact],
    metrics: Output[Metrics], merge_ondisk: bool = False, verify_inputs: str = "", kfp_run_id: str = "",
    model_options: str = "", seed: int = -1,
):
    """Merge the search tasks' results into each query's global top k; the benchmark's own metrics."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.runspec.run import BenchmarkRun
    from vsbench.steps.similarity import asked_embedding, similarity_score_step

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)

    run = BenchmarkRun.parse(benchmark=benchmark, root=root, codecs=codecs, k=k, global_cap=global_cap,
                       score_norm=score_norm, search_params=search_params, search_shards=search_shards,
                       benchmark_options=benchmark_options, merge_ondisk=merge_ondisk)
    with folder_lease(out, kfp_run_id):  # this run's lease on out, renewed while it works
        result = similarity_score_step(run, out, model=model, parent_run_id=parent_run_id, manifest_path=manifest.path,
                                       **asked_embedding(model_options, seed))
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)
