"""Device choice and mixed precision, decided once so every step uses the GPU the same way.

torch is imported by the functions that need it: :func:`device_problem` answers ``auto``, ``cpu``
and a name that is no device without it, so a run its checks refuse never loads torch (issue 48).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_TYPES = ("cpu", "cuda", "mps")  # what vsbench runs on, with an optional ":N"


@dataclass(frozen=True)
class DeviceSetup:
    device: torch.device
    amp_dtype: torch.dtype | None  # None: full precision

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager:
        import torch

        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def needs_grad_scaler(self) -> bool:
        import torch

        return self.amp_dtype is torch.float16


def device_problem(name: str) -> str | None:
    """What is wrong with ``--device name`` on this machine (one line with the fix), or None:
    a name that is no device vsbench runs on, or CUDA (MPS) asked for where none is visible. Checked
    before a run starts, so that a missing GPU is not found after the data has been read; torch is
    imported only for the accelerator's question."""
    kind, colon, index = name.partition(":")
    if name == "auto" or (kind == "cpu" and (not colon or index.isdigit())):
        return None
    if kind not in DEVICE_TYPES or (colon and not index.isdigit()):
        return f"--device {name!r} is not a device: use auto, cpu, cuda or cuda:N"
    import torch  # only to ask whether the accelerator named is there

    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            return f"--device {name}: no CUDA device is visible on this machine; use --device cpu (or auto)"
        if colon and int(index) >= count:
            return f"--device {name}: this machine has {count} CUDA device(s), 0 to {count - 1}"
    elif not torch.backends.mps.is_available():
        return f"--device {name}: no MPS device on this machine; use --device cpu (or auto)"
    return None


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when visible, else the CPU; any other name as torch reads it."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def setup_device(name: str = "auto", amp: bool = True) -> DeviceSetup:
    """``auto`` takes CUDA when present. On CUDA, AMP uses bf16 where supported (no loss scaling
    needed), fp16 with a GradScaler otherwise; on the CPU we stay in fp32 (CPU autocast is slower
    than fp32 for convolutions on most machines) and rely on channels_last instead."""
    problem = device_problem(name)
    if problem is not None:  # the user's choice, not a fault: one line (exit 2) with the fix
        raise ValueError(problem)
    import torch

    device = resolve_device(name)
    amp_dtype = None
    if amp and device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return DeviceSetup(device, amp_dtype)
