"""``vsbench similarity``: embed, index, search and score any registered benchmark with any model,
inline or as kfp.local tasks, and the list of models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.common import (
    ImageOpt,
    TrackOpt,
    VerboseOpt,
    check_runner,
    kept_bundle,
    user_errors,
)

similarity_app = typer.Typer(no_args_is_help=True, help="Embed, index and score any benchmark with any model.")


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

    check_runner(runner, ("inline", "subprocess", "container"))
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
            kept_bundle(out, experiment, "vsbench-similarity", run_params,
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
