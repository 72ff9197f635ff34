"""Antialiased bilinear resizing of uint8 RGB arrays with torch's fast uint8 kernel.

Why: Pillow's ``resize(BILINEAR)`` of a 430x354 photo to 224x224 costs about 1.3 ms on one
core, more than decoding it; ``torch.nn.functional.interpolate(mode="bilinear", antialias=True)``
computes the same filter (a triangle kernel stretched by the scale factor, as Pillow's) in
about 0.3 ms when the uint8 input has channels_last strides, which is what a NumPy (H, W, 3)
array viewed as (1, 3, H, W) already has. Its rounding differs from Pillow's by at most one
level on a few pixels (mean ~0.002 levels), measured in bench/resize.py and checked in
tests/unit/test_jpeg_decode.py. A plain NCHW-contiguous tensor would take the slower generic
kernel (~0.8 ms).

Threads: the kernel runs on torch's intra-op threads. The resize step runs one process per core
and asks for one thread each (:func:`one_thread`), which also keeps forked workers away from
OpenMP's thread pool (torch runs ``parallel_for`` inline when it has one thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np


def resize_bilinear(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``pixels`` (H, W, C) uint8 resized to ``size`` (width, height), antialiased bilinear, as a
    C-contiguous (height, width, C) uint8 array. Each channel is resized on its own; C = 4
    (RGBX) is a little faster than 3, as the kernel works on 4 channels."""
    import torch

    x = torch.from_numpy(pixels).unsqueeze(0).permute(0, 3, 1, 2)  # (1, C, H, W), channels_last strides
    y = torch.nn.functional.interpolate(x, size=(size[1], size[0]), mode="bilinear", antialias=True,
                                        align_corners=False)
    return np.ascontiguousarray(y[0].permute(1, 2, 0).numpy())  # channels_last out: no copy made


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread inside the block, the previous count restored after it."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
