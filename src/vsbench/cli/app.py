"""The ``vsbench`` command line: every pipeline step is also a command here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.score import score_app, user_errors
from vsbench.platform.demo import DEFAULT_BINS

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Visual-similarity benchmarks as Kubeflow pipelines.")
synth_app = typer.Typer(no_args_is_help=True, help="Generate small datasets in the benchmarks' native layouts.")
abid_app = typer.Typer(no_args_is_help=True, help="Amazon Bin Image Dataset: download, prepare, resize, run.")
app.add_typer(synth_app, name="synth")
app.add_typer(abid_app, name="abid")
similarity_app = typer.Typer(no_args_is_help=True, help="Embed, index and score any benchmark with any model.")
app.add_typer(similarity_app, name="similarity")
app.add_typer(score_app, name="score", help="Score result files exactly as the original benchmarks do.")
track_app = typer.Typer(no_args_is_help=True, help="MLflow runs kept locally: upload them when the store is back.")
app.add_typer(track_app, name="track")

EndpointOpt = Annotated[str | None, typer.Option(help="S3 endpoint URL (for a local or non-AWS S3).")]
RunnerOpt = Annotated[str, typer.Option(
    help="'subprocess': each step a process of this environment; 'container': each step in the vsbench image "
         "as a pod runs it (UID 10001, read-only root, tmpfs /tmp; docker or podman, started as needed).")]
ImageOpt = Annotated[str | None, typer.Option(
    help="Image every step runs in with --runner container (default: the CPU image that `make images` builds).")]
TrackOpt = Annotated[bool, typer.Option(
    "--track/--no-track", help="Record an MLflow run (MLFLOW_TRACKING_URI, else a local store it prints); "
                               "a store down or hanging costs at most VSBENCH_TRACKING_TIMEOUT s (30).")]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", help="Stream kfp.local's executor logs (otherwise one line per step; the logs go to a file).")]


def _kept_bundle(folder: Path, experiment: str, pipeline: str, params: dict, metrics: dict, *, tags: dict,
                 artifacts: dict[str, str]) -> None:
    """A pipeline that ran untracked because the store was down: its run kept for `vsbench track upload`."""
    from vsbench.tracking.command import BUNDLE_NAME, keep_for_later

    keep_for_later(folder / BUNDLE_NAME, typer.echo, experiment=experiment, pipeline=pipeline, params=params,
                   metrics=metrics, tags=tags, artifacts=artifacts)


def _check_runner(runner: str, choices: tuple[str, ...] = ("subprocess", "container")) -> None:
    if runner not in choices:
        raise typer.BadParameter(f"must be one of {', '.join(choices)}, not {runner!r}", param_hint="--runner")


def _print_summary(title: str, data: dict, keys: list[str]) -> None:
    typer.echo(title)
    width = max(len(k) for k in keys)
    for key in keys:
        if key in data:
            typer.echo(f"  {key:<{width}}  {data[key]}")


@synth_app.command("abid")
def synth_abid(
    out: Annotated[str, typer.Option(help="Folder, or s3://bucket/prefix (with --endpoint-url).")],
    bins: Annotated[int, typer.Option(min=1, help="Number of bin ids to generate.")] = 500,
    seed: Annotated[int, typer.Option(help="Seed: same seed, byte-identical files.")] = 0,
    workers: Annotated[int, typer.Option(min=1, help="Processes.")] = 1,
    endpoint_url: EndpointOpt = None,
) -> None:
    """Generated bin photos and metadata in the exact ABID layout."""
    import tempfile

    from vsbench.abid.synth import generate_abid
    from vsbench.io.storage import is_s3_uri, local_path, s3_client, upload_tree

    if is_s3_uri(out):
        with tempfile.TemporaryDirectory(prefix="vsbench-synth-") as tmp:
            summary = generate_abid(Path(tmp), bins, seed, workers=workers)
            uploaded = upload_tree(Path(tmp), out, s3_client(endpoint_url))
        typer.echo(f"uploaded {uploaded} objects to {out}")
    else:
        summary = generate_abid(local_path(out), bins, seed, workers=workers)
    typer.echo(json.dumps(summary.as_dict(), indent=2))


@abid_app.command("download")
def abid_download(
    dest: Annotated[Path, typer.Option(help="Local data root: bin-images/ and metadata/ are created here.")],
    source: Annotated[str, typer.Option(help="s3://bucket or s3://bucket/prefix holding bin-images/ and metadata/.")] = "s3://aft-vbi-pds",
    limit: Annotated[int | None, typer.Option(min=1, help="Only the N smallest bin ids (with their metadata).")] = None,
    endpoint_url: EndpointOpt = None,
    concurrency: Annotated[int, typer.Option(min=1, max=512, help="Requests in flight.")] = 64,
    retries: Annotated[int, typer.Option(min=1, help="Attempts per object.")] = 5,
) -> None:
    """Mirror ABID from S3: anonymous by default, resumable, verified, atomic."""
    from vsbench.abid.download import MANIFEST_NAME, DownloadInterrupted, download_abid
    from vsbench.io.storage import S3AccessError

    try:
        summary = download_abid(source, dest, limit=limit, endpoint_url=endpoint_url, concurrency=concurrency,
                                retries=retries)
    except (S3AccessError, ValueError) as exc:  # one job-wide cause (denied, no bucket, wrong endpoint, a bad setting)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except DownloadInterrupted as exc:  # SIGTERM or SIGINT: the manifest is written, say so in one line
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    data = summary.as_dict()
    _print_summary("download", data, ["listed_keys", "planned", "fetched", "skipped", "failed", "ignored_keys",
                                      "duplicate_spellings", "spelling_conflicts", "seconds", "objects_per_second"])
    if (dest / MANIFEST_NAME).exists():  # not written when a failed run fetched nothing (nothing is left behind)
        typer.echo(f"manifest: {dest / MANIFEST_NAME}")
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
    from vsbench.abid.prepare import PREPARE_COUNTS, REPORT_NAME, prepare_abid

    summary = prepare_abid(data, out, seed=seed, val_fraction=val_fraction, max_per_class=max_per_class).as_dict()
    _print_summary("prepare", summary, list(PREPARE_COUNTS))
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
    size: Annotated[int, typer.Option(min=8, help="Side of the square output.")] = 224,
    quality: Annotated[int, typer.Option(min=1, max=100, help="JPEG quality of the output.")] = 75,
    decode: Annotated[str, typer.Option(help="'full' (the default: byte-equal to the challenge's Pillow loop), "
                                        "'fast' (libjpeg-turbo via simplejpeg + torch's antialiased bilinear, DCT-"
                                        "domain downscale of photos >= 2x the size; faster, a little off the "
                                        "challenge's pixels: docs/abid.md 'Resize'; bad files take the 'draft' path) "
                                        "or 'draft' (Pillow, DCT-domain downscale when >= 2x).")] = "full",
    workers: Annotated[int, typer.Option(min=0, help="Processes; 0 = all cores.")] = 0,
    max_failure_rate: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Fail the step when more than this share of images cannot be resized "
        "(default: VSBENCH_MAX_FAILURE_RATE, else 0.01); the failures are listed either way.")] = None,
) -> None:
    """Resize every bin image (bilinear), in parallel; bad inputs are listed and skipped."""
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
    _print_summary("resize", summary, ["inputs", "resized", "kept", "failed", "seconds", "images_per_second"])
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
    parent_run_id: Annotated[str, typer.Option(help="MLflow parent run; empty: no tracking.")] = "",
) -> None:
    """Train one ABID baseline, resumably; in one process, or data-parallel with --nproc N (or under
    `torchrun --nproc-per-node N -m vsbench abid train ...`, as a PyTorchJob does on each node)."""
    import os
    import subprocess
    import sys

    from vsbench.steps.abid import abid_train_counting_step, abid_train_siamese_step

    if task not in TRAIN_TASKS:
        raise typer.BadParameter(f"must be one of {', '.join(TRAIN_TASKS)}, not {task!r}", param_hint="TASK")
    with user_errors(json.JSONDecodeError):
        parsed = json.loads(overrides)
        if not isinstance(parsed, dict):
            raise ValueError(f"--overrides must be a JSON object of profile fields, not {overrides!r}")
    if nproc > 1:
        if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
            raise typer.BadParameter("already running under torchrun (WORLD_SIZE is set): leave --nproc at 1",
                                     param_hint="--nproc")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   "-m", "vsbench", "abid", "train", task, "--tasks", str(tasks), "--images", str(images),
                   "--out", str(out), "--profile", profile, "--overrides", overrides, "--seed", str(seed),
                   "--device", device, "--parent-run-id", parent_run_id]
        typer.echo(" ".join(command[1:]), err=True)
        raise typer.Exit(subprocess.run(command, check=False).returncode)
    step = abid_train_counting_step if task == "counting" else abid_train_siamese_step
    from pydantic import ValidationError

    with user_errors(ValidationError, FileNotFoundError):
        result = step(str(tasks), str(images), str(out), profile=profile, seed=seed, device=device, overrides=parsed,
                      parent_run_id=parent_run_id, manifest_path=str(out / f"train_{task}.json"))
    if int(os.environ.get("RANK", "0") or 0) == 0:
        _print_summary(f"train {task}", result.metrics, list(result.metrics))
        typer.echo(f"result: {result.manifest['result']}")


@abid_app.command("run-local")
def abid_run_local(
    data_root: Annotated[Path, typer.Option(help="Data root for every step (raw/, tasks/, bin-images-resize/).")],
    source: Annotated[str, typer.Option(help="s3://bucket or s3://bucket/prefix to download from.")] = "s3://aft-vbi-pds",
    endpoint_url: Annotated[str, typer.Option(help="S3 endpoint URL; empty for AWS.")] = "",
    limit: Annotated[int, typer.Option(min=0, help="0 = everything.")] = 0,
    seed: int = 0,
    size: int = 224,
    max_per_class: int = 20000,
    train_profile: Annotated[str, typer.Option(help="'demo' (CPU minutes) or 'full' (the challenge's settings).")] = "demo",
    train_overrides: Annotated[str, typer.Option(help='JSON of profile fields, e.g. \'{"epochs": 2}\'.')] = "{}",
    device: Annotated[str, typer.Option(help="'auto', 'cpu' or 'cuda'.")] = "auto",
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "vsbench-abid",
    pipeline_root: Annotated[Path | None, typer.Option(help="Where kfp.local keeps step outputs.")] = None,
    runner: RunnerOpt = "subprocess",
    image: ImageOpt = None,
    track: TrackOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Run the ABID pipeline on this machine with kfp.local (MLflow from MLFLOW_TRACKING_URI, else a local store)."""
    from vsbench.platform.local_run import run_abid_pipeline_locally
    from vsbench.tracking.command import prepare_pipeline_tracking

    _check_runner(runner)
    tracked = prepare_pipeline_tracking(track, typer.echo)
    params = {"source": source, "limit": limit, "seed": seed, "size": size, "max_per_class": max_per_class,
              "profile": train_profile, "train_overrides": train_overrides, "data": f"{source} (limit {limit or 'none'})"}
    report = run_abid_pipeline_locally(
        data_root=data_root.resolve(), pipeline_root=(pipeline_root or data_root / "_kfp").resolve(),
        arguments={"source": source, "endpoint_url": endpoint_url, "limit": limit, "seed": seed, "size": size,
                   "max_per_class": max_per_class, "train_profile": train_profile,
                   "train_overrides": train_overrides, "device": device,
                   "experiment": experiment, "params_json": json.dumps(params)},
        runner=runner, image=image, verbose=verbose,
    )
    typer.echo(report.render())
    if track and not tracked and report.run_dir is not None:
        _kept_bundle(report.run_dir, experiment, "vsbench-abid", params, report.parent_metrics(),
                     tags={"vsbench.profile": train_profile}, artifacts=report.manifests())
    if not report.succeeded:
        raise typer.Exit(1)


@synth_app.command("similarity")
def synth_similarity(
    benchmark: Annotated[str, typer.Argument(help="disc, copydays, skimage-copydetect, patch-pairs, vsd, product-search")],
    out: Annotated[Path, typer.Option(help="Folder for the dataset (in the benchmark's native layout).")],
    seed: int = 0,
) -> None:
    """A small dataset in a similarity benchmark's native layout (for tests and the demo)."""
    from vsbench.benchmarks.registry import generate

    typer.echo(json.dumps(generate(benchmark, out, seed=seed), indent=2, default=str))


BenchmarkOpt = Annotated[str, typer.Option(help="Registered benchmark: disc, copydays, patch_pairs, vsd, ...")]
RootOpt = Annotated[Path, typer.Option(help="The benchmark's data, in its native layout.")]
OutOpt = Annotated[Path, typer.Option(help="Folder for features, index/, search/, metrics.json and the benchmark's CSV.")]
BenchmarkOptionsOpt = Annotated[str, typer.Option(help="JSON of the benchmark loader's options.")]
CodecsOpt = Annotated[str, typer.Option(help="FAISS index_factory strings separated by ';'.")]
KOpt = Annotated[int, typer.Option(min=1, help="Neighbours per query.")]
ScoreNormOpt = Annotated[str, typer.Option(help="beta\\[first,last], e.g. 1.00\\[0,2]; '' for none.")]
GlobalCapOpt = Annotated[int, typer.Option(min=0, help="Keep at most this many predictions in total (0: off).")]
SearchParamsOpt = Annotated[str, typer.Option(
    help="FAISS search-time settings for every codec, e.g. 'nprobe=16' (IVF) or 'efSearch=64' (HNSW).")]
SearchShardsOpt = Annotated[int, typer.Option(min=1, help="Split the queries into this many search shards.")]
ReferenceShardsOpt = Annotated[int, typer.Option(
    min=1, help="Split the gallery into this many indexes (one search task per query shard x reference shard).")]


def _benchmark_options(text: str) -> dict:
    from vsbench.retrieval.engine import load_json_option

    try:
        return load_json_option(text, "--benchmark-options")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@similarity_app.command("run")
def similarity_run(
    benchmark: BenchmarkOpt,
    root: RootOpt,
    out: OutOpt,
    model: Annotated[str, typer.Option(help="Registered model (vsbench similarity models).")] = "efficientnet_lite0",
    model_options: Annotated[str, typer.Option(help='JSON, e.g. \'{"weights": "random"}\'.')] = "{}",
    benchmark_options: BenchmarkOptionsOpt = "{}",
    codecs: CodecsOpt = "Flat",
    k: KOpt = 10,
    global_cap: GlobalCapOpt = 0,
    score_norm: ScoreNormOpt = "1.00[0,2]",
    num_shards: Annotated[int, typer.Option(min=1, help="Embed in this many shards (run here one after another).")] = 1,
    search_shards: SearchShardsOpt = 1,
    reference_shards: ReferenceShardsOpt = 1,
    search_params: SearchParamsOpt = "",
    batch_size: int = 64,
    device: str = "auto",
    seed: Annotated[int, typer.Option(
        min=0, max=2**63 - 1,
        help='Seed of {"weights": "random"}: the same seed draws the same network in every model family.')] = 0,
    runner: Annotated[str, typer.Option(
        help="'inline': every step in this process; 'subprocess' or 'container': the similarity pipeline with "
             "kfp.local, each step a process of this environment or a container of the vsbench image.")] = "inline",
    image: ImageOpt = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "vsbench-similarity",
    track: TrackOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """Embed every image set, index, search, score; prints the benchmark's own table.

    Shards run here one after another (inline) or as kfp.local tasks; the table is the same for any
    number of search and reference shards."""
    from vsbench.retrieval.engine import load_json_option
    from vsbench.steps.abid import (
        similarity_embed_step,
        similarity_index_step,
        similarity_score_step,
        similarity_search_step,
    )

    _check_runner(runner, ("inline", "subprocess", "container"))
    bench_opts = _benchmark_options(benchmark_options)
    try:
        model_opts = load_json_option(model_options, "--model-options")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    search = {"codecs": codecs, "k": k, "score_norm": score_norm}
    if "seed" in model_opts:
        raise typer.BadParameter("the seed is --seed, not a key of --model-options", param_hint="--model-options")
    run_params = _similarity_params(benchmark, model, model_opts, bench_opts, search, global_cap, search_params, seed)
    if runner != "inline":
        from vsbench.platform.local_run import failure_tail, run_similarity_pipeline_locally
        from vsbench.tracking.command import prepare_pipeline_tracking
        from vsbench.tracking.provenance import data_tags

        tracked = prepare_pipeline_tracking(track, typer.echo)
        tags = data_tags(root.resolve())
        run = run_similarity_pipeline_locally(
            root.resolve(), out.resolve(), runner=runner, image=image, verbose=verbose,
            arguments={"benchmark": benchmark, "model": model, "model_options": json.dumps(model_opts),
                       "benchmark_options": json.dumps(bench_opts), **search, "global_cap": global_cap,
                       "num_shards": num_shards, "search_shards": search_shards, "reference_shards": reference_shards,
                       "search_params": search_params,
                       "batch_size": batch_size, "device": device, "seed": seed, "experiment": experiment,
                       "params_json": json.dumps({**run_params, "data_tags": {**tags, **_baseline_tag(model_opts)}})})
        if not run.succeeded:
            typer.echo(f"similarity pipeline failed: {run.error}", err=True)
            typer.echo(failure_tail(run.failed_step, list(run.log_tail), run.log_path), err=True)
            raise typer.Exit(1)
        from vsbench.platform.local_run import step_manifests

        (scored,) = step_manifests(run.run_dir, "score")
        manifest = json.loads(scored.read_text())
        _print_similarity_table(out, manifest)
        typer.echo(f"ran in: {run.ran_in}")
        if track and not tracked:
            _kept_bundle(out, experiment, "vsbench-similarity", run_params,
                         _similarity_metrics(benchmark, model, manifest), tags={**tags, **_baseline_tag(model_opts)},
                         artifacts=_similarity_artifacts(out, manifest))
        return
    import time

    started = time.time()
    common = {"model": model, **search, "benchmark_options": bench_opts}
    with user_errors():  # a bad input or a damaged reused file: one line naming it, as every other command
        for shard in range(num_shards):
            similarity_embed_step(benchmark, str(root), str(out), model, shard=shard, num_shards=num_shards,
                                  benchmark_options=bench_opts, model_options=model_opts, batch_size=batch_size,
                                  device=device, seed=seed)
        similarity_index_step(benchmark, str(root), str(out), reference_shards=reference_shards, **common)
        for task in range(search_shards * reference_shards):
            similarity_search_step(benchmark, str(root), str(out), task=task, search_shards=search_shards,
                                   reference_shards=reference_shards, search_params=search_params, **common)
        result = similarity_score_step(benchmark, str(root), str(out), global_cap=global_cap,
                                       search_shards=search_shards, search_params=search_params, **common)
    _print_similarity_table(out, result.manifest)
    if track:
        from vsbench.tracking.command import BUNDLE_NAME, record_command_run
        from vsbench.tracking.provenance import data_tags

        record_command_run(out / BUNDLE_NAME, experiment=experiment, pipeline="vsbench-similarity", params=run_params,
                           metrics=_similarity_metrics(benchmark, model, result.manifest),
                           tags={**data_tags(root.resolve()), **_baseline_tag(model_opts)},
                           artifacts=_similarity_artifacts(out, result.manifest), started=started,
                           kept=out / "metrics.json", announce=typer.echo)


def _similarity_params(benchmark: str, model: str, model_opts: dict, bench_opts: dict, search: dict,
                       global_cap: int, search_params: str, seed: int = 0) -> dict:
    """A similarity run's MLflow params: what decides its numbers (not shards, batch or device).
    ``seed`` is the one the random weights were drawn with (--seed), the same the embed step logs."""
    return {"benchmark": benchmark, "model": model, "model_options": json.dumps(model_opts, sort_keys=True),
            "benchmark_options": json.dumps(bench_opts, sort_keys=True), **search, "global_cap": global_cap,
            "search_params": search_params or "-", "seed": seed}


def _baseline_tag(model_opts: dict) -> dict[str, str]:
    """Untrained weights make a random-features baseline, which the report draws beside trained models."""
    from vsbench.tracking.provenance import BASELINE_TAG

    return {BASELINE_TAG: "random-features"} if str(model_opts.get("weights", "")) == "random" else {}


def _similarity_metrics(benchmark: str, model: str, manifest: dict) -> dict[str, float]:
    """The score step's records as the pipeline's parent run holds them: ``<benchmark>__<model>__<metric>``."""
    from vsbench.retrieval.engine import flat_metrics
    from vsbench.steps.abid import parent_metric_names

    return parent_metric_names(benchmark, model, flat_metrics(manifest.get("records", [])))


def _similarity_artifacts(out: Path, manifest: dict) -> dict[str, str]:
    """metrics.json, the benchmark's own CSV and its plots (file -> artifact folder)."""
    files = {str(out / "metrics.json"): ""}
    if manifest.get("csv"):
        files[str(out / manifest["csv"])] = ""
    for plot in manifest.get("plots", []):
        files[str(out / plot)] = str(Path(plot).parent).replace(".", "") or ""
    return files


@similarity_app.command("index")
def similarity_index(
    benchmark: BenchmarkOpt, root: RootOpt, out: OutOpt, benchmark_options: BenchmarkOptionsOpt = "{}",
    codecs: CodecsOpt = "Flat", k: KOpt = 10, score_norm: ScoreNormOpt = "1.00[0,2]",
    reference_shards: ReferenceShardsOpt = 1, model: Annotated[str, typer.Option(help="Recorded only.")] = "",
) -> None:
    """Merge the embedding shards under OUT and build each FAISS index the benchmark searches
    (OUT/index/; reused when built before for the same features)."""
    from vsbench.steps.abid import similarity_index_step

    with user_errors():
        result = similarity_index_step(benchmark, str(root), str(out), model=model, codecs=codecs, k=k,
                                       score_norm=score_norm, reference_shards=reference_shards,
                                       benchmark_options=_benchmark_options(benchmark_options))
    for built in result.manifest["indexes"]:
        typer.echo(f"{built['search']}/{built['codec']}: {built['count']} vectors in {len(built['reference_shards'])} "
                   f"shard(s), {'reused' if built['reused'] else 'built'} ({built['folder']})")
    if "note" in result.manifest:
        typer.echo(result.manifest["note"])


@similarity_app.command("search")
def similarity_search(
    benchmark: BenchmarkOpt, root: RootOpt, out: OutOpt, benchmark_options: BenchmarkOptionsOpt = "{}",
    codecs: CodecsOpt = "Flat", k: KOpt = 10, score_norm: ScoreNormOpt = "1.00[0,2]",
    search_shards: SearchShardsOpt = 1, reference_shards: ReferenceShardsOpt = 1, search_params: SearchParamsOpt = "",
    task: Annotated[list[int] | None, typer.Option(
        help="Search task(s) to run (query shard = task // reference shards); default: every task.")] = None,
    model: Annotated[str, typer.Option(help="Recorded only.")] = "",
) -> None:
    """Search query shards in reference shards of the indexes under OUT/index/ (finished results are kept)."""
    from vsbench.steps.abid import similarity_search_step

    options = _benchmark_options(benchmark_options)
    for number in task if task else range(search_shards * reference_shards):
        with user_errors():
            result = similarity_search_step(benchmark, str(root), str(out), task=number, search_shards=search_shards,
                                            reference_shards=reference_shards, model=model, codecs=codecs, k=k,
                                            score_norm=score_norm, search_params=search_params,
                                            benchmark_options=options)
        typer.echo(f"task {number}: query shard {result.manifest['query_shard']} x reference shard "
                   f"{result.manifest['reference_shard']}: {len(result.manifest['results'])} result file(s)")


@similarity_app.command("score")
def similarity_score(
    benchmark: BenchmarkOpt, root: RootOpt, out: OutOpt, benchmark_options: BenchmarkOptionsOpt = "{}",
    codecs: CodecsOpt = "Flat", k: KOpt = 10, score_norm: ScoreNormOpt = "1.00[0,2]", global_cap: GlobalCapOpt = 0,
    search_shards: SearchShardsOpt = 1, search_params: SearchParamsOpt = "",
    model: Annotated[str, typer.Option(help="Recorded only.")] = "",
) -> None:
    """Merge the search results under OUT/search/ and print the benchmark's own table."""
    from vsbench.steps.abid import similarity_score_step

    with user_errors():
        result = similarity_score_step(benchmark, str(root), str(out), model=model, codecs=codecs, k=k,
                                       global_cap=global_cap, score_norm=score_norm, search_shards=search_shards,
                                       search_params=search_params,
                                       benchmark_options=_benchmark_options(benchmark_options))
    _print_similarity_table(out, result.manifest)


def _print_similarity_table(out: Path, manifest: dict) -> None:
    csv_name = manifest.get("csv")
    if csv_name and (out / csv_name).exists():
        typer.echo((out / csv_name).read_text().rstrip())
    else:
        typer.echo(json.dumps(manifest.get("records", []), indent=2))
    typer.echo(f"metrics: {out / 'metrics.json'}")


@similarity_app.command("models")
def similarity_models(
    name: Annotated[str | None, typer.Argument(help="A model name (e.g. timm:resnet50) to describe.")] = None,
    model_options: Annotated[str, typer.Option(help='JSON, e.g. \'{"weights": "random"}\'.')] = "{}",
) -> None:
    """List the registered models; with NAME, its preprocessing, dimension, output layer and where
    its weights would come from (nothing is downloaded: the network is built untrained)."""
    from dataclasses import asdict

    from vsbench.models.registry import available_models, describe_model, families
    from vsbench.retrieval.engine import load_json_option

    if name is None:
        for registered in available_models():
            typer.echo(registered)
        for family in families():
            typer.echo(f"  e.g. {family.example}")
        return
    try:
        info = describe_model(name, **load_json_option(model_options, "--model-options"))
    except (ValueError, ImportError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"model: {info.name}")
    typer.echo(f"dim: {info.dim}")
    typer.echo(f"output: {info.output}")
    typer.echo(f"weights: {info.weights}")
    if info.preprocessing is not None:
        typer.echo(f"preprocessing: {json.dumps(asdict(info.preprocessing))}")


@app.command("compile")
def compile_pipelines(
    out: Annotated[Path, typer.Option(help="Folder for the compiled pipeline YAML files.")],
    cluster_config: Annotated[Path | None, typer.Option(help="YAML of vsbench.platform.cluster.ClusterSettings fields.")] = None,
    suite: Annotated[Path | None, typer.Option(help="Nightly suite YAML (default: the one shipped).")] = None,
) -> None:
    """Compile every pipeline to YAML for upload to a Kubeflow cluster."""
    from vsbench.platform.cluster import ClusterSettings
    from vsbench.platform.compile import compile_all

    for path in compile_all(out, ClusterSettings.load(cluster_config), suite):
        typer.echo(str(path))


HostOpt = Annotated[str, typer.Option(help="Kubeflow Pipelines API URL (token from $KFP_TOKEN).")]
ArgOpt = Annotated[list[str] | None, typer.Option("--arg", "-a", help="Pipeline parameter NAME=VALUE (repeatable).")]


@app.command("submit")
def submit(
    host: HostOpt,
    pipeline: Annotated[str, typer.Option(help="abid, similarity or nightly.")] = "abid",
    arg: ArgOpt = None,
    experiment: Annotated[str, typer.Option(help="KFP experiment.")] = "vsbench",
    run_name: Annotated[str | None, typer.Option(help="Run name (default: pipeline and UTC time).")] = None,
    cluster_config: Annotated[Path | None, typer.Option(help="YAML of ClusterSettings fields.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubeflow profile namespace.")] = None,
) -> None:
    """Compile a pipeline with the cluster settings and start one run of it."""
    from vsbench.platform.cluster import ClusterSettings
    from vsbench.platform.kfp_client import parse_arguments
    from vsbench.platform.kfp_client import submit as submit_run

    with user_errors():
        run_id = submit_run(host, pipeline, arguments=parse_arguments(arg or [], pipeline=pipeline),
                            experiment=experiment, run_name=run_name, cluster=ClusterSettings.load(cluster_config),
                            namespace=namespace)
    typer.echo(f"run {run_id}")


@app.command("schedule")
def schedule(
    host: HostOpt,
    cron: Annotated[str, typer.Option(help="KFP cron: six fields, seconds first, UTC (02:00 nightly: '0 0 2 * * *').")],
    pipeline: Annotated[str, typer.Option(help="abid, similarity or nightly.")] = "nightly",
    arg: ArgOpt = None,
    experiment: Annotated[str, typer.Option(help="KFP experiment.")] = "vsbench-nightly",
    job_name: Annotated[str, typer.Option(help="Name of the recurring run.")] = "vsbench-nightly",
    replace: Annotated[bool, typer.Option(help="Replace a recurring run of the same name.")] = False,
    cluster_config: Annotated[Path | None, typer.Option(help="YAML of ClusterSettings fields.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubeflow profile namespace.")] = None,
) -> None:
    """Upload a pipeline (a new version if it exists) and create its recurring run."""
    from vsbench.platform.cluster import ClusterSettings
    from vsbench.platform.kfp_client import parse_arguments
    from vsbench.platform.kfp_client import schedule as schedule_run

    with user_errors():
        job_id = schedule_run(host, pipeline, cron=cron, arguments=parse_arguments(arg or [], pipeline=pipeline),
                              experiment=experiment, job_name=job_name, cluster=ClusterSettings.load(cluster_config),
                              namespace=namespace, replace=replace)
    typer.echo(f"recurring run {job_id} ({cron}, UTC)")


@app.command("compare")
def compare(
    experiment: Annotated[str, typer.Option(help="MLflow experiment (from MLFLOW_TRACKING_URI).")],
    last: Annotated[int | None, typer.Option(min=1, help="Only the newest N pipeline runs.")] = None,
    report: Annotated[Path, typer.Option(help="Where to write the HTML report.")] = Path("vsbench-report.html"),
) -> None:
    """Leaderboard of pipeline runs (model x benchmark x metric, best marked) and an HTML report."""
    from vsbench.reporting.compare import collect_runs, leaderboard, render_leaderboard, render_runs, write_report

    with user_errors(LookupError):  # a missing experiment
        runs = collect_runs(experiment, last=last)
    if not runs:
        typer.echo(f"no finished pipeline runs in experiment {experiment!r}", err=True)
        raise typer.Exit(1)
    typer.echo(render_leaderboard(leaderboard(runs)))
    typer.echo("")
    typer.echo(render_runs(runs))
    write_report(runs, report, title=f"{experiment}" + (f": last {last} runs" if last else ""))
    typer.echo(f"report: {report}")


@app.command("demo")
def demo(
    out: Annotated[Path, typer.Option(help="Folder for everything the demo writes.")] = Path("demo-output"),
    bins: Annotated[int, typer.Option(min=20, help="Generated bins (scale the demo up with this).")] = DEFAULT_BINS,
    seed: int = 0,
    profile: Annotated[str, typer.Option(help="Training profile: 'demo' (CPU minutes) or 'full' (the challenge's).")] = "demo",
    runner: RunnerOpt = "subprocess",
    image: ImageOpt = None,
    track: TrackOpt = True,
    verbose: VerboseOpt = False,
) -> None:
    """The ABID pipeline end to end on generated data served from a local S3 endpoint."""
    from vsbench.platform.demo import run_demo

    _check_runner(runner)
    raise typer.Exit(run_demo(out.resolve(), bins=bins, seed=seed, profile=profile, runner=runner, image=image,
                              track=track, verbose=verbose))


@track_app.command("upload")
def track_upload(
    location: Annotated[Path, typer.Argument(help="A run bundle (mlflow-run.json) or a folder holding bundles.")],
    tracking_uri: Annotated[str | None, typer.Option(help="Store to upload to (default: MLFLOW_TRACKING_URI, "
                                                          "else the local default store; never the URI a "
                                                          "bundle names).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Upload bundles already uploaded too.")] = False,
) -> None:
    """Upload runs a command kept locally because MLflow was down (idempotent: a run is found by its key).

    A bundle is data: it is checked whole before the store is contacted (types, sizes, artifacts only
    from its own folder, its digest), and may only complete the run it made itself."""
    import os

    from vsbench.tracking.command import (
        DEFAULT_STORE_ENV,
        BundleRefused,
        find_bundles,
        read_bundle,
        resolve_store,
        upload_bundle,
    )

    with user_errors(FileNotFoundError):
        bundles = find_bundles(location)
    if not bundles:
        typer.echo(f"no run bundles (mlflow-run.json) at {location}", err=True)
        raise typer.Exit(1)
    if not tracking_uri and not os.environ.get("MLFLOW_TRACKING_URI", "").strip():
        if os.environ.get(DEFAULT_STORE_ENV, "").strip().lower() == "off":
            typer.echo(f"error: no store to upload to: MLFLOW_TRACKING_URI is not set and {DEFAULT_STORE_ENV}=off "
                       "forbids the local default; set MLFLOW_TRACKING_URI or pass --tracking-uri", err=True)
            raise typer.Exit(2)
        tracking_uri = resolve_store(typer.echo)
    failed = 0
    for bundle in bundles:
        try:
            data = read_bundle(bundle)
            if data["uploaded"] and not force:
                typer.echo(f"{bundle}: already uploaded as run {data['uploaded']['run_id']} "
                           f"({data['uploaded']['tracking_uri']})")
                continue
            run_id = upload_bundle(bundle, tracking_uri)
        except (ValueError, BundleRefused) as exc:  # InputError included: the bundle's own problem, one line
            failed += 1
            typer.echo(f"not uploaded: {exc}", err=True)
            continue
        except Exception as exc:  # noqa: BLE001 - one line per bundle, the others still go
            failed += 1
            typer.echo(f"{bundle}: not uploaded: {type(exc).__name__}: {str(exc)[:300]}", err=True)
            continue
        typer.echo(f"{bundle}: MLflow run {run_id}")
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover
    app()
