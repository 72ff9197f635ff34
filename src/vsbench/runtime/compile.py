"""``torch.compile`` for the embedding network, with a fallback to eager.

Why: issue 40 measured resnet50 (batch 256, bf16) on an H100 at 12,777 images/s eager and 22,280
compiled (1.74x), for 18 s of compiling. On the CPU compiling costs a C++ toolchain and minutes of
two shared cores for little gain, so ``auto`` compiles on CUDA only.

The compile is paid once per process and network, not once per shard or image set:

* :class:`CompiledNetwork` is kept on the network it wraps (:func:`network_for`), and a run's
  :class:`~vsbench.retrieval.engine.Engine` keeps the network it built (``reuse`` of
  :func:`~vsbench.retrieval.embed.embed_image_set`), so one process embedding every set of a run
  (queries, references, training rows; all its shards, as ``similarity run`` inline does) builds
  and compiles once; a pipeline's embed tasks are one process per shard, each compiling once;
* only the first full batch's shape is compiled (``dynamic=False``); a last, smaller batch or the
  other shapes of aspect-preserving models run eager instead of paying a second compile for a few
  images;
* Inductor's on-disk caches (generated kernels, autotuning) go to ``<embedding cache>/.inductor``
  (``TORCHINDUCTOR_CACHE_DIR`` unless already set) instead of ``/tmp``, which a pod loses: a later pod
  on the same volume, same torch, model and batch shape skips code generation and kernel compiles.
  Tracing the model (a few seconds) is paid again by every process.

Any failure to compile (no C++ compiler, an operator Dynamo cannot trace, a TorchScript network)
falls back to the eager network with one warning line naming the reason; the descriptors are then
the eager ones exactly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

logger = logging.getLogger(__name__)
COMPILE_MODES = ("auto", "on", "off")
INDUCTOR_DIR = ".inductor"
_ATTRIBUTE = "_vsbench_compiled"


def compile_wanted(mode: str, device: torch.device) -> bool:
    """``on``, or ``auto`` on a CUDA device."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode {mode!r}: expected one of {', '.join(COMPILE_MODES)}")
    return mode == "on" or (mode == "auto" and device.type == "cuda")


def use_inductor_cache(cache_root: Path | None) -> Path | None:
    """Point Inductor's caches beside the embedding cache unless the environment names a folder;
    returns the folder in use (None: Inductor's default)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    if cache_root is None:
        return None
    folder = cache_root / INDUCTOR_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    return folder


class CompiledNetwork:
    """Calls the compiled network for the shape it was compiled for, the eager one otherwise; at
    the first failure it warns once and stays eager."""

    def __init__(self, eager: nn.Module, compiler: Callable[..., Callable] | None = None) -> None:
        self.eager = eager
        self.compiled: Callable | None = None
        self.shape: tuple[int, ...] | None = None
        self.failure = ""
        try:
            self.compiled = (compiler or torch.compile)(eager, dynamic=False)
        except Exception as exc:  # noqa: BLE001 - any failure to compile means eager, said once
            self._fall_back(exc)

    @property
    def active(self) -> bool:
        return self.compiled is not None

    def _fall_back(self, exc: BaseException) -> None:
        self.compiled = None
        self.failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
        logger.warning("torch.compile failed (%s); embedding with the eager network", self.failure)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.compiled is not None:
            if self.shape is None:
                self.shape = tuple(x.shape)
            if tuple(x.shape) == self.shape:
                try:
                    return self.compiled(x)
                except Exception as exc:  # noqa: BLE001 - compiling happens at the first call
                    self._fall_back(exc)
        return self.eager(x)


def network_for(network: nn.Module, mode: str, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the embed loop calls: ``network`` itself, or its :class:`CompiledNetwork`, made once
    per network object (a second image set or shard in this process reuses the compiled code)."""
    if not compile_wanted(mode, device):
        return network
    wrapped = getattr(network, _ATTRIBUTE, None)
    if wrapped is None:
        wrapped = CompiledNetwork(network)
        object.__setattr__(network, _ATTRIBUTE, wrapped)  # not a submodule: kept out of state_dict
    return wrapped


def compile_status(network: nn.Module, mode: str, device: torch.device, inductor: Path | None) -> dict[str, object]:
    """What a manifest records about compiling ``network``: asked, used, why not, where the cache is."""
    wrapped = getattr(network, _ATTRIBUTE, None)
    compiled = wrapped if isinstance(wrapped, CompiledNetwork) else None
    return {"mode": mode, "wanted": compile_wanted(mode, device), "active": bool(compiled and compiled.active),
            "failure": compiled.failure if compiled else "", "inductor_cache": str(inductor) if inductor else None}
