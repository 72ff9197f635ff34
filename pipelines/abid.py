"""The ABID pipeline: download and resize fanned out over shards, split and task files, the three
baselines trained and scored, tracked in MLflow as one parent run with a child run per step.

``build_abid_pipeline(cluster)`` attaches the cluster settings (GPUs, resources, node pools,
secrets, the data volume, retries); ``abid_pipeline`` is the plain one kfp.local runs.
Compile with ``vsbench compile --out DIR``; run locally with ``vsbench abid run-local``.
"""

from kfp import dsl
from vsbench.components.abid import (
    abid_download,
    abid_prepare,
    abid_quantity,
    abid_resize,
    abid_score,
    abid_train_counting,
    abid_train_siamese,
)
from vsbench.components.similarity import shard_list
from vsbench.pipelines.form import ABID_PARAMETERS, describe
from vsbench.pipelines.tracked import tracked_run

from vsbench.platform.cluster import RETRIES, ClusterSettings, apply

PIPELINE_NAME = "vsbench-abid"
DESCRIPTION = ("ABID (Amazon Bin Image Dataset): download from S3, split and task files, resize, train the counting "
               "and siamese baselines, answer the quantity questions, score as the challenge does; every step logged "
               "to MLflow under one parent run.")


def build_abid_pipeline(cluster: ClusterSettings | None = None):
    def abid_pipeline(
        data_root: str = "/data/abid",
        source: str = "s3://aft-vbi-pds",
        endpoint_url: str = "",
        limit: int = 0,
        num_shards: int = 1,
        seed: int = 0,
        val_fraction: float = 0.1,
        max_per_class: int = 20000,
        size: int = 224,
        resize_decode: str = "full",
        concurrency: int = 64,
        workers: int = 0,
        train_profile: str = "full",
        train_overrides: str = "{}",
        train_backend: str = "pod",
        train_nodes: int = 2,
        train_gpus_per_node: int = 1,
        device: str = "auto",
        verify_inputs: str = "stat",
        experiment: str = "vsbench-abid",
        params_json: str = "{}",
    ):
        # The form's texts: pipelines/form.py (KFP reads them from the docstring set below).
        with tracked_run(experiment, PIPELINE_NAME, params_json, cluster, folders=data_root) as opened:
            parent = opened.output
            run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER  # each step checks the run's lease on data_root with it
            shards = shard_list(num_shards=num_shards)
            shards.set_caching_options(False)
            with dsl.ParallelFor(shards.output) as shard:
                download = abid_download(source=source, data_root=data_root, endpoint_url=endpoint_url,
                                         limit=limit, concurrency=concurrency, shard=shard, num_shards=num_shards,
                                         experiment=experiment, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER
                                         ).after(opened)
                apply(download, "cpu", cluster, RETRIES["download"])
            prepare = abid_prepare(data_root=data_root, seed=seed, val_fraction=val_fraction,
                                   max_per_class=max_per_class, parent_run_id=parent, kfp_run_id=run_id).after(download)
            apply(prepare, "cpu", cluster)
            with dsl.ParallelFor(shards.output) as shard:
                resize = abid_resize(data_root=data_root, size=size, decode=resize_decode, workers=workers,
                                     shard=shard, num_shards=num_shards, experiment=experiment,
                                     kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                                     verify_inputs=verify_inputs).after(download)
                apply(resize, "cpu", cluster, RETRIES["resize"])
            training = {"profile": train_profile, "overrides_json": train_overrides, "seed": seed, "device": device,
                        "parent_run_id": parent, "backend": train_backend, "nodes": train_nodes,
                        "gpus_per_node": train_gpus_per_node, "verify_inputs": verify_inputs, "kfp_run_id": run_id}
            counting = abid_train_counting(data_root=data_root, **training).after(prepare, resize)
            siamese = abid_train_siamese(data_root=data_root, **training).after(counting)
            # After counting: a profile may start the siamese trunk from the counting network.
            for task in (counting, siamese):
                apply(task, "gpu", cluster, RETRIES["train"])
            quantity = abid_quantity(data_root=data_root, parent_run_id=parent, kfp_run_id=run_id).after(counting)
            score = abid_score(data_root=data_root, parent_run_id=parent, kfp_run_id=run_id).after(quantity, siamese)
            for task in (shards, quantity, score):
                apply(task, "light", cluster)
            # Every step is idempotent and resumable on its own (manifests, checkpoints); KFP's cache
            # would skip a step whose data root changed underneath it, so caching is off on purpose.
            for task in (shards, download, prepare, resize, counting, siamese, quantity, score):
                task.set_caching_options(False)

    describe(DESCRIPTION, abid_pipeline, ABID_PARAMETERS)
    return dsl.pipeline(name=PIPELINE_NAME, description=DESCRIPTION)(abid_pipeline)


abid_pipeline = build_abid_pipeline()
