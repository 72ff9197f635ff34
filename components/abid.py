"""Kubeflow components of the ABID pipeline: thin typed wrappers around ``vsbench.steps.abid``.

Each body imports vsbench and makes one call (KFP ships only the function's source, and the
image, or the local environment under ``kfp.local``, provides vsbench). Large data stays under
the data root (``raw/``, ``tasks/``, ``bin-images-resize/``, ``runs/``), which every step derives
from ``data_root``, so sharded steps inside a ParallelFor need no outputs passed between them;
the artifacts carry manifests.

The run leases its data root (``vsbench.io.locks``): the opening step claims it for the KFP run,
each step that writes under it holds the lease while it works (``folder_lease``, given the run id
as ``kfp_run_id``), the exit handler releases it; a step of another run is refused in one line.
"""

from kfp import dsl
from kfp.dsl import Artifact, ClassificationMetrics, Metrics, Output

from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def open_tracking(experiment: str, kfp_run_id: str, pipeline: str, params_json: str, folders: str = "") -> str:
    """Lease the run's output ``folders`` (one folder, or a JSON list) to this KFP run, then create
    (or find, on retry) the MLflow parent run of this pipeline run; "" when offline.

    A params_json that is not a JSON object fails here, first, with one line naming it; a folder
    leased by another live run fails here too, naming that run (``vsbench.io.locks.claim_lease``)."""
    from vsbench.io.locks import claim_lease, leased_folders
    from vsbench.runspec.run import json_object
    from vsbench.tracking.runs import open_parent_run

    params = json_object(params_json, "params_json")
    for folder in leased_folders(folders):
        claim_lease(folder, kfp_run_id)
    return open_parent_run(experiment, kfp_run_id, pipeline, params)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def close_tracking(experiment: str, kfp_run_id: str, status: dsl.PipelineTaskFinalStatus, folders: str = ""):
    """Exit handler: mark the parent run FINISHED or FAILED with the pipeline's final state, and
    release this run's lease on its ``folders`` (another run's lease is left alone).

    An exit task may not depend on other tasks, so it finds the parent by its KFP run id tag.
    """
    from vsbench.io.locks import leased_folders, release_lease
    from vsbench.tracking.runs import close_parent_run

    close_parent_run(experiment, kfp_run_id, status.state == "SUCCEEDED")
    for folder in leased_folders(folders):
        release_lease(folder, kfp_run_id)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def abid_download(
    source: str, data_root: str, endpoint_url: str, limit: int, concurrency: int, shard: int, num_shards: int,
    experiment: str, kfp_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics],
):
    """Mirror shard ``shard`` of the ABID bucket into ``<data_root>/raw``; resumable. Inside a
    ParallelFor, so the MLflow parent is found by the KFP run id (``tracking.parent_run_for``)."""
    from vsbench.io.locks import folder_lease
    from vsbench.steps.abid import abid_download_step
    from vsbench.tracking.runs import parent_run_for

    parent_run_id = parent_run_for(experiment, kfp_run_id)
    with folder_lease(data_root, kfp_run_id):  # this run's lease on data_root, renewed while it works
        result = abid_download_step(source, f"{data_root}/raw", endpoint_url=endpoint_url, limit=limit,
                                    concurrency=concurrency, shard=shard, num_shards=num_shards,
                                    parent_run_id=parent_run_id, manifest_path=manifest.path, progress=False)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def abid_prepare(
    data_root: str, seed: int, val_fraction: float, max_per_class: int, parent_run_id: str,
    manifest: Output[Artifact], metrics: Output[Metrics], kfp_run_id: str = "",
):
    """Split and task metadata files from ``<data_root>/raw`` into ``<data_root>/tasks``."""
    from vsbench.io.locks import folder_lease
    from vsbench.steps.abid import abid_prepare_step

    with folder_lease(data_root, kfp_run_id):  # this run's lease on data_root, renewed while it works
        result = abid_prepare_step(f"{data_root}/raw", f"{data_root}/tasks", seed=seed, val_fraction=val_fraction,
                                   max_per_class=max_per_class, parent_run_id=parent_run_id,
                                   manifest_path=manifest.path, progress=False)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def abid_resize(
    data_root: str, size: int, decode: str, workers: int, shard: int, num_shards: int, experiment: str,
    kfp_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics], verify_inputs: str = "",
):
    """Resize shard ``shard`` of the bin images into ``<data_root>/bin-images-resize`` (inside a
    ParallelFor: the MLflow parent is found by the KFP run id). ``decode``: full (the challenge's
    pixels, the pipeline's default), fast or draft (``vsbench abid resize --decode``)."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.steps.abid import abid_resize_step
    from vsbench.tracking.runs import parent_run_for

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)

    parent_run_id = parent_run_for(experiment, kfp_run_id)
    with folder_lease(data_root, kfp_run_id):  # this run's lease on data_root, renewed while it works
        result = abid_resize_step(f"{data_root}/raw", f"{data_root}/bin-images-resize", size=size, decode=decode,
                                  workers=workers, shard=shard, num_shards=num_shards, parent_run_id=parent_run_id,
                                  manifest_path=manifest.path, progress=False)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def abid_train_counting(
    data_root: str, profile: str, overrides_json: str, seed: int, device: str, parent_run_id: str,
    manifest: Output[Artifact], metrics: Output[Metrics], backend: str = "pod", nodes: int = 2,
    gpus_per_node: int = 1, verify_inputs: str = "", kfp_run_id: str = "",
):
    """Train the ResNet-34 counting baseline (resumable); writes runs/counting/counting_result.txt.

    backend "pod": one device, in this step's pod. "trainjob": the step submits a Kubeflow Trainer v2
    TrainJob of ``nodes`` x ``gpus_per_node`` (vsbench.platform.trainjob), streams its nodes' logs
    here, and fails when it fails; its rank 0 logs under the parent run. On a Training Operator v1
    cluster, the PyTorchJob of k8s/training writes the same runs/counting, and this step (same
    profile and seed) then finds the finished checkpoints and only predicts, exports and logs."""
    from vsbench.steps.abid import abid_train_in_pipeline

    for name, value in abid_train_in_pipeline(
            "counting", data_root, profile=profile, overrides_json=overrides_json, seed=seed, device=device,
            parent_run_id=parent_run_id, manifest_path=manifest.path, backend=backend, nodes=nodes,
            gpus_per_node=gpus_per_node, verify_inputs=verify_inputs, kfp_run_id=kfp_run_id).items():
        metrics.log_metric(name, value)


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def abid_train_siamese(
    data_root: str, profile: str, overrides_json: str, seed: int, device: str, parent_run_id: str,
    manifest: Output[Artifact], metrics: Output[Metrics], backend: str = "pod", nodes: int = 2,
    gpus_per_node: int = 1, verify_inputs: str = "", kfp_run_id: str = "",
):
    """Train the siamese verification baseline (resumable); writes runs/siamese/obj_verification_result.txt.

    Several GPUs or nodes: backend "trainjob", as for counting."""
    from vsbench.steps.abid import abid_train_in_pipeline

    for name, value in abid_train_in_pipeline(
            "siamese", data_root, profile=profile, overrides_json=overrides_json, seed=seed, device=device,
            parent_run_id=parent_run_id, manifest_path=manifest.path, backend=backend, nodes=nodes,
            gpus_per_node=gpus_per_node, verify_inputs=verify_inputs, kfp_run_id=kfp_run_id).items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def abid_quantity(data_root: str, parent_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics],
                  kfp_run_id: str = ""):
    """Quantity-verification baseline from the counting predictions (runs/quantity)."""
    from vsbench.io.locks import folder_lease
    from vsbench.steps.abid import abid_quantity_step

    with folder_lease(data_root, kfp_run_id):  # this run's lease on data_root, renewed while it works
        result = abid_quantity_step(f"{data_root}/tasks", f"{data_root}/runs/counting/counting_result.txt",
                                    f"{data_root}/runs/quantity", parent_run_id=parent_run_id,
                                    manifest_path=manifest.path)
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def abid_score(
    data_root: str, parent_run_id: str, manifest: Output[Artifact], metrics: Output[Metrics],
    counting_confusion: Output[ClassificationMetrics], verification_confusion: Output[ClassificationMetrics],
    kfp_run_id: str = "",
):
    """Score the three tasks as the challenge does; the Kubeflow UI shows metrics and confusion matrices."""
    from vsbench.io.locks import folder_lease
    from vsbench.steps.abid import abid_score_step

    runs = f"{data_root}/runs"
    with folder_lease(data_root, kfp_run_id):  # this run's lease on data_root, renewed while it works
        result = abid_score_step(f"{data_root}/tasks", f"{runs}/counting/counting_result.txt",
                                 f"{runs}/siamese/obj_verification_result.txt",
                                 f"{runs}/quantity/obj_num_verification_result.txt",
                                 parent_run_id=parent_run_id, manifest_path=manifest.path, units_dir=f"{runs}/score")
    for name, value in result.metrics.items():
        metrics.log_metric(name, value)
    counting_confusion.log_confusion_matrix([str(c) for c in range(6)], result.manifest["counting_confusion_matrix"])
    verification_confusion.log_confusion_matrix(["no", "yes"], result.manifest["verification_confusion_matrix"])
