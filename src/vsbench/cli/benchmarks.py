"""``vsbench benchmarks``: every registered benchmark, built-in or from a plugin, with its spellings;
``--check PLUGIN`` checks a benchmark or model plugin before it is used (docs/plugins.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer

from vsbench.benchmarks.registry import BenchmarkSpec, specs
from vsbench.cli.common import BAD_INPUT_EXIT, fail, user_errors


def list_benchmarks(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per benchmark instead of a table.")] = False,
    check: Annotated[str | None, typer.Option(
        "--check", metavar="PLUGIN",
        help="Check a benchmark or model plugin instead: an entry-point name (vsbench.benchmarks or "
             "vsbench.models), a 'module:attribute' or module, or a registered name. One line per problem, "
             "exit 2; an OK line per benchmark and model otherwise. Default: no check, list the benchmarks.")] = None,
    run: Annotated[bool, typer.Option(
        "--run", help="With --check: also run each benchmark it names end to end, in a temporary folder: its "
                      "generator's data, random features, unsharded and with 2 shards (what vsbench's own tests "
                      "run over every benchmark; no checkout, nothing downloaded or tracked).")] = False,
) -> None:
    """Every registered benchmark: its name, the other spellings commands accept, tasks and metrics."""
    if check is not None:
        check_plugin(check, run=run)
        return
    if run:
        fail("--run goes with --check NAME: vsbench benchmarks --check NAME --run")
    with user_errors():
        found = specs()
    if as_json:
        for spec in found.values():
            typer.echo(json.dumps({"name": spec.name, "aliases": list(spec.aliases), "title": spec.title,
                                   "tasks": list(spec.tasks), "metrics": list(spec.metrics),
                                   "lower_is_better": list(spec.lower_is_better),
                                   "score_command": spec.score_command, "datasets": sorted(spec.datasets),
                                   "generator": bool(spec.generator), "source": spec.source}))
        return
    for spec in found.values():
        typer.echo(f"{spec.name}" + (f"  (also: {', '.join(spec.aliases)})" if spec.aliases else "")
                   + ("" if spec.source == "vsbench" else f"  [plugin: {spec.source}]"))
        typer.echo(f"  {spec.title}")
        if spec.tasks:
            typer.echo(f"  tasks: {'; '.join(spec.tasks)}")
        if spec.metrics:
            typer.echo(f"  metrics: {', '.join(spec.metrics)}")
        extras = [f"vsbench score {spec.score_command}"] if spec.score_command else []
        if spec.generator or spec.datasets:
            extras.append("vsbench synth similarity " + " | ".join(([spec.name] if spec.generator else [])
                                                                   + sorted(spec.datasets)))
        if extras:
            typer.echo(f"  commands: {'; '.join(extras)}")


def check_plugin(plugin: str, *, run: bool = False) -> None:
    """``--check PLUGIN``: every benchmark spec and model ``plugin`` names, checked; each problem one
    line on stderr (exit 2), else one OK line each on stdout. Only that plugin is loaded, so a plugin
    that breaks the registry (and so every other command) can still be checked. ``run``: then each
    benchmark's trial run (:mod:`vsbench.steps.trial`), once the declarations passed."""
    found = _checked(plugin)
    problems = [line for lines, _ in found for line in lines]
    for line in problems:
        typer.echo(f"error: {line}", err=True)
    if problems:
        raise typer.Exit(BAD_INPUT_EXIT)
    for _, summary in found:
        typer.echo(summary)
    if run:  # "OK benchmark NAME (...)": a benchmark's name holds no space (registry.NAME_PATTERN)
        _trial([summary.split()[2] for _, summary in found if summary.startswith("OK benchmark ")])


def _trial(names: list[str]) -> None:
    """Each benchmark's trial run in a temporary folder: one line per problem (exit 2), else an OK line."""
    import tempfile
    from pathlib import Path

    from vsbench.benchmarks import registry
    from vsbench.steps.trial import SEED, trial_problems

    if not names:
        fail("--run: the plugin names no benchmark (a model is built and run on two images by --check itself)")
    problems: list[str] = []
    for name in names:
        try:
            registry.get(name)
        except ValueError:
            problems.append(f"--run {name}: not registered here; install the plugin (pip install ./your-plugin) so "
                            "that its entry point names it, then run it again")
            continue
        with tempfile.TemporaryDirectory(prefix=f"vsbench-trial-{name}-") as work:
            try:
                found = trial_problems(name, Path(work))
            except Exception as exc:  # noqa: BLE001 - the plugin's own code failed: one line, which benchmark
                found = [f"{name}: the trial run raised {type(exc).__name__}: {exc}"]
        problems += found
        if not found:
            typer.echo(f"OK trial {name}: generated data (seed {SEED}), random features, every declared metric "
                       "reported, the same records with 2 shards")
    for line in problems:
        typer.echo(f"error: {line}", err=True)
    if problems:
        raise typer.Exit(BAD_INPUT_EXIT)


def _checked(plugin: str) -> list[tuple[list[str], str]]:
    """(problems, OK line) for each benchmark and model ``plugin`` names, looked up in this order:
    entry points of that name in either group; a ``module:attribute`` or module; a registered
    benchmark spelling or model name of vsbench's own."""
    import importlib
    from importlib.metadata import entry_points

    from vsbench.benchmarks import check as benchmarks
    from vsbench.benchmarks.registry import ENTRY_POINT_GROUP, SpecError, _resolve, builtin_specs
    from vsbench.models import registry as models

    found: list[tuple[list[str], str]] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP, name=plugin):
        where = f"entry point {entry.name} = {entry.value}" + (f" ({entry.dist.name})" if entry.dist else "")
        found.append(_benchmark_outcome(*benchmarks.check_entry(entry), where, entry.name))
    for entry in entry_points(group=models.ENTRY_POINT_GROUP, name=plugin):
        where = f"entry point {entry.name} = {entry.value}" + (f" ({entry.dist.name})" if entry.dist else "")
        found += _model_outcomes(where, entry.load, entry.module)
    if found:
        return found
    module, colon, attribute = plugin.partition(":")
    if not colon and "." in plugin:  # a module that registers models as it is imported
        return _model_outcomes(plugin, lambda: importlib.import_module(plugin), plugin)
    if colon:
        try:
            target = _resolve(plugin)
        except SpecError as exc:  # the module builds a spec with a field of the wrong type
            return [_benchmark_outcome(None, exc.problems, plugin)]
        except ValueError as exc:  # no such module or attribute: the reference itself is the mistake
            fail(f"--check {plugin!r}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the plugin's own import error: one line, which plugin
            return [([f"{plugin} cannot be loaded: {type(exc).__name__}: {exc}"], "")]
        if isinstance(target, BenchmarkSpec):
            return [_benchmark_outcome(*benchmarks.check_reference(plugin), plugin)]
        return _model_outcomes(plugin, lambda: target, module)
    for spec in builtin_specs():
        if plugin in spec.spellings:
            return [_benchmark_outcome(spec, benchmarks.spec_problems(spec), f"vsbench's {spec.name}")]
    models.registered_by(lambda: None)  # the built-in models, and no plugin
    if models.registered(plugin) is not None or models.family(plugin) is not None:
        return _outcomes("vsbench's own", [plugin] if models.registered(plugin) else [],
                         [plugin] if models.family(plugin) else [])
    fail(f"--check {plugin!r}: no entry point of vsbench.benchmarks or vsbench.models, no benchmark or model has "
         "that name; give the name in your pyproject's [project.entry-points.\"vsbench.benchmarks\"] (or "
         "\"vsbench.models\"), a 'module:attribute' reference, or a module")


def _benchmark_outcome(spec: BenchmarkSpec | None, problems: list[str], where: str,
                       name: str = "") -> tuple[list[str], str]:
    """(each problem as the line it is printed as, the OK line): ``where`` says what was checked."""
    named = spec.name if spec is not None else name
    label = f"benchmark {named} ({where})" if named else f"benchmark ({where})"
    if problems or spec is None:
        return [f"{label}: {problem}" for problem in problems], ""
    lower = f"; lower is better: {', '.join(spec.lower_is_better)}" if spec.lower_is_better else ""
    return [], (f"OK benchmark {spec.name} ({where}): metrics {', '.join(spec.metrics)}{lower}; "
                f"{'generator' if spec.generator else 'no generator'}")


def _model_outcomes(where: str, load: Callable[[], Any], module: str) -> list[tuple[list[str], str]]:
    """The models one registration (``load``: an entry point's, or a reference's) adds."""
    from vsbench.models import registry as models

    try:
        names, prefixes = models.registered_by(load)
        if not names and not prefixes:  # imported before (a module that registered as it was imported)
            names, prefixes = models.builders_of(module)
    except Exception as exc:  # noqa: BLE001 - whatever the plugin raised while registering
        return [([f"model plugin ({where}) cannot be loaded: {type(exc).__name__}: {exc}"], "")]
    if not names and not prefixes:
        return [([f"model plugin ({where}) registers no model: decorate a builder with "
                  "@vsbench.models.registry.register_model('name') in the module the entry point names"], "")]
    return _outcomes(where, names, prefixes)


def _outcomes(where: str, names: list[str], prefixes: list[str]) -> list[tuple[list[str], str]]:
    from vsbench.models import check as models

    out: list[tuple[list[str], str]] = []
    for name in names:
        problems, summary = models.model_problems(name)
        out.append(([f"{p} ({where})" for p in problems], f"OK model {name} ({where}): {summary}"))
    for prefix in prefixes:
        problems, summary = models.family_problems(prefix)
        out.append(([f"{p} ({where})" for p in problems], f"OK model family {prefix} ({where}): {summary}"))
    return out
