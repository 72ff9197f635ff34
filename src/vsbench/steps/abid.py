"""The ABID pipeline's steps: download, prepare, resize, train the two baselines, quantity, score."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vsbench.abid.download import DownloadIncomplete, download_abid, manifest_name
from vsbench.abid.ids import RESIZED_DIR
from vsbench.abid.metrics import counting_metrics, verification_metrics
from vsbench.abid.prepare import PREPARE_COUNTS, prepare_abid, require_task_files, tasks_dataset
from vsbench.abid.quantity import RESULT_NAME, run_quantity_baseline
from vsbench.io.locks import output_lock
from vsbench.io.storage import atomic_write_json
from vsbench.platform.trainjob import JOB_ENV, TrainJobRequest, check_request, choose_engine, run_trainjob
from vsbench.steps.base import StepResult, finish, numbers, sharded
from vsbench.tracking.names import NOTE_TAG
from vsbench.tracking.provenance import download_tags, public_endpoint
from vsbench.tracking.runs import Tracker, child_run, log_to_parent, parent_tracker


def abid_download_step(
    source: str, dest: str, *, endpoint_url: str = "", limit: int = 0, concurrency: int = 64,
    shard: int = 0, num_shards: int = 1, parent_run_id: str = "", manifest_path: str | None = None,
    progress: bool = True,
) -> StepResult:
    """Download ABID into ``dest``; fails (after recording everything) when objects are missing."""

    params = {"source": source, "limit": limit, "concurrency": concurrency,
              "endpoint_url": public_endpoint(endpoint_url) or "-", "shard": shard, "num_shards": num_shards}
    started = time.perf_counter()
    with child_run(parent_run_id, sharded("abid-download", shard, num_shards), params) as tracker:
        summary = download_abid(source, Path(dest), limit=limit or None, endpoint_url=endpoint_url or None,
                                concurrency=concurrency, progress=progress, shard=shard, num_shards=num_shards)
        # The parent names the endpoint the objects came from (a mirror or AWS), beside the bucket.
        where = download_tags(source, summary.endpoint)
        tracker.set_tags(where)
        parent_tracker(parent_run_id).set_tags(where)
        data = summary.as_dict()
        metrics = numbers(data, ["listed_keys", "planned", "fetched", "refetched", "skipped", "failed", "ignored_keys",
                                  "duplicate_spellings", "spelling_conflicts", "bytes_fetched", "fetch_seconds",
                                  "objects_per_second", "megabytes_per_second"])
        if summary.spelling_conflicts:  # one line in the component's log; the manifest lists each
            print(summary.conflict_warning(f"{dest}/{manifest_name(shard, num_shards)}"), flush=True)
        result = finish(tracker, StepResult(dest, metrics, data), manifest_path, "download.json", started)
        if not summary.complete:
            raise DownloadIncomplete(summary)
        return result


def abid_prepare_step(
    data: str, out: str, *, seed: int = 0, val_fraction: float = 0.1, max_per_class: int = 20_000,
    parent_run_id: str = "", manifest_path: str | None = None, progress: bool = True,
) -> StepResult:
    """Split and task files; bad metadata is reported in the manifest, never fatal."""

    params = {"seed": seed, "val_fraction": val_fraction, "max_per_class": max_per_class}
    started = time.perf_counter()
    with output_lock(out, what=f"the task files' folder {out}"), \
            child_run(parent_run_id, "abid-prepare", params) as tracker:
        summary = prepare_abid(Path(data), Path(out), seed=seed, val_fraction=val_fraction,
                               max_per_class=max_per_class, progress=progress).as_dict()
        metrics = numbers(summary, list(PREPARE_COUNTS))
        metrics["problems"] = float(len(summary["problems"]))
        metrics["empty_task_files"] = float(len(summary["empty_files"]))
        if summary["warning"]:  # one line in the component's log (the report and the manifest list each file)
            print(summary["warning"], flush=True)
        for name, info in summary["files"].items():
            metrics[f"entries_{name.rsplit('.', 1)[0]}"] = float(info["entries"])
        log_tasks_dataset((tracker, parent_tracker(parent_run_id)), Path(out), "training")
        return finish(tracker, StepResult(out, metrics, summary), manifest_path, "prepare.json", started)


def abid_resize_step(
    data: str, out: str, *, size: int = 224, quality: int = 75, decode: str = "full", workers: int = 0,
    shard: int = 0, num_shards: int = 1, parent_run_id: str = "", manifest_path: str | None = None,
    progress: bool = True, max_failure_rate: float | None = None,
) -> StepResult:
    """Resize every bin image; corrupt inputs are listed in the manifest and skipped.

    A retry (same ``out``) keeps what earlier attempts left valid, so a step stopped by the failure
    rate passes once the threshold is raised (``max_failure_rate``, else ``VSBENCH_MAX_FAILURE_RATE``)."""
    from vsbench.abid.resize import resize_abid

    params = {"size": size, "quality": quality, "decode": decode, "workers": workers or "all usable cores",
              "shard": shard, "num_shards": num_shards}
    started = time.perf_counter()
    with child_run(parent_run_id, sharded("abid-resize", shard, num_shards), params) as tracker:
        summary = resize_abid(Path(data), Path(out), size=size, quality=quality, decode=decode,  # type: ignore[arg-type]
                              workers=workers or None, progress=progress, shard=shard,
                              num_shards=num_shards, max_failure_rate=max_failure_rate).as_dict()
        for line in summary["redone"]:  # one line each in the component's log
            print(f"resize: {line}", flush=True)
        metrics = numbers(summary, ["inputs", "resized", "kept", "failed", "images_per_second"])
        return finish(tracker, StepResult(out, metrics, summary), manifest_path, "resize.json", started)


def _log_training(tracker, history: list[dict[str, float]], title: str, artifact: str) -> None:
    from vsbench.reporting import plots

    figure = plots.training_curves(history, title)
    tracker.log_figure(figure, artifact)
    plots.close(figure)


def _abid_train_step(
    task: str, tasks: str, images: str, out: str, *, profile: str, seed: int, device: str,
    overrides: dict[str, Any] | None, parent_run_id: str, manifest_path: str | None, progress: bool, decode: str = "auto",
) -> StepResult:
    """Shared body of the two training steps: profile, device, child run, per-epoch metrics, the
    training curves, the best model and the result file in MLflow.

    Under torchrun every rank runs this: all train (vsbench.abid.distributed), rank 0 alone opens
    the MLflow child run, exports the model and writes the manifest. Rank 0 holds ``out``'s lock
    for the whole step (one writer per folder; a second run into it stops with one line)."""
    import contextlib

    from vsbench.abid import distributed
    from vsbench.abid.checkpoints import counting_trunk_for
    from vsbench.abid.counting import train_counting
    from vsbench.abid.profiles import get_profile
    from vsbench.abid.siamese import train_siamese

    train, title = {"counting": (train_counting, "counting"), "siamese": (train_siamese, "siamese verification")}[task]
    settings = get_profile(profile, **(overrides or {}))
    architecture = settings.arch if task == "counting" else f"siamese-{settings.arch}"
    require_task_files(Path(tasks), task)  # a folder prepare has not written: say to run it
    # The inputs are held as one of their readers (resize and prepare wait or stop) for the whole
    # training; the training re-checks their digests before each checkpoint all the same (issue 46).
    with distributed.session(device, settings.amp) as (context, setup), \
            distributed.writer_lock(out, context, what=f"{out} (abid train {task})"), \
            distributed.inputs_lock({"--images": images, "--tasks": tasks}, context):
        params = {"profile": profile, "seed": seed, "device": str(setup.device), "amp_dtype": str(setup.amp_dtype),
                  "decode": decode,
                  "architecture": architecture, "task": f"{task}-moderate", "world_size": context.world_size,
                  **settings.model_dump()}
        started = time.perf_counter()
        tracking = (child_run(parent_run_id, f"abid-train-{task}", params) if context.is_main
                    else contextlib.nullcontext(Tracker(None, None)))
        with tracking as tracker:
            def log_epoch(record: dict[str, float]) -> None:
                tracker.log_metrics({k: v for k, v in record.items() if k != "epoch"}, step=int(record["epoch"]))

            extra = {}
            if task == "siamese" and settings.siamese_trunk_init == "counting":
                # counting's best epoch: trained into this --out, or into runs/counting beside runs/siamese.
                extra["trunk_checkpoint"] = counting_trunk_for(Path(out))
            run = train(Path(tasks), Path(images), Path(out), settings, setup, seed=seed, on_epoch_end=log_epoch,
                        progress=progress and context.is_main, context=context, decode=decode, **extra)
            # The validation score of the chosen epoch, and how it was chosen (param epoch_selection,
            # manifest epoch_choice): "val" picks it on the very questions it is reported on.
            metrics = {"chosen_val_accuracy": run.fit.best_score, "chosen_epoch": float(run.fit.best_epoch),
                       **run.fit.chosen_metrics(),
                       "world_size": float(context.world_size), **run.summary_metrics()}
            if run.fit.images_per_second > 0:  # a re-run of a finished training trains nothing: no rate at all
                metrics["train_images_per_second"] = run.fit.images_per_second
            # Start-up and the steady rate apart (vsbench.runtime.throughput): only where measured.
            if run.fit.startup_seconds is not None:
                metrics["train_startup_seconds"] = run.fit.startup_seconds
            if run.fit.steady_images_per_second is not None:
                metrics["train_images_per_second_steady"] = run.fit.steady_images_per_second
            manifest = {"result": str(run.result_path), "checkpoints": str(run.fit.checkpoint_dir),
                        "profile": settings.model_dump(), "resumed_from_epoch": run.fit.resumed_from,
                        "epoch_choice": run.fit.describe_choice(),
                        "checkpoint_identity": run.fit.extra.get("identity_sha256"),
                        "world_size": context.world_size, "decode": {"mode": decode, **run.decode}}
            if os.environ.get(JOB_ENV):  # a node of a TrainJob: its submitter checks the manifest is this job's
                manifest["trainjob"] = os.environ[JOB_ENV]
            if not context.is_main:
                return StepResult(out, metrics, manifest)
            _log_training(tracker, run.fit.history, title, f"plots/{task}_training.png")
            log_tasks_dataset((tracker,), Path(tasks), "training")
            model, example = _best_model_for_export(run, settings.image_size, settings.siamese_pair_features)
            _export_and_register(tracker, model, example, task, run.fit.best_score, parent_run_id)
            tracker.log_artifact(run.result_path)
            if "val_rate_of_train_majority" in metrics:  # the trivial baseline the report draws beside the score
                log_to_parent(parent_run_id, {"counting_majority_accuracy": metrics["val_rate_of_train_majority"]})
            return finish(tracker, StepResult(out, metrics, manifest), manifest_path, f"train_{task}.json", started)


def abid_train_counting_step(tasks: str, images: str, out: str, **kwargs: Any) -> StepResult:
    """Train the counting network (resumes from ``out/checkpoints/counting`` when it holds this
    run's checkpoint) and write counting_result.txt.

    Keyword arguments: profile ("demo"/"full"), seed, device, overrides, parent_run_id, manifest_path,
    progress, decode (where the JPEGs are decoded: vsbench.imaging.modes.DECODE_MODES)."""
    return _abid_train_step("counting", tasks, images, out, **{**_TRAIN_DEFAULTS, **kwargs})


def abid_train_siamese_step(tasks: str, images: str, out: str, **kwargs: Any) -> StepResult:
    """Train the siamese verifier (resumable) and write obj_verification_result.txt (same arguments)."""
    return _abid_train_step("siamese", tasks, images, out, **{**_TRAIN_DEFAULTS, **kwargs})


def abid_train_step(task: str, tasks: str, images: str, out: str, *, backend: str = "pod", nodes: int = 2,
                    gpus_per_node: int = 0, engine: str = "auto", echo: Any = print,
                    open_parent: Callable[[], str] | None = None, **kwargs: Any) -> StepResult:
    """Train one baseline in this process (``backend`` "pod") or as a Trainer v2 TrainJob on
    ``nodes`` nodes x ``gpus_per_node`` GPUs ("trainjob", vsbench.platform.trainjob): the job's rank 0
    runs this same step under the parent run, and its manifest, with the job's name and timings,
    becomes this step's. The job's paths are checked (and made absolute) before anything else;
    ``open_parent`` makes its parent run when none is given, once the job is about to start."""
    if backend == "pod":
        step = abid_train_counting_step if task == "counting" else abid_train_siamese_step
        return step(tasks, images, out, **kwargs)
    if backend != "trainjob":
        raise ValueError(f"train backend must be 'pod' or 'trainjob', not {backend!r}")
    options = {**_TRAIN_DEFAULTS, **kwargs}
    engine = choose_engine(engine)
    request = check_request(TrainJobRequest(
        task=task, tasks=Path(tasks), images=Path(images), out=Path(out), profile=options["profile"],
        overrides=json.dumps(options["overrides"] or {}), seed=options["seed"], device=options["device"],
        parent_run_id=options["parent_run_id"], decode=options["decode"], nodes=nodes,
        gpus_per_node=gpus_per_node), engine)
    # Stop now, in one line, when another run writes ``out``; released at once: the job's rank 0
    # holds the lock while it trains (a submitter holding it would block a job run on this machine).
    with output_lock(request.out, what=f"{request.out} (abid train {task})"):
        pass
    outcome = run_trainjob(request, engine, echo, open_parent)
    manifest = {**outcome.manifest, "trainjob": outcome.name, "trainjob_engine": outcome.engine,
                "trainjob_nodes": outcome.nodes, "trainjob_startup_seconds": round(outcome.startup_seconds, 3),
                "trainjob_seconds": round(outcome.seconds, 3)}
    metrics = {**manifest.get("metrics", {}), "trainjob_seconds": round(outcome.seconds, 3)}
    if options["manifest_path"]:
        atomic_write_json(Path(options["manifest_path"]), manifest)
    return StepResult(out, metrics, manifest)


def abid_train_in_pipeline(task: str, data_root: str, *, profile: str, overrides_json: str, seed: int,
                           device: str, parent_run_id: str, manifest_path: str, backend: str, nodes: int,
                           gpus_per_node: int, verify_inputs: str, kfp_run_id: str) -> dict[str, float]:
    """The body of the pipeline's two training components (counting, siamese): the data root's
    layout, the run's verify-inputs mode and its lease on ``data_root`` (renewed while it trains);
    returns the metrics the component logs. One function, so that the two tasks cannot drift."""
    from vsbench.io.locks import folder_lease
    from vsbench.io.storage import use_verify_inputs
    from vsbench.runspec.run import json_object

    use_verify_inputs(verify_inputs)  # "": the environment's (stat unless VSBENCH_VERIFY_INPUTS says full)
    with folder_lease(data_root, kfp_run_id):
        result = abid_train_step(task, f"{data_root}/tasks", f"{data_root}/bin-images-resize",
                                 f"{data_root}/runs/{task}", backend=backend, nodes=nodes, gpus_per_node=gpus_per_node,
                                 profile=profile, seed=seed, device=device,
                                 overrides=json_object(overrides_json, "train_overrides"), parent_run_id=parent_run_id,
                                 manifest_path=manifest_path, progress=False)
    return dict(result.metrics)


_TRAIN_DEFAULTS: dict[str, Any] = {"profile": "demo", "seed": 0, "device": "auto", "overrides": None,
                                   "parent_run_id": "", "manifest_path": None, "progress": True, "decode": "auto"}


def _export_and_register(tracker: Tracker, model: Any, example: Any, task: str, score: float,
                         parent_run_id: str) -> None:
    """Log the model (an MLflow logged model, shown on the pipeline's parent run too) and register it
    under ``vsbench-abid-<task>`` with its aliases, unless a version already holds these very weights
    (a re-run of a finished training): then that version takes the aliases, and nothing is logged twice."""
    from vsbench.tracking.models import state_dict_sha256

    name = f"vsbench-abid-{task}"
    weights = state_dict_sha256(model.state_dict())
    existing = tracker.registered_version(name, weights, score)
    if existing:
        print(f"{name}: version {existing} already holds these weights (sha256 {weights[:12]}); not registered "
              "again, its aliases moved", flush=True)
        return
    model_uri, model_id = tracker.log_torch_model(model, f"{task}_model", example)
    if model_uri:  # a registered version, with the aliases newest / nightly / best
        tracker.register_model(model_uri, name, score, weights)
    if model_id:
        parent_tracker(parent_run_id).link_models([model_id])


def log_tasks_dataset(trackers: tuple[Tracker, ...], tasks: Path, context: str) -> None:
    """The ABID task files a step read, as an MLflow dataset input named by their digest, on each
    run given (the prepare report is read once for all of them)."""
    found = tasks_dataset(tasks)
    if found is not None:
        for tracker in trackers:
            tracker.log_dataset(*found, context=context)


def _best_model_for_export(run, image_size: int, pair_features: str = "concat") -> tuple[Any, Any]:
    """The chosen checkpoint as a CPU module with one tensor input, and an example batch for it.
    (The trunk's depth and the head's width are read from the weights; what the head sees of a pair
    is the profile's.)"""
    import numpy as np

    from vsbench.abid.models import SiameseNetwork, SiamesePairClassifier, arch_of_trunk, counting_network
    from vsbench.abid.trainer import BEST, load_state

    state = load_state(run.fit.checkpoint_dir / BEST)["model"]
    if "head.1.weight" in state:
        network = SiameseNetwork(arch=arch_of_trunk(state, "trunk."), pair_features=pair_features,
                                 head_width=state["head.1.weight"].shape[0])
        network.load_state_dict(state)
        return SiamesePairClassifier(network).eval(), np.zeros((2, 6, image_size, image_size), np.float32)
    network = counting_network(state["fc.weight"].shape[0], arch=arch_of_trunk(state))
    network.load_state_dict(state)
    return network.eval(), np.zeros((2, 3, image_size, image_size), np.float32)


def abid_quantity_step(
    tasks: str, counting_result: str, out: str, *, parent_run_id: str = "", manifest_path: str | None = None,
) -> StepResult:
    """Answer the quantity questions (prior x predicted bin count) and score it against trivial answers."""
    from vsbench.abid.readers import read_quantity_ground_truth

    require_task_files(Path(tasks), "quantity")
    started = time.perf_counter()
    with child_run(parent_run_id, "abid-quantity", {"method": "asin-prior, capped by the predicted count when "
                                                              "that helps on training bins"}) as tracker:
        log_tasks_dataset((tracker,), Path(tasks), "evaluation")  # it reads the task files, as score does
        with output_lock(out, what=f"{out} (abid quantity)"):
            answers = run_quantity_baseline(Path(tasks), Path(counting_result), Path(out))
        print(answers.choice.line(), flush=True)
        tracker.log_params({"rule": answers.choice.rule})
        truth = read_quantity_ground_truth(Path(tasks) / "obj_num_verification_val.json")
        metrics = {f"{name}_accuracy": verification_metrics(getattr(answers, name), truth).accuracy
                   for name in ("baseline", "prior_only", "always_yes", "always_no")}
        if answers.choice.cap_accuracy is not None:  # the evidence the rule was chosen on (training bins)
            metrics.update({"calibration_cap_accuracy": answers.choice.cap_accuracy,
                            "calibration_prior_accuracy": answers.choice.prior_accuracy,
                            "calibration_questions": float(answers.choice.questions)})
        tracker.log_artifact(Path(out) / RESULT_NAME)
        # The trivial answers beside the score on the parent run: the report draws them as baselines.
        log_to_parent(parent_run_id, {f"quantity_{name}": metrics[name]
                                      for name in ("always_yes_accuracy", "prior_only_accuracy")})
        result = StepResult(str(Path(out) / RESULT_NAME), metrics, {"result": str(Path(out) / RESULT_NAME)})
        return finish(tracker, result, manifest_path, "quantity.json", started)


def abid_score_step(
    tasks: str, counting_result: str, verification_result: str, quantity_result: str, *,
    parent_run_id: str = "", manifest_path: str | None = None, units_dir: str | None = None,
    resamples: int | None = None, images: str | None = None,
) -> StepResult:
    """Score the three result files exactly as the challenge does; headline metrics go to the parent run.

    Each headline metric also gets its 95% bootstrap interval over the questions
    (``<metric>_ci95_low/_high``; ``resamples`` else ``VSBENCH_RESAMPLES``, 0 for none), and each task's
    per-question outcomes go to a unit file (:mod:`vsbench.abid.units`) in ``units_dir`` (default:
    the manifest's folder; neither given: no files, the intervals still), logged on the step's run.
    Beside them, each task's failure sheet (:mod:`vsbench.abid.failures`: the wrong answers with their
    bin photos from ``images``, default ``<tasks>/../bin-images-resize``) as ``failures/<unit file
    stem>.png|.html``, named in the manifest's unit entry under ``failures`` and logged on the step's run
    under ``failures/``; ``VSBENCH_FAILURE_ROWS=0``: none."""
    from vsbench.abid import readers as abid_readers
    from vsbench.reporting import plots
    from vsbench.reporting.sheets import FAILURES_DIR, failure_rows
    from vsbench.stats.resample import Resampling
    from vsbench.tracking.sheet_stamp import log_stamped

    root = Path(tasks)
    require_task_files(root, "score")
    started = time.perf_counter()
    resampling = Resampling.from_env(resamples)  # a bad VSBENCH_RESAMPLES stops here, before any work
    rows = failure_rows()  # a bad VSBENCH_FAILURE_ROWS is one warning here, and no sheets
    with child_run(parent_run_id, "abid-score", {"task_set": "moderate", **resampling.params()}) as tracker:
        log_tasks_dataset((tracker,), root, "evaluation")
        files = {task: root / name for task, name in TASK_FILES.items()}
        count_truth = abid_readers.read_counting_ground_truth(files["counting"])
        verify_truth = abid_readers.read_verification_ground_truth(files["verification"])
        quantity_truth = abid_readers.read_quantity_ground_truth(files["quantity"])
        truths = {"counting": count_truth, "verification": verify_truth, "quantity": quantity_truth}
        results = {"counting": counting_result, "verification": verification_result, "quantity": quantity_result}
        answers = {task: abid_readers.read_abid_predictions(results[task], truths[task].size, files[task],
                                                            binary=task != "counting") for task in TASK_FILES}
        counting = counting_metrics(answers["counting"], count_truth, 6)
        verification = verification_metrics(answers["verification"], verify_truth)
        quantity = verification_metrics(answers["quantity"], quantity_truth)

        metrics = {f"counting_{k}": float(v) for k, v in counting.as_dict().items()}
        metrics.update({f"verification_{k}": float(v) for k, v in verification.as_dict().items()})
        metrics["quantity_accuracy"] = quantity.accuracy
        metrics["verification_always_yes_accuracy"] = float((verify_truth == 1).mean()) if verify_truth.size else 0.0
        metrics["quantity_num_examples"] = float(quantity.num_examples)
        units = _score_units(files, answers, truths)
        interval_values, notes = _interval_metrics(units, resampling)
        metrics.update(interval_values)
        tracker.set_tags({f"{NOTE_TAG}{metric}": note for metric, note in notes.items()})  # issue 55: weak intervals say so
        folder = units_dir or (str(Path(manifest_path).parent) if manifest_path else "")
        written = _write_units(units, folder)
        tracker.log_unit_files({path: sha256 for path, sha256 in written.items()})
        sheets = _failure_sheets(files, answers, truths, units, Path(images) if images else root.parent / RESIZED_DIR,
                                 folder, rows, _scored_models(parent_run_id))
        for sheet in sheets.values():  # each copy logged names the run it is logged to (docs/failures.md)
            for suffix in ("png", "html"):
                path = Path(sheet[suffix])
                if tracker.run_id:
                    log_stamped(lambda copy: tracker.log_artifact(Path(copy), FAILURES_DIR), path, path.read_bytes(),
                                tracker.run_id, "abid-score")
                else:
                    tracker.log_artifact(path, FAILURES_DIR)
        for figure, name in (
            (plots.per_class_bars(counting.per_class_accuracy, counting.per_class_rmse, counting.per_class_count,
                                  "counting"), "plots/counting_per_class.png"),
            (plots.confusion(counting.confusion_matrix, [str(c) for c in range(6)], "counting confusion matrix"),
             "plots/counting_confusion.png"),
        ):
            tracker.log_figure(figure, name)
            plots.close(figure)
        log_to_parent(parent_run_id, {k: v for k, v in metrics.items()
                                      if k in ("counting_accuracy", "counting_rmse", "verification_accuracy",
                                               "verification_always_yes_accuracy", "quantity_accuracy")
                                      or k.startswith(_HEADLINE_INTERVALS)})
        linked = _link_scores_to_models(tracker, parent_run_id, root, metrics)
        manifest = {"counting_confusion_matrix": counting.confusion_matrix.tolist(),
                    "verification_confusion_matrix": _binary_confusion(verification_result, verify_truth),
                    "units": {Path(path).name: {"path": path, "sha256": sha256,
                                                **({"failures": sheets[Path(path).name]} if Path(path).name in sheets
                                                   else {})}
                              for path, sha256 in written.items()},
                    "intervals": resampling.params(), **({"interval_notes": notes} if notes else {})}
        return finish(tracker, StepResult(tasks, metrics, manifest), manifest_path, "score.json", started,
                      tracked=[*(k for k in metrics if k not in linked), "step_seconds"])


# The parent run shows the headline scores' intervals beside them (the per-class ones stay on the step's run).
_HEADLINE_INTERVALS = tuple(f"{m}_ci" for m in ("counting_accuracy", "counting_rmse", "verification_accuracy",
                                                "quantity_accuracy"))
TASK_FILES = {"counting": "counting_val.json", "verification": "obj_verification_val.json",
              "quantity": "obj_num_verification_val.json"}
UNIT_FILES = {"counting": "abid_counting_units.parquet", "verification": "abid_verification_units.parquet",
              "quantity": "abid_quantity_units.parquet"}


def _score_units(files: dict[str, Path], answers: dict[str, Any], truths: dict[str, Any]) -> dict[str, Any]:
    """task -> its questions' outcomes (metric names as this step logs them: ``counting_accuracy`` ...)."""
    from vsbench.abid.readers import read_question_ids
    from vsbench.abid.units import answer_units, counting_units

    out: dict[str, Any] = {}
    for task, path in files.items():
        ids = read_question_ids(path, task)
        out[task] = (counting_units(answers[task], truths[task], ids, prefix="counting_", variant="moderate")
                     if task == "counting" else
                     answer_units(answers[task], truths[task], ids, task=task, prefix=f"{task}_", variant="moderate"))
    return out


def _scored_models(parent_run_id: str) -> dict[str, str]:
    """Each task's model as its failure sheet names it (:func:`vsbench.abid.failures.task_models`): the
    architecture each training step of this pipeline run recorded (param ``architecture``), read from
    its run; without a parent run (a step called alone) or a store, the networks unnamed by architecture."""
    from vsbench.abid.failures import task_models

    parent = parent_tracker(parent_run_id)
    return task_models(parent.child_param("abid-train-counting", "architecture"),
                       parent.child_param("abid-train-siamese", "architecture"))


def _failure_sheets(files: dict[str, Path], answers: dict[str, Any], truths: dict[str, Any], units: dict[str, Any],
                    images: Path, folder: str, rows: int, models: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Unit file name -> its failure sheet's entry (none without a folder for the unit files)."""
    from vsbench.abid.failures import write_abid_failure_sheets

    if not folder:
        return {}
    made = write_abid_failure_sheets(files, answers, truths, {task: units[task].ids for task in units}, images,
                                     Path(folder), {task: Path(name).stem for task, name in UNIT_FILES.items()}, rows,
                                     models)
    return {UNIT_FILES[task]: entry for task, entry in made.items()}


def _interval_metrics(units: dict[str, Any], resampling) -> tuple[dict[str, float], dict[str, str]]:
    """``<metric>_ci95_low/_high`` of every metric the unit files recompute (none when intervals are off),
    and each weak interval's one-line note (fewer than 20 questions, zero width: docs/intervals.md)."""
    from vsbench.stats.compare import interval_fields, interval_notes, intervals

    out: dict[str, float] = {}
    notes: dict[str, str] = {}
    if resampling.enabled:
        for task_units in units.values():
            found = intervals(task_units, resampling)
            out.update(interval_fields(found, resampling.percent))
            notes.update(interval_notes(found))
    return out, notes


def _write_units(units: dict[str, Any], folder: str) -> dict[str, str]:
    """Each task's unit file in ``folder`` (none when no folder): ``{path: sha256}``."""
    if not folder:
        return {}
    written: dict[str, str] = {}
    for task, task_units in units.items():
        path = Path(folder) / UNIT_FILES[task]
        written[str(path)] = task_units.write(path)
    return written


# Which trained baseline each ABID score is of (the quantity answers are the counting network's counts).
_SCORED_MODEL = {"counting": "counting_model", "quantity": "counting_model", "verification": "siamese_model"}


def _link_scores_to_models(tracker: Tracker, parent_run_id: str, tasks: Path, metrics: dict[str, float]) -> set[str]:
    """The scores of each baseline logged with its LoggedModel (the one its training step logged under
    this pipeline run) and the task files' dataset, as the similarity evaluations are: the Models tab
    ranks the baselines per dataset. Returns the metrics so logged (the rest are logged plainly)."""
    found = tasks_dataset(tasks)
    models = parent_tracker(parent_run_id).linked_models() if found is not None else {}
    linked: set[str] = set()
    for prefix, model_name in _SCORED_MODEL.items():
        if model_name not in models:
            continue
        scores = {k: v for k, v in metrics.items() if k.startswith(f"{prefix}_") and "always" not in k
                  and "prior_only" not in k}
        tracker.log_model_metrics(scores, models[model_name], (found[0], found[1]))
        linked.update(scores)
    return linked


def _binary_confusion(result: str, truth) -> list[list[int]]:
    import numpy as np

    from vsbench.abid.readers import read_int_lines

    predicted = read_int_lines(result)
    return [[int(np.sum((truth == g) & (predicted == p))) for p in (0, 1)] for g in (0, 1)]
