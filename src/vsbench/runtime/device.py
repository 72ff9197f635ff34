"""Device choice and mixed precision, decided once so every step uses the GPU the same way."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceSetup:
    device: torch.device
    amp_dtype: torch.dtype | None  # None: full precision

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def needs_grad_scaler(self) -> bool:
        return self.amp_dtype is torch.float16


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when visible, else the CPU; any other name as torch reads it."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def setup_device(name: str = "auto", amp: bool = True) -> DeviceSetup:
    """``auto`` takes CUDA when present. On CUDA, AMP uses bf16 where supported (no loss scaling
    needed), fp16 with a GradScaler otherwise; on the CPU we stay in fp32 (CPU autocast is slower
    than fp32 for convolutions on most machines) and rely on channels_last instead."""
    device = resolve_device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but no CUDA device is visible")
    amp_dtype = None
    if amp and device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return DeviceSetup(device, amp_dtype)
