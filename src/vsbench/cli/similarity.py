"""``vsbench similarity``: embed, index, search and score any registered benchmark with any model,
inline or as kfp.local tasks, and the list of models."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.common import (
    BAD_INPUT_EXIT,
    DecodeOpt,
    ImageOpt,
    TrackOpt,
    VerboseOpt,
    VerifyInputsOpt,
    check_decode,
    check_runner,
    fail,
    kept_bundle,
    refuse_busy,
    user_errors,
)
from vsbench.cli.helpfmt import MORE, App
from vsbench.platform.local_run import failure_tail, run_similarity_pipeline_locally, step_manifests

similarity_app = App(no_args_is_help=True, help="Embed, index and score any benchmark with any model.")


BenchmarkOpt = Annotated[str, typer.Option(help="A registered benchmark, any of its spellings (vsbench benchmarks lists them).")]
RootOpt = Annotated[Path, typer.Option(help="The benchmark's data, in its native layout.")]
OutOpt = Annotated[Path, typer.Option(help="Folder for features, index/, search/, metrics.json and the benchmark's CSV.")]
BenchmarkOptionsOpt = Annotated[str, typer.Option(help="JSON of the benchmark loader's options.")]
CodecsOpt = Annotated[str, typer.Option(help="FAISS index_factory strings separated by ';'.")]
KOpt = Annotated[int, typer.Option(min=1, help="Neighbours kept per query.")]
ScoreNormOpt = Annotated[str, typer.Option(rich_help_panel=MORE, help="Score normalization beta[first,last], "
                                                                        "e.g. 1.00[0,2]; '' for none.")]
GlobalCapOpt = Annotated[int, typer.Option(min=0, rich_help_panel=MORE,
                                           help="Keep at most this many predictions in total (0: off).")]
SearchParamsOpt = Annotated[str, typer.Option(
    rich_help_panel=MORE, help="FAISS search-time settings for every codec, e.g. 'nprobe=16' (IVF) or 'efSearch=64' "
                               "(HNSW); default: the codec's own.")]
SearchShardsOpt = Annotated[int, typer.Option(min=1, rich_help_panel=MORE,
                                              help="Split the queries into this many search shards.")]
ReferenceShardsOpt = Annotated[int, typer.Option(
    min=1, rich_help_panel=MORE,
    help="Split the gallery into this many indexes (one search task per query shard x reference shard).")]
MergeOndiskOpt = Annotated[bool, typer.Option(
    "--merge-ondisk", rich_help_panel=MORE,
    help="IVF codecs only: merge the reference shards' inverted lists into one on-disk index "
    "(index --finish), searched once per query shard instead of once per reference shard. Give it to index, "
    "search and score alike.")]
StepModelOpt = Annotated[str, typer.Option(
    help="The model the features must come from (checked, with --model-options and --seed where given), and "
         "recorded; default: the features' own.")]
StepModelOptionsOpt = Annotated[str, typer.Option(
    rich_help_panel=MORE, help="JSON: the model options the features must have been embedded with (checked); "
                               "default: not checked.")]
StepSeedOpt = Annotated[int | None, typer.Option(
    min=0, max=2**63 - 1, rich_help_panel=MORE,
    help="The --seed the features must have been embedded with (checked); default: not checked.")]
STEP_CHECKS = ("The features under OUT must have been embedded from the images of --root (their digests, as the "
               "embed step recorded them; an unchanged root costs one stat per image) and, where given, with "
               "--model, --model-options and --seed: anything else is refused in one line naming both, exit 2.")


def _json_option(text: str, name: str) -> dict:
    from vsbench.runspec.run import json_object

    try:
        return json_object(text, name)
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
    num_shards: Annotated[int, typer.Option(min=1, rich_help_panel=MORE,
                                            help="Embed in this many shards (run here one after another).")] = 1,
    search_shards: SearchShardsOpt = 1,
    reference_shards: ReferenceShardsOpt = 1,
    merge_ondisk: MergeOndiskOpt = False,
    search_params: SearchParamsOpt = "",
    batch_size: Annotated[int, typer.Option(help="Images per forward pass of the model (at least 1; checked with the other inputs).")] = 64,
    device: Annotated[str, typer.Option(help="'auto' (CUDA when visible, else the CPU), 'cpu', 'cuda' or "
                                             "'cuda:N'.")] = "auto",
    decode: DecodeOpt = "auto",
    seed: Annotated[int, typer.Option(
        min=0, max=2**63 - 1, rich_help_panel=MORE,
        help='Seed of {"weights": "random"}: the same seed draws the same network in every model family.')] = 0,
    compile: Annotated[str, typer.Option(
        rich_help_panel=MORE,
        help="torch.compile the embedding network: 'auto' (the default: on for a CUDA device, off on the CPU), "
             "'on' or 'off'. Compiled once per process for all sets and shards; a network that fails to compile "
             "embeds eagerly, with one warning line.")] = "auto",
    runner: Annotated[str, typer.Option(
        help="'inline': every step in this process; 'subprocess' or 'container': the similarity pipeline with "
             "kfp.local, each step a process of this environment or a container of the vsbench image.")] = "inline",
    image: ImageOpt = None,
    experiment: Annotated[str, typer.Option(rich_help_panel=MORE, help="MLflow experiment.")] = "vsbench-similarity",
    track: TrackOpt = True,
    verbose: VerboseOpt = False,
    verify_inputs: VerifyInputsOpt = "stat",
) -> None:
    """Embed every image set, index, search, score; prints the benchmark's own table.

    Shards run here one after another (inline) or as kfp.local tasks; the table is the same for any
    number of search and reference shards."""
    import contextlib

    check_runner(runner, ("inline", "subprocess", "container"))
    if compile not in ("auto", "on", "off"):
        raise typer.BadParameter(f"{compile!r} is not one of 'auto', 'on', 'off'", param_hint="--compile")
    check_decode(decode)
    with contextlib.ExitStack() as held:
        # OUT's one holder from here to the bundle, for every runner (issue 46): an existing folder
        # is locked first, before anything heavy is imported or checked, so a busy one is refused at
        # once; a new one after the checks, which must leave no folder behind when they fail.
        early = out.is_dir()
        if early:
            _hold_out(held, out)
        _similarity_run(held, early, benchmark, root, out, model=model, model_options=model_options,
                        benchmark_options=benchmark_options, codecs=codecs, k=k, global_cap=global_cap,
                        score_norm=score_norm, num_shards=num_shards, search_shards=search_shards,
                        reference_shards=reference_shards, merge_ondisk=merge_ondisk, search_params=search_params,
                        batch_size=batch_size, device=device, decode=decode, seed=seed, compile=compile,
                        runner=runner, image=image, experiment=experiment, track=track, verbose=verbose,
                        verify_inputs=verify_inputs)


def _hold_out(held, out: Path) -> None:
    """OUT held for the whole run (:func:`~vsbench.io.locks.run_lease`): exclusively, its steps
    (in this process, or kfp.local's subprocesses and containers given the lease) admitted."""
    from vsbench.io.locks import run_lease

    with user_errors():  # a busy OUT: one line naming the holder
        held.enter_context(run_lease([out], what=str(out)))


def _similarity_run(held, early: bool, benchmark: str, root: Path, out: Path, *, model: str, model_options: str,
                    benchmark_options: str, codecs: str, k: int, global_cap: int, score_norm: str, num_shards: int,
                    search_shards: int, reference_shards: int, merge_ondisk: bool, search_params: str,
                    batch_size: int, device: str, decode: str, seed: int, compile: str, runner: str,
                    image: str | None, experiment: str, track: bool, verbose: bool,
                    verify_inputs: str = "stat") -> None:
    """`similarity run` once OUT's lock is settled (held when ``early``, else taken after the checks)."""
    from vsbench.runspec.preflight import similarity_problems

    bench_opts, model_opts = _json_option(benchmark_options, "--benchmark-options"), _json_option(
        model_options, "--model-options")
    if "seed" in model_opts:
        raise typer.BadParameter("the seed is --seed, not a key of --model-options", param_hint="--model-options")
    # Everything that can be known before the work starts, in one pass: one line per problem.
    run, bench, problems = similarity_problems(
        dict(benchmark=benchmark, root=str(root), benchmark_options=bench_opts, model=model, model_options=model_opts,
             codecs=codecs, k=k, global_cap=global_cap, score_norm=score_norm, search_params=search_params,
             num_shards=num_shards, search_shards=search_shards, reference_shards=reference_shards, seed=seed,
             merge_ondisk=merge_ondisk), out=out, device=device, batch_size=batch_size, runner=runner)
    if problems or run is None:
        for problem in problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(BAD_INPUT_EXIT)
    if not early:
        _hold_out(held, out)
    from vsbench.tracking.provenance import data_tags

    tags = {**data_tags(root.resolve()), **_baseline_tag(run)}
    if runner != "inline":
        del bench  # each step reads it in its own process
        _run_pipeline(run, root, out, runner=runner, image=image, verbose=verbose, batch_size=batch_size,
                      device=device, experiment=experiment, track=track, tags=tags, compile=compile,
                      decode=decode, verify_inputs=verify_inputs)
        return
    import time

    from vsbench.steps.similarity import run_inline

    started = time.time()
    with user_errors():  # a bad input, a damaged reused file: one line naming it
        result = run_inline(run, out, batch_size=batch_size, device=device, bench=bench, compile=compile,
                            decode=decode)
    _print_similarity_table(out, result.manifest)
    if track:
        from vsbench.tracking.command import BUNDLE_NAME, record_command_run

        record_command_run(out / BUNDLE_NAME, experiment=experiment, pipeline="vsbench-similarity",
                           params=_parent_params(run), metrics={}, tags=tags,
                           artifacts=_similarity_artifacts(out, result.manifest), started=started,
                           kept=out / "metrics.json", announce=typer.echo,
                           evaluations=_evaluations(run, out, result.manifest, tags), title=_title(run))


def _run_pipeline(run, root: Path, out: Path, *, runner: str, image: str | None, verbose: bool, batch_size: int,
                  device: str, experiment: str, track: bool, tags: dict[str, str], compile: str = "auto",
                  decode: str = "auto", verify_inputs: str = "stat") -> None:
    """The similarity pipeline on kfp.local, its parameters from the run spec."""
    from vsbench.tracking.command import prepare_pipeline_tracking

    tracked = prepare_pipeline_tracking(track, typer.echo)
    fields = run.model_dump(exclude={"root"})
    fields["benchmark_options"] = json.dumps(run.benchmark_options)
    fields["model_options"] = json.dumps(run.model_options)
    pipeline_run = run_similarity_pipeline_locally(
        root.resolve(), out.resolve(), runner=runner, image=image, verbose=verbose,
        arguments={**fields, "batch_size": batch_size, "device": device, "compile": compile, "decode": decode,
                   "experiment": experiment, "verify_inputs": verify_inputs,
                   "params_json": json.dumps({**_parent_params(run), "data_tags": tags})})
    if not pipeline_run.succeeded:
        typer.echo(f"similarity pipeline failed: {pipeline_run.error}", err=True)
        typer.echo(failure_tail(pipeline_run.failed_step, list(pipeline_run.log_tail), pipeline_run.log_path), err=True)
        raise typer.Exit(1)
    (scored,) = step_manifests(pipeline_run.run_dir, "score")
    manifest = json.loads(scored.read_text())
    _print_similarity_table(out, manifest)
    typer.echo(f"ran in: {pipeline_run.ran_in}")
    if track and not tracked:
        kept_bundle(out, experiment, "vsbench-similarity", _parent_params(run), {}, tags=tags,
                    artifacts=_similarity_artifacts(out, manifest), evaluations=_evaluations(run, out, manifest, tags),
                    title=_title(run))


def _baseline_tag(run) -> dict[str, str]:
    """Untrained weights make a random-features baseline, which the report draws beside trained models."""
    from vsbench.tracking.provenance import BASELINE_TAG

    return {BASELINE_TAG: "random-features"} if run.is_random_baseline() else {}


def _evaluations(run, out: Path, manifest: dict, tags: dict[str, str]) -> list:
    """The score's records as evaluation runs under the command's run (plain metric names, the model
    as a LoggedModel: vsbench.tracking.evaluations); the command's run itself keeps no per-model number."""
    from vsbench.steps.evaluate import evaluations_for

    return evaluations_for(run, run.model, manifest.get("records", []), out, model_options=run.model_options,
                           seed=run.seed, data=tags, units=manifest.get("units"))


def _parent_params(run) -> dict:
    """The command's run's params: the run's settings but the model, which is in its name and each
    evaluation's params, so that ``params.model = 'x' and params.benchmark = 'disc'`` finds one row
    per evaluation in MLflow, not the command's run besides."""
    return {k: v for k, v in run.params().items() if k not in ("model", "model_options")}


def _title(run) -> str:
    """The start of the command run's name: what differs between two commands first, the model as
    MLflow's names read it (``resnet34-random``: no JSON for the name column to cut), then the
    benchmark (issue 57)."""
    from vsbench.tracking.evaluations import NAME_JOIN, readable_label

    return f"{readable_label(run.model, run.model_options or {})}{NAME_JOIN}{run.benchmark}"


def _similarity_artifacts(out: Path, manifest: dict) -> dict[str, str]:
    """metrics.json, the benchmark's own CSV and its plots (file -> artifact folder)."""
    files = {str(out / "metrics.json"): ""}
    if manifest.get("csv"):
        files[str(out / manifest["csv"])] = ""
    for plot in manifest.get("plots", []):
        files[str(out / plot)] = str(Path(plot).parent).replace(".", "") or ""
    return files


def _step_help(command):  # type: ignore[no-untyped-def]
    """A step command's help says what it checks of the features (one text for the three)."""
    command.__doc__ = command.__doc__.replace("{checks}", STEP_CHECKS)
    return command


def _refuse_undeclared(model: str, options: dict | None, name_is: str = "--model") -> None:
    """``model`` and its ``options`` against the declared choices (no torch): each problem one
    ``error:`` line naming the option (the model as ``name_is``), exit 2. Why here, before the heavy
    imports: a bad value waited for torch's import, 8 to 24 s on a loaded machine (issue 57)."""
    from vsbench.runspec.preflight import declared_model_problems

    problems = declared_model_problems(model, options, lambda field: name_is if field == "model" else "--model-options")
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(BAD_INPUT_EXIT)


def _asked_options(model_options: str) -> dict | None:
    """--model-options of a step command: None (not checked) when not given."""
    return _json_option(model_options, "--model-options") if model_options.strip() else None


def _benchmark_run(out: Path, model: str = "", model_options: str = "", **fields):
    """The benchmark side of a run from a step command's options, checked before the step reads
    anything (:func:`~vsbench.runspec.preflight.step_problems`), and ``--model`` with
    ``--model-options`` against their declared choices (no torch either): every problem a line, exit 2."""
    from vsbench.runspec.preflight import declared_model_problems, step_problems
    from vsbench.runspec.run import BenchmarkRun

    fields["benchmark_options"] = _json_option(fields["benchmark_options"], "--benchmark-options")
    asked = _asked_options(model_options)
    with user_errors():
        run = BenchmarkRun.parse(**fields)
    if problems := step_problems(run, out) + declared_model_problems(model, asked, loads=False):
        for problem in problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(BAD_INPUT_EXIT)
    return run


def _benchmark_files(run):  # type: ignore[no-untyped-def]
    """The benchmark's native files under ``--root`` (its lists and ground truth: no image, no torch),
    read once here and handed to the step's :class:`~vsbench.retrieval.engine.Engine`. Why here: the
    step commands read them only after importing the step (torch, faiss: ~13 s on a loaded machine),
    so a root without the benchmark's folders was refused after that wait (issue 57); now in one
    line naming the root and what is missing in it, before torch."""
    from vsbench.benchmarks.registry import load_benchmark
    from vsbench.runspec.preflight import problem_line

    try:
        return load_benchmark(run.benchmark, Path(run.root), **run.benchmark_options)
    except (ValueError, OSError) as exc:  # a folder or file missing, a list that does not match its folder
        fail(f"--root {run.root}: {problem_line(exc)}; give {run.benchmark}'s data folder, as given to the embed "
             f"step (vsbench synth similarity {run.benchmark} --out DIR makes one)")


@similarity_app.command("index")
@_step_help
def similarity_index(
    benchmark: BenchmarkOpt, root: RootOpt, out: OutOpt, benchmark_options: BenchmarkOptionsOpt = "{}",
    codecs: CodecsOpt = "Flat", k: KOpt = 10, score_norm: ScoreNormOpt = "1.00[0,2]",
    reference_shards: ReferenceShardsOpt = 1,
    model: StepModelOpt = "", model_options: StepModelOptionsOpt = "", seed: StepSeedOpt = None,
    train: Annotated[bool, typer.Option("--train", help="Only train each codec once (the pipeline's first index task).")] = False,
    fill: Annotated[bool, typer.Option("--fill", help="Only fill reference shard --shard from the embed shards' files.")] = False,
    shard: Annotated[int | None, typer.Option(min=0, help="The reference shard --fill fills (default: none, needed "
                                                         "with --fill).")] = None,
    finish: Annotated[bool, typer.Option("--finish", help="Only check the filled shards and write index.json.")] = False,
    merge_ondisk: MergeOndiskOpt = False,
    verify_inputs: VerifyInputsOpt = "stat",
) -> None:
    """Build each FAISS index the benchmark searches from the embedding shards under OUT (OUT/index/;
    reused shard by shard when built before for the same features): train each codec once, fill
    each reference shard, write index.json. --train, --fill --shard i and --finish run one of the
    three, as the pipeline's tasks do (each fill on its own node).

    {checks}"""
    refuse_busy(out, shared=True)  # a run holding OUT: one line at once, before the heavy imports
    stages = [name for name, chosen in (("train", train), ("fill", fill), ("finish", finish)) if chosen]
    if len(stages) > 1 or (fill and shard is None) or (shard is not None and not fill):
        fail("give at most one of --train, --fill --shard i, --finish (none: all three in turn); --shard goes "
             "with --fill")
    stage = stages[0] if stages else "all"
    run = _benchmark_run(out, model, model_options, benchmark=benchmark, root=str(root),
                         benchmark_options=benchmark_options, codecs=codecs,
                         k=k, score_norm=score_norm, reference_shards=reference_shards, merge_ondisk=merge_ondisk)
    bench = _benchmark_files(run)
    from vsbench.retrieval.engine import Engine  # torch and faiss: once the checks pass
    from vsbench.steps.similarity import similarity_index_step

    engine = Engine(run, out, model=model, bench=bench, model_options=_asked_options(model_options), seed=seed)
    with user_errors():
        result = similarity_index_step(run, str(out), model=model, stage=stage, shard=shard, engine=engine)
    for trained in result.manifest.get("trained", []):
        typer.echo(f"{trained['search']}/{trained['codec']}: {'reused' if trained['reused'] else 'trained'}")
    for filled in result.manifest.get("filled", []):
        typer.echo(f"{filled['search']}/{filled['codec']}: shard {filled['shard']}, {filled['count']} vectors, "
                   f"{'kept' if filled['kept'] else 'filled'}")
    for built in result.manifest.get("indexes", []):
        merged = ", merged on disk" if built.get("merged") else ""
        typer.echo(f"{built['search']}/{built['codec']}: {built['count']} vectors in {len(built['reference_shards'])} "
                   f"shard(s){merged}, {'reused' if built['reused'] else 'built'} ({built['folder']})")
    if "note" in result.manifest:
        typer.echo(result.manifest["note"])


@similarity_app.command("search")
@_step_help
def similarity_search(
    benchmark: BenchmarkOpt, root: RootOpt, out: OutOpt, benchmark_options: BenchmarkOptionsOpt = "{}",
    codecs: CodecsOpt = "Flat", k: KOpt = 10, score_norm: ScoreNormOpt = "1.00[0,2]",
    search_shards: SearchShardsOpt = 1, reference_shards: ReferenceShardsOpt = 1, search_params: SearchParamsOpt = "",
    merge_ondisk: MergeOndiskOpt = False,
    task: Annotated[list[int] | None, typer.Option(
        help="Search task(s) to run (query shard = task // reference shards, or = task with --merge-ondisk); "
             "default: every task.")] = None,
    model: StepModelOpt = "", model_options: StepModelOptionsOpt = "", seed: StepSeedOpt = None,
    verify_inputs: VerifyInputsOpt = "stat",
) -> None:
    """Search query shards in reference shards of the indexes under OUT/index/ (finished results are kept).

    {checks}"""
    refuse_busy(out, shared=True)  # a run holding OUT: one line at once, before the heavy imports
    run = _benchmark_run(out, model, model_options, benchmark=benchmark, root=str(root),
                         benchmark_options=benchmark_options, codecs=codecs,
                         k=k, score_norm=score_norm, search_shards=search_shards, reference_shards=reference_shards,
                         search_params=search_params, merge_ondisk=merge_ondisk)
    bench = _benchmark_files(run)
    from vsbench.retrieval.engine import Engine  # torch and faiss: once the checks pass
    from vsbench.steps.similarity import search_tasks, similarity_search_step

    # One read of the benchmark and the features (and one check of them) for every task.
    engine = Engine(run, out, model=model, bench=bench, model_options=_asked_options(model_options), seed=seed)
    for number in task if task else search_tasks(search_shards, reference_shards, merge_ondisk):
        with user_errors():
            result = similarity_search_step(run, str(out), task=number, model=model, engine=engine)
        part = result.manifest["reference_shard"]
        typer.echo(f"task {number}: query shard {result.manifest['query_shard']} x "
                   f"{'the merged index' if part == 'merged' else f'reference shard {part}'}: "
                   f"{len(result.manifest['results'])} result file(s)")


@similarity_app.command("score")
@_step_help
def similarity_score(
    benchmark: BenchmarkOpt, root: RootOpt, out: OutOpt, benchmark_options: BenchmarkOptionsOpt = "{}",
    codecs: CodecsOpt = "Flat", k: KOpt = 10, score_norm: ScoreNormOpt = "1.00[0,2]", global_cap: GlobalCapOpt = 0,
    search_shards: SearchShardsOpt = 1, search_params: SearchParamsOpt = "", merge_ondisk: MergeOndiskOpt = False,
    model: StepModelOpt = "", model_options: StepModelOptionsOpt = "", seed: StepSeedOpt = None,
    experiment: Annotated[str, typer.Option(rich_help_panel=MORE, help="MLflow experiment.")] = "vsbench-similarity",
    track: TrackOpt = True,
    verify_inputs: VerifyInputsOpt = "stat",
) -> None:
    """Merge the search results under OUT/search/ and print the benchmark's own table; with --track (the
    default) record it as `similarity run` does, under the model the features were embedded with.

    {checks}"""
    refuse_busy(out, shared=True)  # a run holding OUT: one line at once, before the heavy imports
    import time

    run = _benchmark_run(out, model, model_options, benchmark=benchmark, root=str(root),
                         benchmark_options=benchmark_options, codecs=codecs,
                         k=k, score_norm=score_norm, global_cap=global_cap, search_shards=search_shards,
                         search_params=search_params, merge_ondisk=merge_ondisk)
    bench = _benchmark_files(run)
    from vsbench.retrieval.engine import Engine  # torch and faiss: once the checks pass
    from vsbench.steps.similarity import similarity_score_step

    started = time.time()
    engine = Engine(run, out, model=model, bench=bench, model_options=_asked_options(model_options), seed=seed)
    with user_errors():
        result = similarity_score_step(run, str(out), model=model, engine=engine)
        embedded = engine.embedding()
    _print_similarity_table(out, result.manifest)
    if track:
        _record_score(run, root, out, result.manifest, embedded, experiment=experiment, started=started)


def _record_score(run, root: Path, out: Path, manifest: dict, embedded: dict, *, experiment: str,
                  started: float) -> None:
    """`similarity score`'s MLflow run: `similarity run`'s record (params, the evaluations, metrics.json,
    the table and plots), its model the one the features were embedded with."""
    from vsbench.runspec.run import SimilarityRun
    from vsbench.tracking.command import BUNDLE_NAME, record_command_run
    from vsbench.tracking.provenance import data_tags

    with user_errors():
        spec = SimilarityRun.parse(**run.model_dump(), model=embedded["model"],
                                   model_options=embedded["options"] or {}, seed=embedded["seed"])
    tags = {**data_tags(root.resolve()), **_baseline_tag(spec)}
    record_command_run(out / BUNDLE_NAME, experiment=experiment, pipeline="vsbench-similarity",
                       params=_parent_params(spec), metrics={}, tags=tags,
                       artifacts=_similarity_artifacts(out, manifest), started=started, kept=out / "metrics.json",
                       announce=typer.echo, evaluations=_evaluations(spec, out, manifest, tags), title=_title(spec))


TABLE_ROWS = 20  # the benchmark's CSV is printed when it has at most this many rows (docs/plugins.md)


def _print_similarity_table(out: Path, manifest: dict) -> None:
    """The benchmark's own CSV when it is a summary (at most :data:`TABLE_ROWS` rows, as every
    built-in's: a row per codec and variant); a longer one (a row per query, say) is named, not
    printed, and the records (the metrics, one per variant, as in metrics.json) are printed instead,
    so a terminal never scrolls through a per-query table."""
    from vsbench.retrieval.engine import records_to_csv

    csv_name = manifest.get("csv")
    table = out / csv_name if csv_name else None
    if table is not None and table.exists():
        with table.open(newline="") as lines:
            rows = sum(1 for _ in csv.reader(lines)) - 1  # streamed: a per-query CSV is never read whole
        if rows <= TABLE_ROWS:
            typer.echo(table.read_text().rstrip())
            table = None
    records = manifest.get("records", [])
    from vsbench.stats.records import interval_lines, is_interval_field

    if table is not None or not csv_name:
        columns = tuple(dict.fromkeys(key for record in records for key in record
                                      if not is_interval_field(key) and key != "failures"))  # a sheet: its files
        typer.echo(records_to_csv(records[:TABLE_ROWS], columns).rstrip() if records else "(no records)")
        if len(records) > TABLE_ROWS:
            typer.echo(f"... {len(records) - TABLE_ROWS} more records in metrics.json")
    if table is not None:
        typer.echo(f"table: {table} ({rows} rows, not printed: more than {TABLE_ROWS})")
    lines = interval_lines(records[:TABLE_ROWS], (manifest.get("units") or [])[:TABLE_ROWS])
    if lines:  # within 100 columns (issue 57): a long note or heading wraps under its own line
        from vsbench.io.terminal import wrap_lines

        typer.echo(wrap_lines("\n".join(lines)))
    typer.echo(f"metrics: {out / 'metrics.json'}")


@similarity_app.command("models")
def similarity_models(
    name: Annotated[str | None, typer.Argument(help="A model name (e.g. timm:resnet50) to describe.")] = None,
    model_options: Annotated[str, typer.Option(help='JSON, e.g. \'{"weights": "random"}\'.')] = "{}",
) -> None:
    """List the registered models, each built-in one with whether its first use needs the network;
    with NAME, its preprocessing, dimension, output layer and where its weights would come from
    (nothing is downloaded: the network is built untrained)."""
    from dataclasses import asdict

    from vsbench.io.terminal import wrap
    from vsbench.models.choices import network_note

    if name is not None:  # a name or option value the table refuses: said before torch's import (issue 57)
        _refuse_undeclared(name, _json_option(model_options, "--model-options"), name_is="NAME")
    from vsbench.models.registry import available_models, describe_model, families, model_source
    if name is None:
        with user_errors():  # a broken model plugin: one line naming it
            listed = [(registered, model_source(registered)) for registered in available_models()]
        # A pipeline step on a machine without internet access fails at the model's first use: say
        # which models need the network (and which host, which cache to fill instead) before that.
        column = 20  # a longer name (a family's pattern) has its note on the next line
        for registered, source in listed:
            note = network_note(registered) if source == "vsbench" else ""
            if not note:
                typer.echo(registered + ("" if source == "vsbench" else f"  [plugin: {source}]"))
                continue
            if len(registered) + 2 > column:
                typer.echo(registered)
            first = registered.ljust(column) if len(registered) + 2 <= column else " " * column
            for line in wrap(note, first, " " * column):
                typer.echo(line)
        for family in families():
            typer.echo(f"  e.g. {family.example}")
        return
    try:
        info = describe_model(name, **_json_option(model_options, "--model-options"))
    except (ValueError, ImportError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"model: {info.name}")
    typer.echo(f"dim: {info.dim}")
    typer.echo(f"output: {info.output}")
    typer.echo(f"weights: {info.weights}")
    for line in wrap(network_note(name), "network: ", " " * 9) if network_note(name) else ():
        typer.echo(line)
    if info.preprocessing is not None:
        typer.echo(f"preprocessing: {json.dumps(asdict(info.preprocessing))}")
