"""``vsbench abid``: the ABID pipeline's steps as commands (download, prepare, resize, train) and
the whole pipeline on kfp.local (``run-local``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from vsbench.cli.common import (
    BAD_INPUT_EXIT,
    DecodeOpt,
    EndpointOpt,
    ImageOpt,
    RunnerOpt,
    TrackOpt,
    VerboseOpt,
    VerifyInputsOpt,
    check_decode,
    check_runner,
    kept_bundle,
    print_summary,
    refuse_busy,
    user_errors,
)
from vsbench.cli.helpfmt import MORE, App
from vsbench.platform.local_run import ABID_FOLDERS, abid_ending, run_abid_pipeline_locally

abid_app = App(no_args_is_help=True, help="Amazon Bin Image Dataset: download, prepare, resize, run.")


@abid_app.command("download")
def abid_download(
    dest: Annotated[Path, typer.Option(help="Local data root: bin-images/ and metadata/ are created here.")],
    source: Annotated[str, typer.Option(help="s3://bucket or s3://bucket/prefix holding bin-images/ and metadata/.")] = "s3://aft-vbi-pds",
    limit: Annotated[int | None, typer.Option(min=1, help="Only the N smallest bin ids (with their metadata); "
                                                       "default: all.")] = None,
    endpoint_url: EndpointOpt = None,
    concurrency: Annotated[int, typer.Option(min=1, max=512, help="Requests in flight.")] = 64,
    retries: Annotated[int, typer.Option(min=1, help="Attempts per object.")] = 5,
) -> None:
    """Mirror ABID from S3: anonymous by default, resumable, verified, atomic."""
    refuse_busy(dest)  # another run writing it: one line at once, before the heavy imports
    from vsbench.abid.download import MANIFEST_NAME, DownloadInterrupted, download_abid
    from vsbench.io.locks import OutputBusy
    from vsbench.io.storage import S3AccessError

    try:
        summary = download_abid(source, dest, limit=limit, endpoint_url=endpoint_url, concurrency=concurrency,
                                retries=retries)
    except OutputBusy as exc:  # another run is writing --dest: a user's mistake, like every other one-writer stop
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except (S3AccessError, ValueError) as exc:  # one job-wide cause (denied, no bucket, wrong endpoint, a bad setting)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(getattr(exc, "exit_code", 1)) from None  # 2: a wrong endpoint, bucket or prefix
    except DownloadInterrupted as exc:  # SIGTERM or SIGINT: the manifest is written, say so in one line
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    data = summary.as_dict()
    print_summary("download", data, ["listed_keys", "planned", "fetched", "refetched", "skipped", "failed",
                                      "ignored_keys", "duplicate_spellings", "spelling_conflicts", "seconds",
                                      "fetch_seconds"])
    typer.echo(summary.transfer_line())  # rates over what was transferred, not over the skipped objects' time
    if (dest / MANIFEST_NAME).exists():  # not written when a failed run fetched nothing (nothing is left behind)
        typer.echo(f"manifest: {dest / MANIFEST_NAME}")
        typer.echo(f"key log:  {dest / summary.keys_log} (what this run did with each key, and why)")
    if summary.spelling_conflicts:  # one line for all of them; the manifest lists each
        typer.echo(summary.conflict_warning(str(dest / MANIFEST_NAME)), err=True)
    if not summary.complete:
        if summary.cause:  # one line for the cause, never one per object
            typer.echo(f"error: {summary.cause}", err=True)
            raise typer.Exit(1)
        for failure in summary.failures[:10]:
            typer.echo(f"  failed {failure['key']}: {failure['reason']}", err=True)
        typer.echo(f"{summary.advice()}.", err=True)
        raise typer.Exit(1)


@abid_app.command("prepare")
def abid_prepare(
    data: Annotated[Path, typer.Option(help="Folder holding bin-images/ and metadata/.")],
    out: Annotated[Path, typer.Option(help="Where the split and task files go.")],
    seed: Annotated[int, typer.Option(help="Seed of the split and of the sampled questions.")] = 0,
    val_fraction: Annotated[float, typer.Option(help="Fraction of eligible bins in validation.")] = 0.1,
    max_per_class: Annotated[int, typer.Option(min=1, help="Verification questions per answer (yes/no).")] = 20000,
) -> None:
    """The challenge's split and task files (random_*.txt, metadata, instances, counting, verification)."""
    refuse_busy(out)  # another run writing it: one line at once, before the heavy imports
    from vsbench.abid.prepare import PREPARE_COUNTS, REPORT_NAME, prepare_abid

    summary = prepare_abid(data, out, seed=seed, val_fraction=val_fraction, max_per_class=max_per_class).as_dict()
    print_summary("prepare", summary, list(PREPARE_COUNTS))
    for name, info in summary["files"].items():
        typer.echo(f"  {name:<36} {info['entries']:>8} entries")
    if summary["warning"]:  # every empty task file with its reason, in one line (also in the report)
        typer.echo(summary["warning"], err=True)
    problems = summary["problems"]
    if problems:
        typer.echo(f"{len(problems)} data problems (first 5 below; all in {out / REPORT_NAME}):", err=True)
        for problem in problems[:5]:
            typer.echo(f"  id {problem['bin_id']} {problem['file']}: {problem['reason']}", err=True)


@abid_app.command("resize")
def abid_resize(
    data: Annotated[Path, typer.Option(help="Folder holding bin-images/.")],
    out: Annotated[Path, typer.Option(help="Folder for the resized '%05d.jpg' images.")],
    size: Annotated[int, typer.Option(min=8, help="Side of the square output, in pixels.")] = 224,
    quality: Annotated[int, typer.Option(min=1, max=100, help="JPEG quality of the output.")] = 75,
    decode: Annotated[str, typer.Option(help="'full' (the default: byte-equal to the challenge's Pillow loop), "
                                        "'fast' (libjpeg-turbo via simplejpeg + torch's antialiased bilinear, DCT-"
                                        "domain downscale of photos >= 2x the size; faster, a little off the "
                                        "challenge's pixels: docs/abid.md 'Resize'; bad files take the 'draft' path) "
                                        "or 'draft' (Pillow, DCT-domain downscale when >= 2x).")] = "full",
    workers: Annotated[int, typer.Option(min=0, help="Processes; 0 = every core this container may use (its CPU quota and affinity).")] = 0,
    max_failure_rate: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Fail the step when more than this share of images cannot be resized "
        "(default: VSBENCH_MAX_FAILURE_RATE, else 0.01); the failures are listed either way.")] = None,
    verify_inputs: VerifyInputsOpt = "stat",
) -> None:
    """Resize every bin image (bilinear), in parallel; bad inputs are listed and skipped."""
    refuse_busy(out)  # another run writing it: one line at once, before the heavy imports
    from vsbench.abid.resize import DECODES, MANIFEST_NAME, resize_abid
    from vsbench.imaging.limits import TooManyFailures

    if decode not in DECODES:
        raise typer.BadParameter(f"decode must be one of {', '.join(DECODES)}", param_hint="--decode")
    with user_errors(FileNotFoundError):  # no bin-images/, a bad VSBENCH_MAX_FAILURE_RATE: one line
        try:
            summary = resize_abid(data, out, size=size, quality=quality, decode=decode,  # type: ignore[arg-type]
                                  workers=workers or None, max_failure_rate=max_failure_rate).as_dict()
        except TooManyFailures as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    print_summary("resize", summary, ["inputs", "resized", "kept", "failed", "hashed", "seconds", "images_per_second"])
    _print_redone(summary)
    for failure in summary["failures"][:10]:
        typer.echo(f"  skipped {failure['file']}: {failure['reason']}", err=True)
    typer.echo(f"manifest: {out / MANIFEST_NAME}")


def _print_redone(summary: dict) -> None:
    """One line per output a re-run redid instead of keeping (its source or itself changed), at most
    the summary's first lines, then the count."""
    for line in summary["redone"]:
        typer.echo(f"  {line}", err=True)
    if summary["redone_count"] > len(summary["redone"]):
        typer.echo(f"  ... {summary['redone_count'] - len(summary['redone'])} more outputs redone", err=True)


TRAIN_TASKS = ("counting", "siamese")


@abid_app.command("train")
def abid_train(
    task: Annotated[str, typer.Argument(help="'counting' or 'siamese'.")],
    tasks: Annotated[Path, typer.Option(help="Folder of the task files (`vsbench abid prepare`'s output).")],
    images: Annotated[Path, typer.Option(help="Folder of the resized images (`vsbench abid resize`'s output).")],
    out: Annotated[Path, typer.Option(help="Run folder: checkpoints/, result file, summary. A re-run resumes from it.")],
    profile: Annotated[str, typer.Option(help="'demo' (CPU minutes) or 'full' (the challenge's settings).")] = "demo",
    overrides: Annotated[str, typer.Option(help='JSON of profile fields, e.g. \'{"epochs": 2}\'. '
                                                 "batch_size is the global batch, split over the processes.")] = "{}",
    seed: Annotated[int, typer.Option(help="Seed of the weights, the sample order and the flips.")] = 0,
    device: Annotated[str, typer.Option(help="'auto', 'cpu' or 'cuda' (under DDP: one GPU per process).")] = "auto",
    nproc: Annotated[int, typer.Option(min=1, help="Processes on this machine: >1 starts torchrun (DDP: gloo on "
                                                   "the CPU, nccl on CUDA). Under torchrun yourself, leave it at 1.")] = 1,
    parent_run_id: Annotated[str, typer.Option(help="MLflow parent run (a pipeline's); empty: a new parent run "
                                                    "(experiment vsbench-abid), unless --no-track.")] = "",
    backend: Annotated[str, typer.Option(help="'pod': train here (one process, or --nproc). 'trainjob': a Kubeflow "
                                              "Trainer v2 TrainJob on --nodes nodes through the Kubeflow SDK.")] = "pod",
    nodes: Annotated[int, typer.Option(min=1, help="TrainJob nodes (--backend trainjob).")] = 2,
    gpus_per_node: Annotated[int, typer.Option(min=0, help="TrainJob GPUs (= processes) per node; 0: one CPU "
                                                           "process per node (gloo).")] = 0,
    engine: Annotated[str, typer.Option(help="Where the TrainJob runs: 'auto' (the cluster from inside a pod, else "
                                             "podman here, else local processes), 'kubernetes', 'podman', 'process'.")] = "auto",
    track: TrackOpt = True,
    decode: DecodeOpt = "auto",
    verify_inputs: VerifyInputsOpt = "stat",
) -> None:
    """Train one ABID baseline, resumably; in one process, or data-parallel with --nproc N (or under
    `torchrun --nproc-per-node N -m vsbench abid train ...`, as a PyTorchJob does on each node), or
    as a Trainer v2 TrainJob with --backend trainjob (on this machine: one podman container per node)."""
    import os

    if "LOCAL_RANK" not in os.environ:  # (a rank: its rank 0 holds the lock; a probe would race it)
        refuse_busy(out, f"{out} (abid train {task})")  # one line at once, before torch is imported

    from vsbench.abid.launch import TRAIN_ROWS
    from vsbench.platform.containers import ContainerRunError
    from vsbench.platform.trainjob import TRAIN_BACKENDS, TrainJobError
    from vsbench.steps.abid import abid_train_counting_step, abid_train_siamese_step, abid_train_step

    if task not in TRAIN_TASKS:
        raise typer.BadParameter(f"must be one of {', '.join(TRAIN_TASKS)}, not {task!r}", param_hint="TASK")
    check_decode(decode)
    from vsbench.abid.profiles import profile_problems

    problems = profile_problems(profile, overrides)  # one line each, naming the option and the fields there are
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(BAD_INPUT_EXIT)
    parsed = json.loads(overrides)
    if backend not in TRAIN_BACKENDS:
        raise typer.BadParameter(f"must be one of {', '.join(TRAIN_BACKENDS)}, not {backend!r}", param_hint="--backend")
    if backend == "trainjob":
        if nproc > 1:
            raise typer.BadParameter("a TrainJob's processes are --nodes x --gpus-per-node: leave --nproc at 1",
                                     param_hint="--nproc")
        params = {"task": task, "profile": profile, "overrides": overrides, "seed": seed, "nodes": nodes,
                  "gpus_per_node": gpus_per_node, "engine": engine, "data": str(tasks.resolve())}
        with user_errors(TrainJobError, ContainerRunError), _training_parent(track, params) as parent:
            if (tasks / TRAIN_ROWS[task]).is_file():  # what would stop every node, before any starts
                _check_launch(task, tasks, profile, parsed, nodes * max(1, gpus_per_node))
            result = abid_train_step(task, str(tasks), str(images), str(out), backend="trainjob", nodes=nodes,
                                     gpus_per_node=gpus_per_node, engine=engine, echo=typer.echo, profile=profile,
                                     seed=seed, device=device, overrides=parsed, parent_run_id=parent_run_id,
                                     manifest_path=str(out.resolve() / f"train_{task}.json"), open_parent=parent.open,
                                     decode=decode)
            parent.finished(result.metrics)
        print_summary(f"train {task}", result.metrics, list(result.metrics))
        typer.echo(f"result: {result.manifest['result']}  (trainjob {result.manifest['trainjob']}, "
                   f"{result.manifest['trainjob_engine']}, started in {result.manifest['trainjob_startup_seconds']:.1f} s, "
                   f"{result.manifest['trainjob_seconds']:.1f} s in all)")
        return
    under_torchrun = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
    if nproc > 1 and under_torchrun:
        raise typer.BadParameter("already running under torchrun (WORLD_SIZE is set): leave --nproc at 1",
                                 param_hint="--nproc")
    with user_errors():  # a --tasks folder without task files: say to run `abid prepare`, before any process
        # starts (a TrainJob's nodes check it themselves: their volume may not be this machine's)
        from vsbench.abid.prepare import require_task_files

        require_task_files(tasks, task)
    # A parent run as every command makes one, unless given one (a pipeline's) or started by torchrun
    # (a TrainJob's node, a job by hand: each rank would make its own; torchrun sets LOCAL_RANK even
    # for one process); opened once the checks passed.
    own_parent = not parent_run_id and not under_torchrun and "LOCAL_RANK" not in os.environ
    params = {"task": task, "profile": profile, "overrides": overrides, "seed": seed, "backend": "pod",
              "nproc": nproc, "data": str(tasks.resolve())}
    with _training_parent(track, params) as parent:
        checked = own_parent and (tasks / TRAIN_ROWS[task]).is_file()  # else the step names what is missing
        if checked:
            _check_launch(task, tasks, profile, parsed, nproc)
            if nproc > 1:
                _refuse_busy(out, task)
            parent_run_id = parent.open() if track else ""
        if nproc > 1:
            _launch(task, nproc, parsed, [
                "-m", "vsbench", "abid", "train", task, "--tasks", str(tasks), "--images", str(images), "--out",
                str(out), "--profile", profile, "--overrides", overrides, "--seed", str(seed), "--device", device,
                "--parent-run-id", parent_run_id, "--decode", decode], tasks, out, profile, checked=checked)
        step = abid_train_counting_step if task == "counting" else abid_train_siamese_step
        from pydantic import ValidationError

        with user_errors(ValidationError, FileNotFoundError):
            result = step(str(tasks), str(images), str(out), profile=profile, seed=seed, device=device,
                          overrides=parsed, parent_run_id=parent_run_id, manifest_path=str(out / f"train_{task}.json"),
                          decode=decode)
        parent.finished(result.metrics)
    if int(os.environ.get("RANK", "0") or 0) == 0:
        print_summary(f"train {task}", result.metrics, list(result.metrics))
        typer.echo(f"result: {result.manifest['result']}")


class _Parent:
    """The MLflow parent run a training logs under when no --parent-run-id is given (a TrainJob, or
    the pod backend in one process or under --nproc): opened (as a pipeline's is: the store probed,
    the local default announced) only once the checks passed, so a check that fails leaves no run;
    closed FINISHED with the training's numbers, or FAILED."""

    EXPERIMENT = "vsbench-abid"

    def __init__(self, track: bool, params: dict) -> None:
        from vsbench.tracking.command import new_run_key

        self.track, self.params = track, params
        self.key = new_run_key()
        self.run_id = ""

    def open(self) -> str:
        from vsbench.tracking.command import prepare_pipeline_tracking
        from vsbench.tracking.runs import open_parent_run, tracking_uri

        if prepare_pipeline_tracking(self.track, typer.echo):
            self.run_id = open_parent_run(self.EXPERIMENT, self.key, "vsbench-abid-train", self.params, source="cli")
        if self.run_id:
            typer.echo(f"MLflow: parent run {self.run_id} (experiment {self.EXPERIMENT}) in {tracking_uri()}")
        return self.run_id

    def finished(self, metrics: dict) -> None:
        from vsbench.tracking.runs import log_to_parent

        log_to_parent(self.run_id, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})


@contextmanager
def _training_parent(track: bool, params: dict) -> Iterator[_Parent]:
    """A :class:`_Parent` for the block; ``--no-track`` turns tracking off for the job's nodes too."""
    from vsbench.platform.trainjob import TrainJobInputError
    from vsbench.tracking.config import disable_tracking
    from vsbench.tracking.runs import close_parent_run

    if not track:
        disable_tracking()
    parent = _Parent(track, params)
    succeeded = False
    try:
        yield parent
        succeeded = True
    except typer.Exit as exc:  # the --nproc launcher ends with Exit(0) once its workers trained
        succeeded = exc.exit_code == 0
        raise
    except TrainJobInputError as exc:  # every problem found before submitting: one line each
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2) from None
    finally:
        if parent.run_id:  # made here (a given --parent-run-id is its owner's to close)
            close_parent_run(parent.EXPERIMENT, parent.key, succeeded)


def _check_launch(task: str, tasks: Path, profile: str, overrides: dict, world_size: int) -> None:
    """:func:`vsbench.abid.launch.check_before_launch`, its refusal on one line (a profile's
    validation error included, which pydantic writes on several)."""
    from vsbench.abid.launch import check_before_launch
    from vsbench.cli.common import fail, user_message

    with user_errors():
        try:
            check_before_launch(task, tasks, profile, overrides, world_size)
        except ValueError as exc:
            fail(user_message(exc) or str(exc))


def _launch(task: str, nproc: int, overrides: dict, worker: list[str], tasks: Path, out: Path,
            profile: str, *, checked: bool = False) -> NoReturn:
    """torchrun with ``nproc`` workers here, after the checks that need no worker (batch against the
    training set, task files, profile, --out free); the terminal shows the workers' lines and, on a failure, their
    one-line error and where torchrun's whole output is, not its 40 lines of bookkeeping."""
    import os
    import sys

    from vsbench.abid.launch import JobOutput, run_logged

    if not checked:  # (the caller checked before opening its parent run)
        _check_launch(task, tasks, profile, overrides, nproc)
        _refuse_busy(out, task)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *worker]
    typer.echo(" ".join(command[1:]), err=True)
    output = JobOutput(out / f"torchrun_{task}.log", typer.echo)
    try:
        code = run_logged(command, output, {**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        output.close()
    if code:
        for line in output.failure(f"abid train {task} --nproc {nproc}"):
            typer.echo(line, err=True)
        raise typer.Exit(output.exit_code)
    raise typer.Exit(0)  # the workers trained: this launcher must not train again in one process


def _refuse_busy(out: Path, task: str) -> None:
    """Stop in one line, before starting any process, when another run writes ``out``. The lock
    is released at once: rank 0 of the job takes it (a launcher holding it would block its own
    rank 0, flock being per open file), so this is a courtesy check, not the lock itself."""
    from vsbench.io.locks import output_lock

    with user_errors(), output_lock(out, what=f"{out} (abid train {task})"):
        pass


@abid_app.command("run-local")
def abid_run_local(
    data_root: Annotated[Path, typer.Option(help="Data root for every step (raw/, tasks/, bin-images-resize/).")],
    source: Annotated[str, typer.Option(help="s3://bucket or s3://bucket/prefix to download from.")] = "s3://aft-vbi-pds",
    endpoint_url: Annotated[str, typer.Option(rich_help_panel=MORE, help="S3 endpoint URL; empty for AWS.")] = "",
    limit: Annotated[int, typer.Option(min=0, help="Only the N smallest bin ids; 0: all.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the split, the sampled questions and the training.")] = 0,
    size: Annotated[int, typer.Option(min=8, rich_help_panel=MORE,
                                      help="Side of the square resized images, in pixels.")] = 224,
    max_per_class: Annotated[int, typer.Option(min=1, rich_help_panel=MORE,
                                               help="Verification questions per answer (yes/no).")] = 20000,
    train_profile: Annotated[str, typer.Option(help="'demo' (CPU minutes) or 'full' (the challenge's settings).")] = "demo",
    train_overrides: Annotated[str, typer.Option(help='JSON of profile fields, e.g. \'{"epochs": 2}\'.')] = "{}",
    device: Annotated[str, typer.Option(help="'auto', 'cpu' or 'cuda'.")] = "auto",
    train_backend: Annotated[str, typer.Option(help="'pod': the baselines train in their steps; 'trainjob': each "
                                                    "train step runs a Trainer v2 TrainJob (here: podman containers).")] = "pod",
    train_nodes: Annotated[int, typer.Option(min=1, help="TrainJob nodes (--train-backend trainjob).")] = 2,
    train_gpus_per_node: Annotated[int, typer.Option(min=0, help="TrainJob GPUs per node; 0: CPU nodes.")] = 0,
    experiment: Annotated[str, typer.Option(rich_help_panel=MORE, help="MLflow experiment.")] = "vsbench-abid",
    pipeline_root: Annotated[Path | None, typer.Option(
        rich_help_panel=MORE, help="Where kfp.local keeps step outputs (default: DATA_ROOT/_kfp).")] = None,
    runner: RunnerOpt = "subprocess",
    image: ImageOpt = None,
    track: TrackOpt = True,
    verbose: VerboseOpt = False,
    verify_inputs: VerifyInputsOpt = "stat",
) -> None:
    """Run the ABID pipeline on this machine with kfp.local (MLflow from MLFLOW_TRACKING_URI, else a local store).

    The run holds the folders its steps write under DATA_ROOT for its whole length (one run, one
    holder: :func:`~vsbench.io.locks.run_lease`), taken first: a second run, or a step command into
    one of them, is refused at once (or waits, with VSBENCH_LOCK_WAIT_S, for the whole run)."""
    import contextlib
    import os

    from vsbench.io.locks import run_lease
    from vsbench.platform.trainjob import TRAIN_BACKENDS

    check_runner(runner)
    if train_backend not in TRAIN_BACKENDS:
        raise typer.BadParameter(f"must be one of {', '.join(TRAIN_BACKENDS)}, not {train_backend!r}",
                                 param_hint="--train-backend")
    _run_local_checks(source=source, train_profile=train_profile, train_overrides=train_overrides, device=device)
    with contextlib.ExitStack() as held:
        with user_errors():
            held.enter_context(run_lease([data_root / name for name in ABID_FOLDERS],
                                         what=f"{data_root} (abid run-local)"))
        _run_local(data_root, source=source, endpoint_url=endpoint_url, limit=limit, seed=seed, size=size,
                   max_per_class=max_per_class, train_profile=train_profile, train_overrides=train_overrides,
                   device=device, train_backend=train_backend, train_nodes=train_nodes,
                   train_gpus_per_node=train_gpus_per_node, experiment=experiment, pipeline_root=pipeline_root,
                   runner=runner, image=image, track=track, verbose=verbose, environ=os.environ,
                   verify_inputs=verify_inputs)


def _run_local_checks(**arguments: str) -> None:
    """`abid train`'s checks on what `abid run-local` passes on to its steps, before the pipeline starts:
    one line each, exit 2, nothing started and no MLflow run left behind."""
    from vsbench.abid.launch import pipeline_problems

    problems = pipeline_problems(arguments, lambda name: "--" + name.replace("_", "-"))
    if arguments["device"] not in ("auto", "cpu"):  # only then is torch worth importing to ask
        from vsbench.runtime.device import device_problem

        problems += [problem for problem in [device_problem(arguments["device"])] if problem]
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(BAD_INPUT_EXIT)


def _run_local(data_root: Path, *, source: str, endpoint_url: str, limit: int, seed: int, size: int,
               max_per_class: int, train_profile: str, train_overrides: str, device: str, train_backend: str,
               train_nodes: int, train_gpus_per_node: int, experiment: str, pipeline_root: Path | None, runner: str,
               image: str | None, track: bool, verbose: bool, environ, verify_inputs: str = "stat") -> None:
    """`abid run-local` once its folders are held."""
    from vsbench.tracking.command import prepare_pipeline_tracking

    tracked = prepare_pipeline_tracking(track, typer.echo)
    params = {"source": source, "limit": limit, "seed": seed, "size": size, "max_per_class": max_per_class,
              "profile": train_profile, "train_overrides": train_overrides, "data": f"{source} (limit {limit or 'none'})"}
    report = run_abid_pipeline_locally(
        data_root=data_root.resolve(), pipeline_root=(pipeline_root or data_root / "_kfp").resolve(),
        arguments={"source": source, "endpoint_url": endpoint_url, "limit": limit, "seed": seed, "size": size,
                   "max_per_class": max_per_class, "train_profile": train_profile,
                   "train_overrides": train_overrides, "device": device, "train_backend": train_backend,
                   "train_nodes": train_nodes, "train_gpus_per_node": train_gpus_per_node,
                   "experiment": experiment, "params_json": json.dumps(params), "verify_inputs": verify_inputs},
        runner=runner, image=image, verbose=verbose,
    )
    typer.echo(report.render())
    # as the demo ends: the scores, where the answers and files are, the store and the `mlflow ui` command
    typer.echo(abid_ending(report, environ.get("MLFLOW_TRACKING_URI", "") if tracked else "", experiment,
                           off="off (--no-track)" if not track else "the store was down: the run is kept (below)"))
    if track and not tracked and report.run_dir is not None:
        kept_bundle(report.run_dir, experiment, "vsbench-abid", params, report.parent_metrics(),
                     tags={"vsbench.profile": train_profile}, artifacts=report.manifests())
    if not report.succeeded:
        raise typer.Exit(1)
