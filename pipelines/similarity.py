"""The similarity pipeline: one benchmark x one model x codecs; embedding and search fanned out.

shard_list -> ParallelFor(embed-shard) -> index-train -> ParallelFor(index-fill) -> index-finish ->
search-tasks -> ParallelFor(search) -> score, inside an exit handler that closes the MLflow parent run.
The index is trained once, then each reference shard is filled by its own task straight from the
embed shards' files (so no pod holds the whole gallery), and the last index task writes index.json. ``search_shards`` splits the queries and
``reference_shards`` the gallery: search task t takes query shard t // reference_shards and
reference shard t % reference_shards, and score merges them into each query's exact global top k.
Compile with ``vsbench compile``; ``vsbench similarity run`` runs the same steps without Kubeflow.
"""

from kfp import dsl
from vsbench.components.similarity import (
    embed_shard,
    index,
    index_fill,
    index_finish,
    score,
    search,
    search_tasks,
    shard_list,
)
from vsbench.pipelines.form import SIMILARITY_PARAMETERS, benchmark_options_text, describe
from vsbench.pipelines.tracked import tracked_run

from vsbench.platform.cluster import RETRIES, ClusterSettings, apply

PIPELINE_NAME = "vsbench-similarity"
DESCRIPTION = ("One benchmark x one model: embed the images (sharded), index with FAISS (one index per codec), "
               "search (query x reference shards, merged exactly), score as the original benchmark does; logged "
               "to MLflow under one parent run.")


def search_and_score(*, benchmark, root, out, model, codecs, k, global_cap, score_norm, search_params, search_shards,
                     reference_shards, benchmark_options, experiment, parent_run_id, after,
                     cluster: ClusterSettings | None, label: str = "", merge_ondisk=False, verify_inputs="",
                     model_options="", seed=-1):
    """index-train -> ParallelFor(index-fill) -> index-finish -> search-tasks -> ParallelFor(search) -> score
    after ``after``, inside a pipeline function (the similarity and the nightly pipelines both use it);
    returns the score task. ``merge_ondisk`` (IVF codecs): index-finish merges the reference shards into
    one on-disk index and each query shard is searched once in it (search_shards tasks, not x reference_shards).
    ``model_options`` and ``seed`` are the embedding's: every task refuses features of another one."""
    suffix = f" {label}" if label else ""
    common = dict(benchmark=benchmark, root=root, out=out, model=model, codecs=codecs, k=k, score_norm=score_norm,
                  reference_shards=reference_shards, benchmark_options=benchmark_options, verify_inputs=verify_inputs,
                  model_options=model_options, seed=seed)
    run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER  # each step checks the run's lease on ``out`` with it
    trained = index(**common, parent_run_id=parent_run_id, stage="train", kfp_run_id=run_id).after(after)
    fills = shard_list(num_shards=reference_shards).after(trained)
    with dsl.ParallelFor(fills.output) as shard:
        filled = index_fill(**common, shard=shard, experiment=experiment,
                            kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    indexed = index_finish(**common, parent_run_id=parent_run_id, merge_ondisk=merge_ondisk,
                           kfp_run_id=run_id).after(filled)
    tasks = search_tasks(search_shards=search_shards, reference_shards=reference_shards,
                         merge_ondisk=merge_ondisk).after(indexed)
    with dsl.ParallelFor(tasks.output) as task:
        searched = search(benchmark=benchmark, root=root, out=out, model=model, codecs=codecs, k=k,
                          score_norm=score_norm, search_params=search_params, task=task, search_shards=search_shards,
                          reference_shards=reference_shards, benchmark_options=benchmark_options,
                          experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, merge_ondisk=merge_ondisk,
                          verify_inputs=verify_inputs, model_options=model_options, seed=seed)
        searched.set_caching_options(False)  # keeps finished results on its own
    scored = score(benchmark=benchmark, root=root, out=out, model=model, codecs=codecs, k=k, global_cap=global_cap,
                   score_norm=score_norm, search_params=search_params, search_shards=search_shards,
                   benchmark_options=benchmark_options, merge_ondisk=merge_ondisk,
                   parent_run_id=parent_run_id, verify_inputs=verify_inputs, kfp_run_id=run_id,
                   model_options=model_options, seed=seed).after(searched)
    # Caching off: each step reuses what it built before for the same inputs on its own.
    for task_, name, role, retries in ((trained, "index-train", "gpu", RETRIES["index"]),
                                       (fills, "index-fills", "light", 0), (filled, "index-fill", "fill", RETRIES["fill"]),
                                       (indexed, "index-finish", "light", RETRIES["index"]),
                                       (tasks, "search-tasks", "light", 0), (searched, "search", "gpu", RETRIES["search"]),
                                       (scored, "score", "gpu", RETRIES["score"])):
        if suffix:
            task_.set_display_name(name + suffix)
        task_.set_caching_options(False)
        apply(task_, role, cluster, retries)
    return scored


def build_similarity_pipeline(cluster: ClusterSettings | None = None):
    def similarity_pipeline(
        benchmark: str = "disc",
        root: str = "/data/disc2021",
        out: str = "/data/runs/disc-efficientnet_lite0",
        model: str = "efficientnet_lite0",
        model_options: str = "{}",
        benchmark_options: str = "{}",
        codecs: str = "Flat;PCAW512,L2norm,Flat",
        k: int = 10,
        global_cap: int = 0,
        score_norm: str = "1.00[0,2]",
        num_shards: int = 1,
        search_shards: int = 1,
        reference_shards: int = 1,
        merge_ondisk: bool = False,
        search_params: str = "",
        batch_size: int = 64,
        device: str = "auto",
        decode: str = "auto",
        seed: int = 0,
        compile: str = "auto",
        verify_inputs: str = "stat",
        experiment: str = "vsbench-similarity",
        params_json: str = "{}",
    ):
        # The form's texts: pipelines/form.py (KFP reads them from the docstring set below).
        with tracked_run(experiment, PIPELINE_NAME, params_json, cluster, folders=out) as opened:
            shards = shard_list(num_shards=num_shards)
            shards.set_caching_options(False)
            with dsl.ParallelFor(shards.output) as shard:
                embedded = embed_shard(benchmark=benchmark, root=root, out=out, model=model, shard=shard,
                                       num_shards=num_shards, benchmark_options=benchmark_options,
                                       model_options=model_options, batch_size=batch_size, device=device,
                                       experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                                       seed=seed, compile=compile, decode=decode,
                                       verify_inputs=verify_inputs).after(opened)
                embedded.set_caching_options(False)  # resumable on its own: complete shards are skipped
                apply(embedded, "gpu", cluster, RETRIES["embed"])
            search_and_score(benchmark=benchmark, root=root, out=out, model=model, codecs=codecs, k=k,
                             global_cap=global_cap, score_norm=score_norm, search_params=search_params,
                             search_shards=search_shards,
                             reference_shards=reference_shards, benchmark_options=benchmark_options,
                             experiment=experiment, parent_run_id=opened.output, after=embedded, cluster=cluster,
                             merge_ondisk=merge_ondisk, verify_inputs=verify_inputs, model_options=model_options,
                             seed=seed)
            apply(shards, "light", cluster)

    describe(DESCRIPTION, similarity_pipeline,
             {**SIMILARITY_PARAMETERS, "benchmark_options": benchmark_options_text()})
    return dsl.pipeline(name=PIPELINE_NAME, description=DESCRIPTION)(similarity_pipeline)


similarity_pipeline = build_similarity_pipeline()
