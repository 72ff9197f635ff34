"""The similarity pipeline: one benchmark x one model x codecs, embedding fanned out over shards.

shard_list -> ParallelFor(embed_shard) -> evaluate, inside an exit handler that closes the MLflow
parent run. Compile with ``vsbench compile``; ``vsbench similarity run`` runs the same steps without Kubeflow.
"""

from kfp import dsl
from vsbench.components.similarity import embed_shard, evaluate, shard_list
from vsbench.pipelines.tracked import tracked_run

from vsbench.platform.cluster import RETRIES, ClusterSettings, apply

PIPELINE_NAME = "vsbench-similarity"


def build_similarity_pipeline(cluster: ClusterSettings | None = None):
    @dsl.pipeline(name=PIPELINE_NAME, description="Embed a benchmark's images with a model, index with FAISS, score.")
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
        batch_size: int = 64,
        device: str = "auto",
        experiment: str = "vsbench-similarity",
        params_json: str = "{}",
    ):
        """``global_cap`` 0 keeps k per query; ``score_norm`` "" reports only unnormalized scores."""
        with tracked_run(experiment, PIPELINE_NAME, params_json, cluster) as opened:
            shards = shard_list(num_shards=num_shards)
            shards.set_caching_options(False)
            with dsl.ParallelFor(shards.output) as shard:
                embedded = embed_shard(benchmark=benchmark, root=root, out=out, model=model, shard=shard,
                                       num_shards=num_shards, benchmark_options=benchmark_options,
                                       model_options=model_options, batch_size=batch_size, device=device,
                                       experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER
                                       ).after(opened)
                embedded.set_caching_options(False)  # resumable on its own: complete shards are skipped
                apply(embedded, "gpu", cluster, RETRIES["embed"])
            scored = evaluate(benchmark=benchmark, root=root, out=out, model=model, codecs=codecs, k=k,
                              global_cap=global_cap, score_norm=score_norm, benchmark_options=benchmark_options,
                              parent_run_id=opened.output).after(embedded)
            scored.set_caching_options(False)
            apply(scored, "gpu", cluster, RETRIES["evaluate"])
            apply(shards, "light", cluster)

    return similarity_pipeline


similarity_pipeline = build_similarity_pipeline()
