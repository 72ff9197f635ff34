"""Where one batch's time goes: read, copy, decode, network, write (issue 58).

The GPU check needs the next bottleneck named by a table, not guessed: the H200 run measured the
device decode alone at 31x one Pillow core and the embedding end to end at 0.67x the Pillow
workers, and nothing said which stage ate the difference. :class:`Stages` times each stage of each
batch where its work runs: on CUDA with events recorded on the stream the work is queued on (the
decode's own stream, the network's stream), so timing adds no synchronization and does not change
the overlap it measures; on the CPU with ``time.perf_counter`` around the call (the work is done
when the call returns). ``read`` is always the host's wait for the loader's next batch: it is
what the workers could not hide.

Read back only in the process that recorded it (:meth:`Stages.summary`, after the caller's final
synchronize); it goes to the shard manifest as numbers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

STAGES = ("read", "copy", "decode", "network", "write")


class Stages:
    """Per-batch spans of :data:`STAGES` on ``device``.

    :meth:`batch` opens the record of the next batch and returns its index; :meth:`span` times a
    stage of a batch (``stream``: the CUDA stream its work is queued on; the current one if None);
    :meth:`host_span` times host work (the loader's ``read``)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._batches: list[dict[str, tuple[Any, Any]]] = []

    def batch(self) -> int:
        self._batches.append({})
        return len(self._batches) - 1

    def discard(self, batch: int) -> None:
        """Forget the record of ``batch``, the last opened (the loader had no batch left to give)."""
        if batch != len(self._batches) - 1:
            raise ValueError(f"only the last batch record can be discarded, not {batch}")
        self._batches.pop()

    @contextmanager
    def span(self, batch: int, stage: str, stream: Any = None) -> Iterator[None]:
        if not self.cuda:
            with self.host_span(batch, stage):
                yield
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        yield
        end.record(stream)
        self._add(batch, stage, (start, end))

    @contextmanager
    def host_span(self, batch: int, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        self._add(batch, stage, (started, time.perf_counter()))

    def _add(self, batch: int, stage: str, span: tuple[Any, Any]) -> None:
        if stage not in STAGES:
            raise ValueError(f"stage {stage!r}: use one of {', '.join(STAGES)}")
        if stage in self._batches[batch]:  # a stage met twice in one batch (groups of shapes): one span
            first = self._batches[batch][stage]
            self._batches[batch][stage] = (first[0], span[1])
        else:
            self._batches[batch][stage] = span

    @staticmethod
    def _ms(span: tuple[Any, Any]) -> float:
        start, end = span
        if isinstance(start, float):
            return (end - start) * 1000.0
        return float(start.elapsed_time(end))

    def steady_batch(self) -> int | None:
        """The batch the timeline shows: the middle one of those before the last (the first pays the
        start-up, the last may be short); None before any batch."""
        if not self._batches:
            return None
        return (len(self._batches) - 1) // 2 if len(self._batches) > 2 else 0

    def summary(self) -> dict[str, Any]:
        """``{"clock", "batches", "steady_batch", "timeline_ms", "total_ms"}``: the steady batch's
        milliseconds per stage and every batch's summed, stages in :data:`STAGES` order (only those
        met). Call once the device has finished (the caller's ``torch.cuda.synchronize``)."""
        steady = self.steady_batch()
        totals: dict[str, float] = {}
        for spans in self._batches:
            for stage, span in spans.items():
                totals[stage] = totals.get(stage, 0.0) + self._ms(span)
        timeline = {} if steady is None else {s: self._ms(span) for s, span in self._batches[steady].items()}
        order = {stage: n for n, stage in enumerate(STAGES)}
        return {"clock": "cuda events (read: host)" if self.cuda else "perf_counter",
                "batches": len(self._batches), "steady_batch": steady,
                "timeline_ms": {s: round(v, 3) for s, v in sorted(timeline.items(), key=lambda kv: order[kv[0]])},
                "total_ms": {s: round(v, 3) for s, v in sorted(totals.items(), key=lambda kv: order[kv[0]])}}
