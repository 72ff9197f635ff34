"""Weights for the library adapters (timm, open_clip, Hugging Face): reading, checking, digesting.

Three rules every adapter follows:

* **Never run a pickle.** ``.safetensors`` files are read with safetensors; anything else with
  ``torch.load(weights_only=True)``, which refuses a file holding more than tensors.
* **A file that does not fit is an error naming the first tensor that does not fit.** PyTorch's
  own message lists every key, which for a ViT is hundreds of lines; libraries such as
  transformers only *warn* about missing keys and leave them randomly initialized, which would
  benchmark a half-trained network without anyone noticing.
* **Offline means offline.** With ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``/``VSBENCH_OFFLINE``
  set, weights come only from the library's cache or a local path; a miss is an error naming the
  ``{"weights": "PATH"}`` option.

The digest of the weights actually loaded (:func:`state_digest`) goes into the embedding cache
key, beside the sha256 of the file an option names (:mod:`vsbench.models.cache`): the values pin
what the network computes however they arrived, the file's bytes what was asked for (the same
file at another path is the same key; a ``.bin`` copy of a safetensors file is another, which
costs one embedding, never a wrong row); ``{"weights": "random"}`` (seeded, so reproducible)
gets a key of its own per library version and seed.

**One seed per build.** :func:`vsbench.models.registry.build_model` runs every builder inside
:func:`seeded` with the run's seed (``--seed``, default 0), so ``{"weights": "random"}`` is the
same network for the same seed in every model family, built-in, library or plugin; builders that
initialize randomly call :func:`seeded` again right before, so what ran earlier in the builder
never shifts the draw. :func:`random_source` is the one sentence naming that seed.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a tensor is touched: the seed and offline checks stay light
    import torch
    from torch import nn

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VSBENCH_OFFLINE")
RANDOM_SEED = 0  # the seed when none is given (the CLI's and the pipelines' default too)
MAX_SEED = 2**63 - 1  # torch.manual_seed takes any 64-bit value; a non-negative int64 survives every JSON and MLflow
_SEED: contextvars.ContextVar[int] = contextvars.ContextVar("vsbench_weights_seed", default=RANDOM_SEED)
WEIGHTS_HELP = ('pass {"weights": "PATH"} (a local .safetensors file or save_pretrained folder), '
                'or {"weights": "random"} for an untrained network')


class WeightsError(ValueError):
    """Weights that cannot be had or do not fit the architecture."""


def is_offline() -> bool:
    """Whether the environment forbids downloads (the Hugging Face variables, or vsbench's own)."""
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on") for name in OFFLINE_VARIABLES)


def offline_error(what: str, exc: BaseException | None = None) -> WeightsError:
    """The one message for weights that are neither cached nor downloadable."""
    reason = f" ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})" if exc else ""
    mode = "offline (" + ", ".join(n for n in OFFLINE_VARIABLES if os.environ.get(n)) + ")" if is_offline() \
        else "not downloadable"
    return WeightsError(f"{what}: not in the library's cache and {mode}{reason}; {WEIGHTS_HELP}")


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors from a ``.safetensors`` file, or a state dict from ``torch.load(weights_only=True)``.

    A trainer checkpoint ``{"state_dict": ...}`` or ``{"model": ...}`` is unwrapped, and a
    ``module.`` prefix (DataParallel) is dropped.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state: Any = load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as exc:
            raise WeightsError(f"{path}: not a readable .safetensors file ({_first_line(exc)}); "
                               "give the file the model was saved to, whole") from None
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise WeightsError(f"{path}: refused to load: the file holds more than plain weights "
                               f"({_refused_global(exc)}); vsbench reads weights only with weights_only=True: "
                               "save the model's state_dict (or .safetensors) instead") from None
        except (RuntimeError, EOFError, OSError, ValueError, IndexError, KeyError) as exc:
            raise WeightsError(f"{path}: not a readable torch weights file ({_first_line(exc)}); "
                               "give a state_dict saved with torch.save, or a .safetensors file") from None
    for wrapper in ("state_dict", "model"):
        if isinstance(state, Mapping) and isinstance(state.get(wrapper), Mapping):
            state = state[wrapper]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"{path}: expected a state dict of tensors, found a {type(state).__name__}")
    if state and all(key.startswith("module.") for key in state):
        state = {key[len("module."):]: value for key, value in state.items()}
    return dict(state)


def first_mismatch(expected: Mapping[str, torch.Tensor], given: Mapping[str, torch.Tensor], *,
                   allow_unexpected: bool = False) -> str | None:
    """A sentence about the first tensor (in the architecture's order) that does not fit, or None."""
    for name, tensor in expected.items():
        if name not in given:
            return f"tensor {name!r} {tuple(tensor.shape)} is missing from it"
        if tuple(given[name].shape) != tuple(tensor.shape):
            return (f"tensor {name!r} has shape {tuple(given[name].shape)}, the architecture expects "
                    f"{tuple(tensor.shape)}")
    if not allow_unexpected:
        for name, tensor in given.items():
            if name not in expected:
                return f"it holds tensor {name!r} {tuple(tensor.shape)}, which the architecture does not have"
    return None


def load_checked(module: nn.Module, state: Mapping[str, torch.Tensor], source: str, *,
                 allow_unexpected: bool = False) -> None:
    """Load ``state`` into ``module`` after checking every tensor's name and shape."""
    expected = module.state_dict()
    problem = first_mismatch(expected, state, allow_unexpected=allow_unexpected)
    if problem:
        raise WeightsError(f"{source} does not fit {type(module).__name__}: {problem}")
    module.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=True)


def state_digest(module: nn.Module) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, bytes), in a fixed order.

    Hashing what was loaded rather than the file makes the digest exact however the weights
    arrived (hub cache, local file, seeded random initialization).
    """
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}\n".encode())
        if data.numel():
            digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_seed(seed: Any) -> int:
    """``seed`` as an int in [0, 2**63), or a WeightsError saying what was given."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise WeightsError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
    return seed


def current_seed() -> int:
    """The seed of the model build in progress (:func:`seeded`), else :data:`RANDOM_SEED`."""
    return _SEED.get()


@contextlib.contextmanager
def seeded(seed: int | None = None) -> Iterator[None]:
    """Random initialization with a fixed seed, leaving the caller's random state as it was, so
    that ``{"weights": "random"}`` is the same network in every run (and cacheable).

    ``seed`` None keeps the seed of the build in progress (the one ``build_model`` was given), so a
    builder that re-seeds right before its random initialization draws the same values whatever
    it did before; outside any build that is :data:`RANDOM_SEED`.
    """
    import torch

    value = current_seed() if seed is None else check_seed(seed)
    token = _SEED.set(value)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(value)
            yield
    finally:
        _SEED.reset(token)


def random_source() -> str:
    """Where random weights come from, naming the seed they were drawn with."""
    return f"random initialization (seed {current_seed()})"


def weights_choice(weights: str) -> str:
    """``"pretrained"``, ``"random"`` or ``"path"`` for a ``weights`` option value."""
    if weights in ("pretrained", "random"):
        return weights
    if not weights:
        raise WeightsError(f"weights must not be empty; use 'pretrained', 'random' or a local path. {WEIGHTS_HELP}")
    return "path"


def _refused_global(exc: BaseException) -> str:
    """What torch's weights-only unpickler refused, without its advice to load the file unsafely."""
    for line in str(exc).splitlines():
        if "GLOBAL" in line or "Unsupported" in line:
            return line.strip().removeprefix("WeightsUnpickler error:").strip().rstrip(".")
    return "it holds Python objects that are not tensors"


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
