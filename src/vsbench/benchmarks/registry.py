"""The one registry of benchmarks: every command, pipeline, suite and report finds a benchmark here.

A benchmark is a :class:`BenchmarkSpec`: its one name (the ``benchmark`` param in MLflow and the
pipelines), the other spellings it accepts, and where its loader, generator and file scorer live,
as ``module:attribute`` references imported only when used, so that listing the benchmarks (and
``vsbench --help``) imports no numpy. vsbench's own benchmarks are listed in :data:`BUILTIN`; an
installed package adds its own through the ``vsbench.benchmarks`` entry-point group, each entry
naming a BenchmarkSpec: the same object, so a plugin is listed, generated, run, scored, compiled
and compared exactly as a built-in one.
"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vsbench.benchmarks.base import Benchmark

ENTRY_POINT_GROUP = "vsbench.benchmarks"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")  # an MLflow param, a KFP task name part, a folder name
LOWER_IS_BETTER_WORDS = ("rmse", "loss", "error", "seconds")  # metrics no spec names: decided by their words


@dataclass(frozen=True)
class BenchmarkSpec:
    """Everything vsbench needs to know of a benchmark, declared once."""

    name: str  # the one name: lower case, digits and '_'
    title: str  # one line for `vsbench benchmarks`
    loader: str  # "module:function": load(root: Path, **options) -> Benchmark (benchmarks.base)
    generator: str = ""  # "module:function": generate(out: Path, *, seed: int) -> summary dict
    aliases: tuple[str, ...] = ()  # other spellings every command accepts (e.g. "patch-pairs", "pairs")
    tasks: tuple[str, ...] = ()  # what it measures, in words
    metrics: tuple[str, ...] = ()  # headline metrics of its records
    lower_is_better: tuple[str, ...] = ()  # metrics where lower is better (others: higher, or by their words)
    score_command: str = ""  # `vsbench score <command>` scores its result files without a model
    # A record's text field that names a split of the data (patch_pairs: "variant", easy_diffseq ...):
    # a split is a row of one model's evaluation, never another model (issue 57); "" for none.
    split_field: str = ""
    headline_split: str = ""  # the split whose headline ranks the models (patch_pairs: "mean")
    datasets: Mapping[str, str] = field(default_factory=dict)  # other generators of its layout, name -> "module:function"
    source: str = "vsbench"  # the distribution that registered it (a plugin's name)

    def __post_init__(self) -> None:
        problems = field_problems(self)
        if problems:  # refused when registered: a str `tasks` would be listed letter by letter
            raise SpecError(f"benchmark {self.name!r}" if isinstance(self.name, str) else "benchmark", problems)

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def load(self, root: Path, **options: Any) -> Benchmark:
        """The benchmark over ``root`` (its native layout) with the loader's ``options``."""
        return _resolve(self.loader, self._owner)(Path(root), **options)

    def check_options(self, options: dict[str, Any]) -> None:
        """Refuse option names the loader does not take, listing those it does, before any file is
        read (a typo used to end as an unexpected TypeError from inside the loader). A loader that
        passes ``**options`` on is followed to the class its return annotation names; one that takes
        any name says nothing here, and its own error stands."""
        accepted = _option_names(_resolve(self.loader, self._owner))
        unknown = sorted(set(options) - set(accepted)) if accepted is not None else []
        if unknown:
            raise ValueError(f"benchmark {self.name!r} has no option {', '.join(map(repr, unknown))}; its options "
                             f"are {', '.join(accepted) if accepted else '(none)'}")

    def generate(self, out: Path, *, seed: int = 0, dataset: str = "") -> dict[str, Any]:
        """A small dataset in its native layout: its own generator, or one of ``datasets`` by name."""
        reference = self.datasets[dataset] if dataset else self.generator
        if not reference:
            raise ValueError(f"benchmark {self.name!r} has no generator")
        return _resolve(reference, self._owner)(Path(out), seed=seed)

    @property
    def _owner(self) -> str:
        return f"benchmark {self.name!r}" + ("" if self.source == "vsbench" else f" ({self.source})")

    def higher_is_better(self, metric: str) -> bool:
        return higher_is_better(metric, self.lower_is_better)


class SpecError(ValueError):
    """A BenchmarkSpec whose fields have the wrong types or forms: every problem, each with its fix.
    Its message is one line (registration stops a command with it); ``vsbench benchmarks --check``
    prints ``problems`` one a line."""

    def __init__(self, owner: str, problems: list[str]) -> None:
        super().__init__(f"{owner}: " + "; ".join(problems))
        self.owner = owner
        self.problems = problems


_TEXT_FIELDS = ("name", "title", "loader", "generator", "score_command", "source", "split_field", "headline_split")
_TUPLE_FIELDS = ("aliases", "tasks", "metrics", "lower_is_better")


def field_problems(spec: BenchmarkSpec) -> list[str]:
    """What is wrong with a spec's fields, one sentence each naming the field and the fix: the types
    the dataclass only annotates (a str where a tuple of str belongs is iterable, so nothing else
    would notice), the name's form and the ``module:attribute`` references."""
    problems: list[str] = []
    for name in _TEXT_FIELDS:
        value = getattr(spec, name)
        if not isinstance(value, str):
            problems.append(f"{name} is a {type(value).__name__}, not a str: write {name}={str(value)!r}")
    for name in _TUPLE_FIELDS:
        value = getattr(spec, name)
        if isinstance(value, str):
            problems.append(f"{name} is a str, not a tuple of str: write {name}=({value!r},) "
                            "(the comma makes a one-item tuple)")
        elif not isinstance(value, tuple):
            problems.append(f"{name} is a {type(value).__name__}, not a tuple of str: write {name}=(...)")
        elif not all(isinstance(item, str) and item for item in value):
            problems.append(f"{name} must hold non-empty strs only, got {value!r}")
    if not isinstance(spec.datasets, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in spec.datasets.items()):
        problems.append(f"datasets must map names to 'module:function' strs, got {spec.datasets!r}")
    if isinstance(spec.name, str) and not NAME_PATTERN.match(spec.name):
        problems.append(f"name {spec.name!r} must be lower case letters, digits and '_' "
                        "(it names MLflow params, pipeline tasks and folders)")
    references = [spec.loader, spec.generator, *(spec.datasets.values() if isinstance(spec.datasets, Mapping) else ())]
    for reference in references:
        if isinstance(reference, str) and reference and ":" not in reference:
            problems.append(f"{reference!r} is not a 'module:attribute' reference")
    if isinstance(spec.loader, str) and not spec.loader:
        problems.append("loader is empty: name the function that returns the adapter, 'module:function'")
    return problems


def higher_is_better(metric: str, lower: tuple[str, ...] = ()) -> bool:
    """A metric's direction: lower where a spec says so or where its name says error, loss, time."""
    name = metric.lower()
    return not (name in lower or name.rsplit("__", 1)[-1] in lower or any(w in name for w in LOWER_IS_BETTER_WORDS))


def _option_names(loader: Callable[..., Any]) -> list[str] | None:
    """The keyword options ``loader(root, **options)`` takes, or None where it takes any name."""
    parameters = list(inspect.signature(loader).parameters.values())[1:]  # the first is the root
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        try:
            target = typing.get_type_hints(loader).get("return")
        except Exception:  # noqa: BLE001 - an annotation that does not resolve: nothing to say
            return None
        if not isinstance(target, type) or target.__init__ is object.__init__:
            return None
        parameters = list(inspect.signature(target.__init__).parameters.values())[2:]  # self, root
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return None
    return [p.name for p in parameters if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                        inspect.Parameter.POSITIONAL_OR_KEYWORD)]


def _resolve(reference: str, owner: str = "") -> Callable[..., Any]:
    """The object a ``module:attribute`` reference (of ``owner``, for the message) names. A reference
    that names no module or no attribute (a typo in a spec, a plugin installed without its module) is
    a ValueError naming it; an ImportError raised inside the module (a missing optional dependency)
    stays what it is."""
    where = f"{owner}: " if owner else ""
    module, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise
        raise ValueError(f"{where}{reference!r} names module {module!r}, which cannot be found") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{where}{reference!r}: module {module!r} has no attribute {attribute!r}") from None
    return target


# vsbench's own benchmarks: module -> its SPEC (read from the module only when the registry is built).
BUILTIN = (
    "vsbench.benchmarks.disc",
    "vsbench.benchmarks.copydays",
    "vsbench.benchmarks.patch_pairs",
    "vsbench.benchmarks.vsd",
    "vsbench.benchmarks.product_search",
    "vsbench.abid",
)

_SPECS: dict[str, BenchmarkSpec] | None = None


def builtin_specs() -> list[BenchmarkSpec]:
    """vsbench's own benchmarks, without looking at plugins (what the CLI's own commands name)."""
    return [importlib.import_module(module).SPEC for module in BUILTIN]


def _load_specs() -> dict[str, BenchmarkSpec]:
    specs: dict[str, BenchmarkSpec] = {}
    found: list[BenchmarkSpec] = builtin_specs()
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        found.append(_plugin_spec(entry))
    taken: dict[str, BenchmarkSpec] = {}
    for spec in found:
        for spelling in spec.spellings:
            # get() folds case and '-'/'_': a plugin's "Patch_Pairs" would name patch_pairs ambiguously
            other = taken.get(_fold(spelling))
            if other is not None and other is not spec:  # the built-ins come first: the plugin is `spec`
                raise ValueError(f"benchmark plugin {spec.name!r} ({spec.source}): its spelling {spelling!r} is taken "
                                 f"by {other.name!r} ({other.source}); rename it in the plugin")
            taken[_fold(spelling)] = spec
        specs[spec.name] = spec
    return specs


def _fold(spelling: str) -> str:
    return spelling.strip().lower().replace("-", "_")


def _plugin_spec(entry: EntryPoint) -> BenchmarkSpec:
    """The BenchmarkSpec an entry point of ``vsbench.benchmarks`` names, its ``source`` the plugin's
    distribution. A plugin that cannot be loaded, or names something else, is a ValueError of one
    line naming the entry point and the distribution to fix or uninstall."""
    distribution = entry.dist.name if entry.dist else entry.module.partition(".")[0]
    try:
        spec = entry.load()
    except SpecError as exc:  # a field of the wrong type: each one and its fix
        raise ValueError(f"benchmark plugin {entry.name!r} ({entry.value}): {'; '.join(exc.problems)}; "
                         f"fix it in {distribution} (vsbench benchmarks --check {entry.name} lists each)") from None
    except Exception as exc:  # whatever the plugin raised: one line that says which plugin to fix
        raise ValueError(f"benchmark plugin {entry.name!r} ({entry.value}) cannot be loaded: {exc}; "
                         f"fix or uninstall {distribution}") from None
    if not isinstance(spec, BenchmarkSpec):
        raise ValueError(f"benchmark plugin {entry.name!r} ({entry.value}) is a {type(spec).__name__}, "
                         f"not a vsbench.benchmarks.registry.BenchmarkSpec; fix or uninstall {distribution}")
    return spec if spec.source != "vsbench" else replace(spec, source=distribution)


def specs() -> dict[str, BenchmarkSpec]:
    """Every benchmark by its name: the built-in ones, then the plugins'."""
    global _SPECS
    if _SPECS is None:
        _SPECS = _load_specs()
    return _SPECS


def names() -> list[str]:
    return list(specs())


def get(name: str) -> BenchmarkSpec:
    """The benchmark for any of its spellings (``patch-pairs``, ``pairs`` -> ``patch_pairs``)."""
    for spec in specs().values():
        if name in spec.spellings:
            return spec
    spelled = name.strip().lower().replace("-", "_")
    for spec in specs().values():
        if spelled in (s.replace("-", "_") for s in spec.spellings):
            return spec
    raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(names())} (vsbench benchmarks lists them)")


def canonical(name: str) -> str:
    """The one name of a benchmark given any of its spellings."""
    return get(name).name


def lower_is_better_metrics() -> dict[str, tuple[str, ...]]:
    """Every spelling of every benchmark -> the metrics its spec declares lower-is-better: what the
    leaderboard, the report and the regression check (below this registry) are handed by their callers."""
    return {spelling: spec.lower_is_better for spec in specs().values() for spelling in spec.spellings}


def dataset_names() -> dict[str, tuple[BenchmarkSpec, str]]:
    """Every name ``vsbench synth similarity`` accepts -> (benchmark, dataset; '' for its own generator)."""
    out: dict[str, tuple[BenchmarkSpec, str]] = {}
    for spec in specs().values():
        if spec.generator:
            for spelling in spec.spellings:
                out[spelling] = (spec, "")
        for dataset in spec.datasets:
            out[dataset] = (spec, dataset)
    return out


def generate(name: str, out: Path, *, seed: int = 0) -> dict[str, Any]:
    """``vsbench synth similarity NAME``: a benchmark's generator, or another dataset of its layout."""
    known = dataset_names()
    if name not in known:
        spec = get(name)  # a spelling with other separators, or an unknown name (its error lists the names)
        return spec.generate(out, seed=seed)
    spec, dataset = known[name]
    return spec.generate(out, seed=seed, dataset=dataset)


def load_benchmark(name: str, root: Path, **options: Any) -> Benchmark:
    """The benchmark ``name`` (any spelling) over ``root``."""
    return get(name).load(root, **options)
