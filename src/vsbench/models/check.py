"""``vsbench benchmarks --check`` for model plugins: what a plugin registers, and whether each
builder gives vsbench what it expects.

A builder is checked from its signature and return annotation, then built the way ``vsbench
similarity models NAME`` builds it (no options, random weights where it takes ``weights``, so
nothing is downloaded) and run on a batch of two black images of its input size: the result must be
an :class:`Embedder` whose ``dim`` is the width of what it returns, with a :class:`Preprocessing`.
A builder with an option that has no default (or that refuses to be built without options with a
ValueError), and a family (``prefix:<spec>``), are checked from their declarations only.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from vsbench.io.annotations import return_annotation
from vsbench.models.registry import Builder, Embedder, PrecomputedFeatures, Preprocessing, family, registered
from vsbench.models.weights import RANDOM_SEED, seeded

RETURNS = {"Embedder", "PrecomputedFeatures", "Model"}  # what a builder may say it returns


def _signature_problems(label: str, builder: Builder, *, takes_spec: bool) -> list[str]:
    problems: list[str] = []
    annotated, text = return_annotation(builder)
    if not annotated:
        problems.append(f"{label}: the builder has no return annotation: annotate it -> Embedder")
    elif not set(re.findall(r"\w+", text)) - {"UnionType", "Union", "Optional"} <= RETURNS:
        problems.append(f"{label}: the builder returns {text}, not Embedder: return "
                        "vsbench.models.registry.Embedder(name, network, dim, preprocessing)")
    try:
        parameters = list(inspect.signature(builder).parameters.values())
    except (TypeError, ValueError):
        return problems + [f"{label}: the builder has no signature vsbench can read: make it a def"]
    if takes_spec:  # a family's builder(spec, **options)
        if not parameters or parameters[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                        inspect.Parameter.POSITIONAL_OR_KEYWORD):
            problems.append(f"{label}: a family's builder takes the name after the prefix first: "
                            "def build(spec: str, **options) -> Embedder")
        parameters = parameters[1:]
    for parameter in parameters:
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL):
            problems.append(f"{label}: parameter {parameter.name!r} cannot be given by name, and --model-options "
                            "gives every option by name: make it a keyword parameter")
    return problems


def _built_problems(label: str, build: Callable[[], Any]) -> tuple[list[str], str]:
    """Build with no options and embed two black images: (problems, what it is when it works)."""
    import torch

    try:
        with seeded(RANDOM_SEED):
            model = build()
    except ValueError as exc:  # the builder's own word that it needs options (as abid_trunk's run or file)
        return [], f"not built with no options: {exc}"
    except Exception as exc:  # a bug in the plugin: say it, with what was asked
        return [f"{label}: building it with no options raised {type(exc).__name__}: {exc}"], ""
    if isinstance(model, PrecomputedFeatures):
        return [], f"precomputed features, dim {model.dim}"
    if not isinstance(model, Embedder):
        return [f"{label}: the builder returned a {type(model).__name__}, not an Embedder: wrap the network in "
                "vsbench.models.registry.Embedder(name, network, dim, preprocessing)"], ""
    problems: list[str] = []
    if not isinstance(model.preprocessing, Preprocessing):
        problems.append(f"{label}: preprocessing is a {type(model.preprocessing).__name__}, not a "
                        "vsbench.models.registry.Preprocessing")
    if not isinstance(model.dim, int) or isinstance(model.dim, bool) or model.dim < 1:
        problems.append(f"{label}: dim is {model.dim!r}: give the descriptor's width, a positive int")
    if problems:
        return problems, ""
    size = model.preprocessing.input_size
    try:
        with torch.no_grad():
            out = model(torch.zeros(2, 3, size, size))
    except Exception as exc:
        return [f"{label}: embedding two {size}x{size} images raised {type(exc).__name__}: {exc}"], ""
    if tuple(out.shape) != (2, model.dim):
        problems.append(f"{label}: two {size}x{size} images gave descriptors of shape {tuple(out.shape)}, "
                        f"not (2, {model.dim}): dim must be the width the network returns")
    elif not bool(torch.isfinite(out).all()):
        problems.append(f"{label}: two black {size}x{size} images gave NaN or infinite descriptors")
    pre = model.preprocessing
    return problems, f"dim {model.dim}, input {size}x{size} (resize {pre.resize_size}, {pre.resize_mode}), " \
                     f"mean {pre.mean}, std {pre.std}"


def model_problems(name: str) -> tuple[list[str], str]:
    """(problems, a short description) of the model registered as ``name``."""
    label = f"model {name!r}"
    builder = registered(name)
    if builder is None:
        return [f"{label} is not registered"], ""
    problems = _signature_problems(label, builder, takes_spec=False)
    parameters = inspect.signature(builder).parameters
    needed = [p.name for p in parameters.values() if p.default is inspect.Parameter.empty
              and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]
    if problems:
        return problems, ""
    if needed:
        return [], f"not built: it needs option(s) {', '.join(needed)}"
    options = {"weights": "random"} if "weights" in parameters else {}
    return _built_problems(label, lambda: builder(**options))


def family_problems(prefix: str) -> tuple[list[str], str]:
    """(problems, a short description) of the family registered under ``prefix`` (not built: it
    needs a name after the prefix)."""
    registered_family = family(prefix)
    label = f"model family {prefix!r}"
    if registered_family is None:
        return [f"{label} is not registered"], ""
    problems = _signature_problems(label, registered_family.builder, takes_spec=True)
    for what in ("weights_source", "names"):
        if not callable(getattr(registered_family, what)):
            problems.append(f"{label}: {what} must be a function")
    return problems, f"names {registered_family.pattern}, e.g. {registered_family.example}"
