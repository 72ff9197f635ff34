"""``vsbench benchmarks --check``: what is wrong with a benchmark plugin, found without running it.

A plugin's spec is read the way the registry reads it (its entry point, or a ``module:attribute``),
then checked from its declarations alone: the spec's fields and their types, the references it
names (each imported, callable, and callable the way vsbench calls it), and the adapter class the
loader's return annotation names (its methods and their return annotations). Nothing is generated,
loaded or embedded, so the check takes a second and needs no data; the run over generated data is
``--check NAME --run`` (``vsbench.steps.trial``; docs/plugins.md).

Each problem is one sentence naming what to change; the caller prints them one a line.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from vsbench.benchmarks.registry import BenchmarkSpec, SpecError, _fold, _resolve, builtin_specs
from vsbench.io.annotations import annotation_text, return_annotation  # noqa: F401 - plugin checks share them


def _returned_class(function: Callable[..., Any]) -> type | None:
    """The class the loader's return annotation names, or None when it names none that can be found."""
    try:
        returned = typing.get_type_hints(function).get("return")
    except Exception:
        return None
    return returned if isinstance(returned, type) else None


def _binds(function: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """'' when ``function(*args, **kwargs)`` matches its signature, else why not."""
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    except ValueError:  # a builtin without a signature: nothing to say
        return ""
    return ""


# What vsbench calls on an adapter, and the return annotation each must have (as text).
IMAGE_SETS = ("dict[str, ImageSet]", "Mapping[str, ImageSet]")
EVAL_RESULT = ("EvalResult",)
SEARCH_REQUESTS = ("list[SearchRequest]", "Sequence[SearchRequest]")


def adapter_problems(adapter: type) -> list[str]:
    """The methods vsbench calls on the adapter class and their return annotations."""
    name = adapter.__name__
    problems: list[str] = []
    methods: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {
        "image_sets": (IMAGE_SETS, ()), "evaluate": (EVAL_RESULT, ({}, None))}
    searched = [m for m in ("search_requests", "score") if callable(getattr(adapter, m, None))]
    if searched:  # FAISS-searched benchmarks split evaluate in two: both halves or neither
        methods.update({"search_requests": (SEARCH_REQUESTS, ({}, None)), "score": (EVAL_RESULT, ({}, None, []))})
    for method, (expected, args) in methods.items():
        function = getattr(adapter, method, None)
        if not callable(function):
            problems.append(f"{name} has no method {method}(): "
                            + ("add it (docs/plugins.md, 'The adapter')" if method != "score" else
                               "a benchmark with search_requests() scores the answers in score(features, settings, "
                               "results)"))
            continue
        why = _binds(function, object(), *args)
        if why:
            problems.append(f"{name}.{method} cannot be called as vsbench calls it "
                            f"({method}({', '.join(['self', 'features', 'settings', 'results'][:len(args) + 1])})): "
                            f"{why}")
        annotated, text = return_annotation(function)
        if not annotated:
            problems.append(f"{name}.{method} has no return annotation: annotate it -> {expected[0]}")
        elif text not in expected:
            problems.append(f"{name}.{method} returns {text}, not {expected[0]}: fix the annotation or what it returns")
    return problems


def spec_problems(spec: BenchmarkSpec) -> list[str]:
    """What is wrong with a spec that was made (its field types were checked then): the metrics and
    their directions, each reference, the adapter, and spellings a built-in benchmark holds."""
    problems: list[str] = []
    if not spec.title:
        problems.append("title is empty: one line saying what the benchmark measures (vsbench benchmarks shows it)")
    if not spec.metrics:
        problems.append("metrics is empty: name the metrics its records report, e.g. metrics=('top1_accuracy',) "
                        "(the registry's tests check each, compare shows them first)")
    for metric in spec.lower_is_better:
        if metric not in spec.metrics:
            problems.append(f"lower_is_better names {metric!r}, which metrics does not list: add it to metrics "
                            "or fix its spelling (else compare and the regression check rank it higher-is-better)")
    loader = _reference_problems("loader", spec.loader, problems)
    if loader is not None:
        why = _binds(loader, Path("."))
        if why:
            problems.append(f"loader {spec.loader} cannot be called as load(root, **options): {why}")
        annotated, text = return_annotation(loader)
        adapter = _returned_class(loader)
        if not annotated:
            problems.append(f"loader {spec.loader} has no return annotation: annotate it with the adapter class "
                            "(-> MyBenchmark) so that its methods can be checked")
        elif adapter is None:
            problems.append(f"loader {spec.loader} returns {text}, which is not a class this check can find: "
                            "annotate it with the adapter class itself")
        else:
            problems += adapter_problems(adapter)
    generators = ([("generator", spec.generator)] if spec.generator else []) + [
        (f"datasets[{name!r}]", reference) for name, reference in spec.datasets.items()]
    for what, reference in generators:
        generate = _reference_problems(what, reference, problems)
        if generate is not None:
            why = _binds(generate, Path("."), seed=0)
            if why:
                problems.append(f"{what} {reference} cannot be called as generate(out, seed=0): {why}")
    builtins = builtin_specs()
    if not any(spec is builtin for builtin in builtins):  # a plugin: vsbench's own spellings are not its to take
        taken = {_fold(spelling): other.name for other in builtins for spelling in other.spellings}
        problems += [f"spelling {spelling!r} is taken by vsbench's {taken[_fold(spelling)]!r}: rename it"
                     for spelling in spec.spellings if _fold(spelling) in taken]
    return problems


def _reference_problems(what: str, reference: str, problems: list[str]) -> Callable[..., Any] | None:
    """The callable ``reference`` names, or None with the problem appended."""
    try:
        target = _resolve(reference)
    except ValueError as exc:
        problems.append(f"{what}: {exc}")
        return None
    except Exception as exc:  # the module itself fails to import
        problems.append(f"{what} {reference}: importing it raised {type(exc).__name__}: {exc}")
        return None
    if not callable(target):
        problems.append(f"{what} {reference} is a {type(target).__name__}, not a function")
        return None
    return target


def load_spec(label: str, load: Callable[[], Any]) -> tuple[BenchmarkSpec | None, list[str]]:
    """(the spec, []) or (None, each problem): ``load`` reads the object an entry point or reference names."""
    try:
        spec = load()
    except SpecError as exc:
        return None, list(exc.problems)
    except Exception as exc:  # whatever the plugin raised while it was imported
        return None, [f"{label} cannot be loaded: {type(exc).__name__}: {exc}"]
    if not isinstance(spec, BenchmarkSpec):
        return None, [f"{label} is a {type(spec).__name__}, not a vsbench.benchmarks.registry.BenchmarkSpec"]
    return spec, []


def check_entry(entry: EntryPoint) -> tuple[BenchmarkSpec | None, list[str]]:
    """A ``vsbench.benchmarks`` entry point: its spec and every problem of it."""
    spec, problems = load_spec(f"entry point {entry.name} = {entry.value}", entry.load)
    return spec, problems if spec is None else spec_problems(spec)


def check_reference(reference: str) -> tuple[BenchmarkSpec | None, list[str]]:
    """A ``module:attribute`` naming a BenchmarkSpec: the spec and every problem of it."""

    spec, problems = load_spec(reference, lambda: _resolve(reference))
    return spec, problems if spec is None else spec_problems(spec)
