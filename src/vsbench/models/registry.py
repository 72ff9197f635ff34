"""The model registry: one name -> one builder, and every model carries its own preprocessing.

Like timm's ``@register_model``, a builder registers itself under a name and returns a ready
:class:`Embedder` (or, for ``precomputed``, a :class:`PrecomputedFeatures`). The preprocessing
travels with the model because a descriptor is only comparable with descriptors computed the
same way: SSCD's numbers need SSCD's resize, an EfficientNet-Lite needs its TF-style mean/std.

Embedders return *raw* descriptors (no L2 normalization): whether to normalize, whiten or
center is a codec choice made at search time (``L2norm`` in a FAISS codec string such as
``PCAW512,L2norm,Flat``), so one feature file serves every codec.

Where the models come from: the modules in :data:`BUILTIN` register vsbench's own when imported,
and every entry point of the ``vsbench.models`` group registers an installed package's (it names a
module that calls :func:`register_model` / :func:`register_family` when imported, or a callable
that does when called). Both are loaded by name the first time a model is looked up, so this module
imports neither (the registry sits below the models, with no import cycle) and ``vsbench --help``
loads no model at all.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from vsbench.imaging.preprocessing import (  # noqa: F401 - re-exported: models state their preprocessing
    CROP_OFFSETS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    INTERPOLATIONS,
    RESIZE_MODES,
    Preprocessing,
)
from vsbench.io.features import FeatureError, FeatureSet, load_features
from vsbench.models.choices import ENTRY_POINT_GROUP
from vsbench.models.weights import RANDOM_SEED, seeded


class Embedder(nn.Module):
    """A network that maps a normalized float NCHW batch to (N, dim) raw descriptors.

    ``supports_autocast`` is False for networks that must run in float32 on the GPU (TorchScript
    graphs, whose behaviour under eager autocast is not guaranteed); the embed loop then skips
    mixed precision for them.

    ``weights_source`` says where the weights came from (for ``vsbench similarity models`` and
    the manifest); ``weights_digest`` is the sha256 of the model file as a whole where the state
    dict does not say everything (a TorchScript file is code as well as weights: two files with the
    same parameters and another pooling are two models); ``config`` is the library configuration
    that shapes the network beyond its weights (Hugging Face's config.json, an activation say;
    timm's and open_clip's model configs). The embedding cache keys on both, beside the state
    dict's digest. ``output`` names the layer the descriptors come from.
    """

    def __init__(self, name: str, network: nn.Module, dim: int, preprocessing: Preprocessing, *,
                 supports_autocast: bool = True, weights_source: str = "", weights_digest: str | None = None,
                 output: str = "pooled features", config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.name = name
        self.network = network
        self.dim = dim
        self.preprocessing = preprocessing
        self.supports_autocast = supports_autocast
        self.weights_source = weights_source
        self.weights_digest = weights_digest
        self.output = output
        self.config = dict(config or {})
        self.eval()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.network(images).flatten(1)


@dataclass(frozen=True)
class PrecomputedFeatures:
    """Not a network: descriptors someone already computed, in a vsbench feature file.

    Embedding an image set with it selects the rows by id, so a precomputed submission runs
    through the same sharding, merging and evaluation as a model does.
    """

    path: Path
    features: FeatureSet
    name: str = "precomputed"

    @property
    def dim(self) -> int:
        return self.features.dim

    def select(self, ids: Sequence[str]) -> FeatureSet:
        """Rows for ``ids`` in that order; a missing id or a NaN row is an error naming the id."""
        chosen = self.features.select(list(ids), source=str(self.path))
        chosen.check_finite(source=str(self.path))
        return chosen


Model = Embedder | PrecomputedFeatures
Builder = Callable[..., Model]
_REGISTRY: dict[str, Builder] = {}


@dataclass(frozen=True)
class Family:
    """Models named ``<prefix>:<spec>`` (``timm:resnet50``): one builder for a whole library.

    ``builder(spec, **options)`` builds one; ``weights_source(spec, **options)`` says where its
    weights would come from without loading them; ``names()`` lists specs to suggest when a name is
    unknown (empty where the library cannot list them, e.g. Hugging Face repositories);
    ``pattern`` is how ``vsbench similarity models`` shows the family.
    """

    prefix: str
    builder: Builder
    weights_source: Callable[..., str]
    names: Callable[[], list[str]]
    pattern: str
    example: str


_FAMILIES: dict[str, Family] = {}


def register_family(prefix: str, *, weights_source: Callable[..., str], names: Callable[[], list[str]],
                    pattern: str, example: str) -> Callable[[Builder], Builder]:
    """Register ``builder(spec, **options)`` for every name ``<prefix>:<spec>`` (once)."""

    def decorator(builder: Builder) -> Builder:
        if prefix in _FAMILIES:
            raise ValueError(f"model family {prefix!r} is registered already (by {source_of(_FAMILIES[prefix].builder)})")
        _FAMILIES[prefix] = Family(prefix, builder, weights_source, names, pattern, example)
        return builder

    return decorator


def register_model(name: str) -> Callable[[Builder], Builder]:
    """Register ``builder(**options) -> Embedder`` under ``name`` (once)."""

    def decorator(builder: Builder) -> Builder:
        if name in _REGISTRY:
            raise ValueError(f"model {name!r} is registered already (by {source_of(_REGISTRY[name])})")
        _REGISTRY[name] = builder
        return builder

    return decorator


# vsbench's own models: importing each module registers its builders (imported by name, on first use).
BUILTIN = ("vsbench.models.backbones", "vsbench.models.libraries")
_PLUGIN_PACKAGES: dict[str, str] = {}  # top-level package of a loaded plugin -> its distribution's name
_LOAD = {"done": False, "running": False}


def _load_models() -> None:
    """Import the built-in model modules, then every ``vsbench.models`` plugin, once per process.

    A plugin that cannot be loaded (a missing module, an error while registering, a name that is
    taken) is a ValueError of one line naming the entry point and its distribution."""
    if _LOAD["done"] or _LOAD["running"]:  # running: a plugin that lists models while it registers
        return
    _LOAD["running"] = True
    try:
        for module in BUILTIN:
            importlib.import_module(module)
        for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            _load_plugin(entry)
        _LOAD["done"] = True
    finally:
        _LOAD["running"] = False


def _load_plugin(entry: EntryPoint) -> None:
    distribution = entry.dist.name if entry.dist else entry.module.partition(".")[0]
    try:
        _register_from(entry.load)
    except Exception as exc:  # whatever the plugin raised: one line that says which plugin to fix
        raise ValueError(f"model plugin {entry.name!r} ({entry.value}) cannot be loaded: {exc}; "
                         f"fix or uninstall {distribution}") from None
    _PLUGIN_PACKAGES[entry.module.partition(".")[0]] = distribution


def _register_from(load: Callable[[], Any]) -> None:
    """Run a plugin's registration: ``load`` imports the module an entry point names (registering
    as it is imported) or returns the callable that registers when called."""
    target = load()
    if callable(target) and not isinstance(target, ModuleType):
        target()


def registered_by(load: Callable[[], Any]) -> tuple[list[str], list[str]]:
    """(model names, family prefixes) that one plugin's registration (``load``, as for an entry
    point) adds, after the built-ins, for ``vsbench benchmarks --check``: only that plugin is loaded,
    so another broken one cannot hide its problems. A module imported before registers nothing new:
    the builders it defines are named instead."""
    for module in BUILTIN:
        importlib.import_module(module)
    before = (set(_REGISTRY), set(_FAMILIES))
    _register_from(load)
    names, prefixes = sorted(set(_REGISTRY) - before[0]), sorted(set(_FAMILIES) - before[1])
    return names, prefixes


def builders_of(module: str) -> tuple[list[str], list[str]]:
    """(model names, family prefixes) whose builders ``module`` defines."""
    return ([name for name, builder in _REGISTRY.items() if getattr(builder, "__module__", "") == module],
            [prefix for prefix, family in _FAMILIES.items() if getattr(family.builder, "__module__", "") == module])


def registered(name: str) -> Builder | None:
    """The builder registered as ``name``, without loading any plugin (None when there is none)."""
    return _REGISTRY.get(name)


def family(prefix: str) -> Family | None:
    """The family registered under ``prefix``, without loading any plugin."""
    return _FAMILIES.get(prefix)


def source_of(builder: Builder) -> str:
    """Who registered ``builder``: ``vsbench``, or the distribution of the plugin whose package defines it."""
    package = getattr(builder, "__module__", "").partition(".")[0]
    return _PLUGIN_PACKAGES.get(package, package or "unknown")


def model_source(name: str) -> str:
    """``vsbench`` for a built-in model or family (``timm:...``), else the plugin's distribution name."""
    _load_models()
    if name in _REGISTRY:
        return source_of(_REGISTRY[name])
    family = _FAMILIES.get(name.partition(":")[0])
    if family is None:
        raise ValueError(f"unknown model {name!r}")
    return source_of(family.builder)


def available_models() -> list[str]:
    """The registered names, then one pattern per library family (``timm:<name>``)."""
    _load_models()
    return sorted(_REGISTRY) + [family.pattern for family in _FAMILIES.values()]


def families() -> list[Family]:
    _load_models()
    return list(_FAMILIES.values())


def close_names(name: str, candidates: Sequence[str], limit: int = 5) -> list[str]:
    """Names that look like ``name`` (a typo's likely targets), best first."""
    import difflib

    lowered = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=limit, cutoff=0.6)
    return [lowered[f] for f in found]


def resolve(name: str) -> tuple[Builder, str | None]:
    """(builder, spec): the builder for ``name`` and, for a family name, the part after the prefix.

    An unknown name is an error listing the close names (of the registry, or of the family's
    library for ``timm:...``/``open_clip:...``) and the families.
    """
    _load_models()
    if name in _REGISTRY:
        return _REGISTRY[name], None
    prefix, colon, spec = name.partition(":")
    if colon and prefix in _FAMILIES:
        if not spec:
            raise ValueError(f"model {name!r} names no model; e.g. {_FAMILIES[prefix].example}")
        return _FAMILIES[prefix].builder, spec
    candidates = list(_REGISTRY) + [f"{f.prefix}:{n}" for f in _FAMILIES.values() for n in _safe_names(f)]
    close = close_names(name, candidates)
    hint = f"close names: {close}; " if close else ""
    raise ValueError(f"unknown model {name!r}; {hint}choose from {sorted(_REGISTRY)} or "
                     f"{[f.pattern for f in _FAMILIES.values()]}")


def _safe_names(family: Family) -> list[str]:
    """A family's names, or none where its library is not installed (the error then says so)."""
    try:
        return family.names()
    except ImportError:
        return []


def _check_options(name: str, builder: Builder, spec: str | None, options: dict[str, Any]) -> None:
    signature = inspect.signature(builder)
    try:
        signature.bind(*([spec] if spec is not None else []), **options)
    except TypeError as exc:
        accepted = [p for p in signature.parameters if spec is None or p != "spec"]
        raise ValueError(f"model {name!r}: {exc}; its options are {accepted}") from None


def check_model(name: str, options: dict[str, Any]) -> None:
    """A ValueError naming an unknown model or an option its builder does not take (with the
    accepted ones), without building it: no weights are read or downloaded, so a run can check its
    model before any other work."""
    builder, spec = resolve(name)
    _check_options(name, builder, spec, options)


def build_model(name: str, *, seed: int = RANDOM_SEED, **options: Any) -> Model:
    """Build the model registered as ``name`` (or ``<family>:<spec>``); unknown names and options
    are errors that list what is accepted (checked before building, so a typo never starts a
    download).

    The builder runs inside :func:`~vsbench.models.weights.seeded` with ``seed`` (the run's
    ``--seed``): ``{"weights": "random"}`` is then the same network for the same seed in every
    family, a plugin's included, and building leaves the caller's random state untouched."""
    builder, spec = resolve(name)
    _check_options(name, builder, spec, options)
    with seeded(seed):
        return builder(**options) if spec is None else builder(spec, **options)


@dataclass(frozen=True)
class ModelInfo:
    """What ``vsbench similarity models NAME`` prints."""

    name: str
    dim: int
    preprocessing: Preprocessing | None
    weights: str
    output: str


def describe_model(name: str, *, seed: int = RANDOM_SEED, **options: Any) -> ModelInfo:
    """A model's dimension, preprocessing, output layer and where its weights would come from,
    without downloading or loading any weights: the network is built randomly initialized (which
    fixes every shape) and the weights' location is resolved, not read."""
    builder, spec = resolve(name)
    _check_options(name, builder, spec, options)
    with seeded(seed):  # "random initialization (seed N)" names the seed asked for
        return _describe(name, builder, spec, options)


def _describe(name: str, builder: Builder, spec: str | None, options: dict[str, Any]) -> ModelInfo:
    accepts_weights = "weights" in inspect.signature(builder).parameters
    if spec is not None:
        family = _FAMILIES[name.partition(":")[0]]
        built = builder(spec, **{**options, "weights": "random"})  # first: it checks the name
        where = family.weights_source(spec, **options)
    else:
        built = builder(**({"weights": "random", **options} if accepts_weights else options))
        where = (builder.__doc__ or "").strip().splitlines()[0] if builder.__doc__ else ""
    if isinstance(built, PrecomputedFeatures):
        return ModelInfo(name, built.dim, None, f"precomputed features {built.path}", "precomputed")
    if spec is None and (not accepts_weights or options.get("weights") == "random"):
        where = built.weights_source or where  # the random build stands in for the shapes only otherwise
    return ModelInfo(name, built.dim, built.preprocessing, where, built.output)


@register_model("precomputed")
def precomputed(path: str | Path, dim: int | None = None) -> PrecomputedFeatures:
    """Descriptors from a feature file (``.npz``, see :mod:`vsbench.io.features`); ``dim``, when
    given, is checked against the file so a submission of the wrong size fails up front."""
    path = Path(path)
    features = load_features(path)
    if dim is not None and features.dim != dim:
        raise FeatureError(f"{path}: features have {features.dim} dimensions, expected {dim}")
    return PrecomputedFeatures(path, features)
