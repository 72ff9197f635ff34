"""The feeder: batches from the loader to the network's input, one batch ahead of the network (issue 58).

Why: on one H200 the batched device decode alone ran 6,321 photos/s, yet embedding end to end with
it ran 738 images/s, 0.67x the Pillow workers (bench/README.md): the decode and the host-to-device
copy ran in the main loop, in line with the network, so the GPU did one thing at a time. Here the
work of batch i+1 is queued before batch i is handed to the network:

* the loader's workers read each file once, hash those bytes and (for the device path) read the
  header; the DataLoader pins the batch (``pin_memory``: :class:`~vsbench.imaging.batched.EncodedBatch`
  and the uint8 pixel batches both pin), so the copy can be asynchronous;
* ``prepare`` (the caller's: the host-to-device copy, or the batched decode, resize and crop, then
  the conversion to the normalized float input) runs on a CUDA stream of the feeder's own, so the
  device decodes batch i+1 while the network, on the caller's stream, runs batch i;
* the hand-over is one event per batch: the caller's stream waits for it on the device (no host
  synchronization, none per image), and each tensor handed over is marked as used on the caller's
  stream (``record_stream``), so the caching allocator does not reuse its memory while the network
  still reads it.

The same code runs on the CPU, where there are no streams: ``prepare`` runs in line, one batch
ahead all the same, which is what the CPU tests exercise (same descriptors as the Pillow path,
same :class:`~vsbench.retrieval.embed.InputsChanged` when a file changes between read and decode).

Why our own feeder and not NVIDIA DALI: docs/scale.md ("The feeder"). In short, the digest must be
of the very bytes decoded (issue 46), and these workers already hash the buffer they hand on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from vsbench.imaging.preprocessing import Preprocessing
from vsbench.runtime.stages import Stages


@dataclass
class Fed:
    """One batch ready for the network: ``groups`` of (positions, input tensor on the device) of one
    shape each, the failures (position, reason) and the digests of the bytes read, as the caller's
    ``prepare`` returns them; ``batch`` is its index in :class:`~vsbench.runtime.stages.Stages`."""

    groups: list[tuple[torch.Tensor, torch.Tensor]]
    failures: list[tuple[int, str]]
    read: list[tuple[int, str | None]]
    batch: int = 0
    ready: Any = None  # the CUDA event the network's stream waits for


class Feeder:
    """Iterates over ``batches`` (a DataLoader) and yields :class:`Fed` batches, ``prepare`` of batch
    i+1 queued (on its own CUDA stream) before batch i is yielded.

    ``prepare(batch, stream, index) -> Fed`` does the copy/decode and records its own stages in
    ``stages`` (``stream`` is the feeder's CUDA stream, or None on the CPU)."""

    def __init__(self, batches: Iterable[Any], device: torch.device, prepare: Callable[[Any, Any, int], Fed],
                 stages: Stages, ahead: int = 1) -> None:
        if ahead < 1:
            raise ValueError(f"ahead must be at least 1, got {ahead}")
        self.batches, self.device, self.prepare, self.stages, self.ahead = batches, device, prepare, stages, ahead
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def _queue(self, source: Iterator[Any]) -> Fed | None:
        """Read the next batch from the loader and queue its preparation; None when none is left."""
        index = self.stages.batch()
        with self.stages.host_span(index, "read"):
            batch = next(source, None)
        if batch is None:
            self.stages.discard(index)  # the loader's end is no batch
            return None
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            fed = self.prepare(batch, self.stream, index)
            fed.batch = index
            if self.stream is not None:
                fed.ready = torch.cuda.Event()
                fed.ready.record(self.stream)
        return fed

    def _hand_over(self, fed: Fed) -> Fed:
        """Make the caller's stream wait (on the device) for the batch, and keep its memory alive there."""
        if self.stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(fed.ready)
            for _, tensor in fed.groups:
                tensor.record_stream(current)
        return fed

    def __iter__(self) -> Iterator[Fed]:
        source = iter(self.batches)
        if self.stream is not None:  # what the caller queued before (the model, the normalizer) comes first
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        queued: list[Fed] = []
        done = False
        while True:
            while not done and len(queued) <= self.ahead:  # batch i+1 (and on) queued before batch i goes
                fed = self._queue(source)
                done = fed is None
                if fed is not None:
                    queued.append(fed)
            if not queued:
                return
            yield self._hand_over(queued.pop(0))


def normalizer(preprocessing: Preprocessing, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) so that ``uint8 * scale + shift == (x / 255 - mean) / std`` in one pass."""
    std = torch.tensor(preprocessing.std, dtype=torch.float32)
    mean = torch.tensor(preprocessing.mean, dtype=torch.float32)
    scale = (1.0 / (255.0 * std)).view(1, 3, 1, 1)
    shift = (-mean / std).view(1, 3, 1, 1)
    return scale.to(device), shift.to(device)


def to_host(tensor: torch.Tensor, cuda: bool) -> torch.Tensor:
    """Start copying a result to the CPU without waiting for it (one sync at the end of the shard
    instead of one per batch, so the GPU never idles on the copy)."""
    if not cuda:
        return tensor
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    return host
