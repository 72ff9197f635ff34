"""Run a pipeline on this machine with ``kfp.local`` and summarize what each step did.

Two runners execute exactly the lightweight components a cluster runs:

- ``subprocess``: ``SubprocessRunner(use_venv=False)``, each step a subprocess of this Python
  environment (which holds vsbench);
- ``container``: ``DockerRunner``, each step in the vsbench image as a pod would run it (see
  :mod:`vsbench.platform.containers`).

kfp.local keeps every task's outputs under ``<pipeline_root>/<pipeline>-<timestamp>/<task>/``;
the report reads the step manifests from there. Its executor logs go to
``<pipeline_root>/logs/<pipeline>-<time>.log`` while the terminal shows one line per step
(:mod:`vsbench.platform.progress`); ``verbose`` streams them as well.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsbench.io.terminal import command, labelled, wrap
from vsbench.platform.containers import ContainerPlan, container_runner, step_environment
from vsbench.platform.progress import StepLog, root_logging_to
from vsbench.runtime.images import CPU_IMAGE

RUNNERS = ("subprocess", "container")
LOG_FOLDER = "logs"  # under the pipeline root, beside kfp.local's run folders

ABID_FOLDERS = ("raw", "tasks", "bin-images-resize", "runs/counting", "runs/siamese", "runs/quantity")
"""What the ABID pipeline's steps write under its data root (components/abid.py): a local run holds
each for its whole length (:func:`vsbench.io.locks.run_lease`; `abid run-local`, the demo)."""

ABID_STEPS = ("abid-download", "abid-prepare", "abid-resize", "abid-train-counting", "abid-train-siamese",
              "abid-quantity", "abid-score")
STEP_COUNTS = {
    "abid-download": ["planned", "fetched", "refetched", "skipped", "failed", "spelling_conflicts"],
    "abid-prepare": ["eligible", "train", "val", "distinct_asins", "problems", "empty_task_files"],
    "abid-resize": ["inputs", "resized", "kept", "failed"],
    "abid-train-counting": ["chosen_epoch"],
    "abid-train-siamese": ["chosen_epoch"],
}
STEP_SCORES = {
    "abid-train-counting": ["chosen_val_accuracy", "chosen_holdout_accuracy", "val_rate_of_train_majority",
                            "val_own_majority_rate"],
    "abid-train-siamese": ["chosen_val_accuracy", "chosen_holdout_accuracy"],
    "abid-quantity": ["baseline_accuracy", "prior_only_accuracy", "always_yes_accuracy", "always_no_accuracy"],
    "abid-score": ["counting_accuracy", "counting_rmse", "verification_accuracy", "quantity_accuracy"],
}


@dataclass
class LocalRunReport:
    succeeded: bool
    seconds: float
    run_dir: Path | None
    data_root: Path
    parent_run_id: str
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str = ""
    ran_in: str = "host venv"
    log_path: Path | None = None
    failed_step: str = ""
    log_tail: list[str] = field(default_factory=list)

    def scores(self) -> dict[str, float]:
        return {k: v for k, v in self.steps.get("abid-score", {}).get("metrics", {}).items()
                if k in STEP_SCORES["abid-score"]}

    def parent_metrics(self) -> dict[str, float]:
        """What the pipeline's parent run holds: the scores and the trivial baselines beside them
        (for a bundle kept while the store was down)."""
        metrics = dict(self.scores())
        counting = self.steps.get("abid-train-counting", {}).get("metrics", {})
        majority = counting.get("val_rate_of_train_majority", counting.get("val_majority_rate"))  # older runs
        if majority is not None:
            metrics["counting_majority_accuracy"] = majority
        quantity = self.steps.get("abid-quantity", {}).get("metrics", {})
        metrics.update({f"quantity_{k}": quantity[k] for k in ("always_yes_accuracy", "prior_only_accuracy")
                        if k in quantity})
        scored = self.steps.get("abid-score", {}).get("metrics", {})
        if "verification_always_yes_accuracy" in scored:
            metrics["verification_always_yes_accuracy"] = scored["verification_always_yes_accuracy"]
        return metrics

    def manifests(self) -> dict[str, str]:
        """The step manifests of the run (file -> artifact folder), for a kept bundle."""
        if self.run_dir is None:
            return {}
        return {str(path): f"steps/{path.parent.name}" for step in self.steps for path in step_manifests(self.run_dir, step)}

    def render(self) -> str:
        lines = [f"pipeline {'succeeded' if self.succeeded else 'FAILED'} in {self.seconds:.1f} s"]
        if self.error:
            lines.append(f"  error: {self.error}")
        for step, manifest in self.steps.items():
            metrics = manifest.get("metrics", {})
            counts = ", ".join([f"{k} {int(metrics[k])}" for k in STEP_COUNTS.get(step, []) if k in metrics]
                               + [f"{k} {metrics[k]:.4f}" for k in STEP_SCORES.get(step, []) if k in metrics])
            if manifest.get("epoch_choice"):  # which epoch answers, and how it was chosen
                counts += f" ({manifest['epoch_choice']})"
            lines.append(f"  {step:<20} {metrics.get('step_seconds', float('nan')):7.1f} s   {counts}")
        lines.append(f"  ran in:         {self.ran_in}")
        lines.append(f"  data root:      {self.data_root}")
        lines.append(f"  step outputs:   {self.run_dir}")
        lines.append(f"  executor logs:  {self.log_path}")
        lines.append(f"  MLflow run:     {self.parent_run_id or '(tracking offline)'}")
        if not self.succeeded:
            lines.append(failure_tail(self.failed_step, self.log_tail, self.log_path))
        return "\n".join(lines)


PREDICTIONS = (("counting", "abid-train-counting"), ("verification", "abid-train-siamese"),
               ("quantity", "abid-quantity"))  # (task, the step whose manifest names its result file)


def abid_ending(report: LocalRunReport, store_uri: str, experiment: str, off: str = "off (--no-track)") -> str:
    """How an ABID pipeline run on this machine ends (``vsbench demo`` and ``abid run-local`` alike):
    the three scores, where the predictions and the files are, the MLflow store and how to open it.
    ``store_uri`` "" means the run was not tracked, for the reason ``off``."""
    import sys

    from vsbench.tracking.bundles import redact_uri

    lines = []
    scores = report.scores()
    if scores:
        scored = report.steps.get("abid-score", {}).get("metrics", {})

        def shown(metric: str) -> str:
            """The score with its 95% interval where the step computed one (issue 45)."""
            low, high = scored.get(f"{metric}_ci95_low"), scored.get(f"{metric}_ci95_high")
            text = f"{scores[metric]:.4f}"
            return text if low is None or high is None else f"{text} [{low:.4f}, {high:.4f}]"

        lines += ["", "ABID scores (moderate validation set), [95% interval over the questions]:",
                  f"  counting accuracy        {shown('counting_accuracy')}   RMSE {shown('counting_rmse')}",
                  f"  object verification      {shown('verification_accuracy')}",
                  f"  quantity verification    {shown('quantity_accuracy')}"]
    # Within 100 columns (issue 57): a path too long for its label's line goes on the next one, whole.
    for task, step in PREDICTIONS:
        result = report.steps.get(step, {}).get("result")
        if result:
            lines += labelled(f"{task + ' answers:':<21}", str(result))
    lines += [*labelled(f"{'task files:':<21}", str(report.data_root / "tasks")),
              *labelled(f"{'resized images:':<21}", str(report.data_root / "bin-images-resize"))]
    if not store_uri:
        return "\n".join([*lines, f"  {'MLflow:':<22}{off}"])
    uri = redact_uri(store_uri)
    if not uri:  # a user:password@ part in a URI that cannot be read apart: never printed
        return "\n".join([*lines, *wrap(f"{'MLflow store:':<22}MLFLOW_TRACKING_URI (experiment {experiment}; not "
                                        "shown: it holds a password in a form that cannot be taken out)",
                                        "  ", " " * 24)])
    lines += [*wrap(f"{'MLflow store:':<22}{uri} (experiment {experiment})", "  ", " " * 24), ""]
    if uri.startswith(("http://", "https://")):
        return "\n".join([*lines, *labelled("Open the MLflow UI at:", uri, "")])
    return "\n".join([*lines, "Open the MLflow UI with:",
                      *command([str(Path(sys.executable).parent / "mlflow"), "ui", "--backend-store-uri", uri,
                                "--host", "127.0.0.1", "--port", "5000"], indent="  ")])


def failure_tail(step: str, tail: list[str], log_path: Path | None) -> str:
    """The last lines a failed step wrote, and where its whole log is."""
    head = f"  last lines of {step or 'the run'} (whole log: {log_path}):"
    return "\n".join([head, *(f"    | {line}" for line in tail[-20:])] if tail else [head, "    (no output)"])


def _latest_run_dir(pipeline_root: Path, before: set[Path]) -> Path | None:
    runs = ([p for p in pipeline_root.iterdir() if p.is_dir() and p not in before and p.name != LOG_FOLDER]
            if pipeline_root.exists() else [])
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def step_manifests(run_dir: Path, step: str) -> list[Path]:
    """A step's manifest files; steps inside a ParallelFor sit under ``for-loop-N-iteration-I/``."""
    return sorted(run_dir.glob(f"**/{step}/manifest"))


def merge_shard_manifests(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """One manifest for a sharded step: counts and rates add up, wall time is the slowest shard."""
    if len(manifests) == 1:
        return manifests[0]
    metrics: dict[str, float] = {}
    for manifest in manifests:
        for key, value in manifest.get("metrics", {}).items():
            if key.endswith("seconds") and not key.endswith("per_second"):
                metrics[key] = max(metrics.get(key, 0.0), value)
            else:
                metrics[key] = metrics.get(key, 0.0) + value
    return {"metrics": metrics, "shards": manifests}


@dataclass(frozen=True)
class LocalRun:
    succeeded: bool
    seconds: float
    run_dir: Path | None
    error: str
    ran_in: str = "host venv"
    log_path: Path | None = None
    failed_step: str = ""
    log_tail: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Any]:  # (succeeded, seconds, run_dir, error), as callers unpack it
        return iter((self.succeeded, self.seconds, self.run_dir, self.error))


def tracking_locations(experiment: str) -> tuple[list[Path], list[Path], dict[str, str]]:
    """What a step in a container needs of MLflow: (folders, files, environment).

    The tracking URI is resolved here, absolute, because a step's working folder is not the
    caller's; a local store (sqlite file or folder) and the experiment's local artifact root are
    mounted. The experiment is created here when missing, so its artifact root is known: through the
    bounded client (:func:`vsbench.io.store.store_client`), so a store that is down or hangs costs at
    most ``VSBENCH_TRACKING_TIMEOUT`` seconds and one line naming its URI, and the run goes on."""
    import mlflow

    from vsbench.io.store import store_client
    from vsbench.tracking.runs import ensure_experiment

    uri = mlflow.get_tracking_uri()
    folders: list[Path] = []
    files: list[Path] = []
    if uri.startswith("sqlite:///"):
        database = Path(uri[len("sqlite:///"):]).resolve()
        database.parent.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{database}"
        files.append(database)
    elif uri.startswith("file:") or "://" not in uri:
        folder = Path(uri.removeprefix("file://").removeprefix("file:")).resolve()
        uri = f"file://{folder}"
        folders.append(folder)
    environment = {"MLFLOW_TRACKING_URI": uri}
    try:
        client = store_client(uri=uri)  # each call bounded (issue 54): a store that hangs costs the bound, once
        location = client.get_experiment(ensure_experiment(client, experiment)).artifact_location
    except Exception as exc:  # noqa: BLE001 - tracking must not stop a run; the steps go offline
        print(f"[vsbench] MLflow unavailable before the run ({type(exc).__name__}: {str(exc)[:400]})")
        return folders, files, environment
    if location.startswith("file://") or location.startswith("/"):
        folders.append(Path(location.removeprefix("file://")))
    return folders, files, environment


def embedding_cache_mount() -> Path | None:
    """The host's embedding cache folder (created), to mount into step containers; None when off."""
    from vsbench.models.cache import cache_root

    root = cache_root()
    if root is None:
        return None
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # the steps then warn that they cannot cache; nothing else changes
    return root.resolve()


@contextlib.contextmanager
def kfp_runner(runner: str, pipeline_root: Path, *, image: str | None = None, data: tuple[Path, ...] = (),
               read_only: tuple[Path, ...] = (), experiment: str = "",
               note: Callable[[str], None] = print) -> Iterator[tuple[Any, str]]:
    """(kfp.local runner, where the steps run) for ``runner``; ``data`` are the folders the steps
    write, ``read_only`` those they only read (both mounted at the same path in a container);
    ``note`` gets the line saying which host folders a container run opens to the steps' group."""
    from kfp import local

    if runner == "subprocess":
        yield local.SubprocessRunner(use_venv=False), "host venv"
        return
    if runner != "container":
        raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, not {runner!r}")
    from vsbench.io.cache_secret import SECRET_ENV, secret_for_steps
    from vsbench.models.cache import CACHE_ENV

    folders, files, environment = tracking_locations(experiment) if experiment else ([], [], {})
    cache = embedding_cache_mount()
    if cache is not None:  # the host's embedding cache, shared with the steps (a PVC folder on a cluster)
        folders.append(cache)
        environment[CACHE_ENV] = str(cache)
        # its signing key: the user's (variable or file), so the steps sign and trust what the user's own
        # runs do; the image has no file of the user's (issue 54)
        environment[SECRET_ENV] = secret_for_steps()
    plan = ContainerPlan(image=image or CPU_IMAGE, folders=(*data, *folders), files=tuple(files),
                         read_only=read_only,
                         environment=tuple({**step_environment(), **environment}.items()))
    with container_runner(plan, pipeline_root, note) as (docker_runner, identity):
        yield docker_runner, f"{identity.name} ({identity.image_id[:19]})"


def run_pipeline_locally(pipeline_name: str, pipeline_root: Path, arguments: dict[str, Any],
                         steps: tuple[str, ...], suite_path: Path | None = None, *, runner: str = "subprocess",
                         image: str | None = None, data: tuple[Path, ...] = (),
                         read_only: tuple[Path, ...] = (), verbose: bool = False) -> LocalRun:
    """Run one pipeline with kfp.local; a failed step is reported, never raised.

    kfp.local's output goes to a log file (its path printed first) and the terminal gets a line per
    step; ``verbose`` streams the log too."""
    from kfp import local

    from vsbench.platform.compile import load_pipeline

    # The components name the production image; the subprocess runner's environment is its twin.
    warnings.filterwarnings("ignore", message=".*custom or non-Python base image.*")
    pipeline_root = pipeline_root.resolve()
    pipeline_root.mkdir(parents=True, exist_ok=True)
    before = set(pipeline_root.iterdir())
    started = time.perf_counter()
    error = ""
    ran_in = runner
    log_path = pipeline_root / LOG_FOLDER / f"{pipeline_name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    print(f"kfp.local executor logs: {log_path}" + ("" if verbose else " (--verbose streams them)"), flush=True)
    sink = StepLog(log_path, steps, verbose=verbose)
    real_print = builtins.print
    terminal = sys.stdout

    def note(line: str) -> None:  # to the terminal (and the log), past the redirection of kfp.local's output
        sink.write(line + "\n")
        if not verbose:
            print(line, file=terminal, flush=True)

    try:
        with contextlib.redirect_stdout(sink), root_logging_to(sink):
            with kfp_runner(runner, pipeline_root, image=image, data=data, read_only=read_only,
                            experiment=str(arguments.get("experiment", "")), note=note) as (chosen, ran_in):
                local.init(runner=chosen, pipeline_root=str(pipeline_root),
                           raise_on_error=True)  # a failed task fails the run, after the exit handler ran
                load_pipeline(pipeline_name, suite_path=suite_path)(**arguments)
    except Exception as exc:  # noqa: BLE001 - reported, the caller decides the exit code
        error = f"{type(exc).__name__}: {exc}"
        sink.write(f"\n{error}\n")
    finally:
        sink.close()
        builtins.print = real_print  # kfp.local's indenting print can outlive a run (see tests/conftest.py)
    seconds = time.perf_counter() - started
    run_dir = _latest_run_dir(pipeline_root, before)
    succeeded = not error and run_dir is not None and all(step_manifests(run_dir, s) for s in steps)
    if not succeeded and not error:
        missing = [s for s in steps if run_dir is None or not step_manifests(run_dir, s)]
        error = f"steps without output: {', '.join(missing)} (see {log_path})"
    return LocalRun(succeeded, seconds, run_dir, error, ran_in, log_path, sink.failed_task,
                    tuple(sink.tail()) if not succeeded else ())


def run_abid_pipeline_locally(data_root: Path, pipeline_root: Path, arguments: dict[str, Any], *,
                              runner: str = "subprocess", image: str | None = None,
                              verbose: bool = False) -> LocalRunReport:
    """The ABID pipeline with kfp.local; ``runner`` "container" runs every step in ``image``."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    data_root = data_root.resolve()
    run = run_pipeline_locally("abid", pipeline_root, {"data_root": str(data_root), **arguments}, ABID_STEPS,
                               runner=runner, image=image, data=(data_root,), verbose=verbose)
    run_dir = run.run_dir
    report = LocalRunReport(run.succeeded, run.seconds, run_dir, data_root, "", error=run.error, ran_in=run.ran_in,
                            log_path=run.log_path, failed_step=run.failed_step, log_tail=list(run.log_tail))
    if run_dir is not None:
        output = _read_json(run_dir / "open-tracking" / "executor_output.json")
        report.parent_run_id = str(output.get("parameterValues", {}).get("Output", ""))
        for step in ABID_STEPS:
            manifests = [_read_json(path) for path in step_manifests(run_dir, step)]
            if manifests:
                report.steps[step] = merge_shard_manifests(manifests)
    return report


def run_similarity_pipeline_locally(root: Path, out: Path, arguments: dict[str, Any], *, runner: str = "subprocess",
                                    image: str | None = None, verbose: bool = False) -> LocalRun:
    """The similarity pipeline with kfp.local over ``root`` (read only) into ``out``."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run_pipeline_locally("similarity", out / "_kfp", {**arguments, "root": str(root), "out": str(out)},
                                ("embed-shard", "index", "index-fill", "search", "score"), runner=runner, image=image, data=(out,),
                                read_only=(root,), verbose=verbose)
