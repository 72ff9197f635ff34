"""Start-up and steady-state throughput, measured the same way for the embed step and training.

Why two figures: one images/s over a whole step mixes a fixed cost (building the model, starting
DataLoader workers, compiling, the first batch's cuDNN autotuning) with the rate that decides how
long a large set takes. Issue 40 saw the same training report 729 images/s while its steady epochs
ran at ~3,800. So:

* ``startup_seconds``: from :meth:`Throughput.start` (before the model is built) to the end of the
  first batch out of the model;
* ``steady_images_per_second``: the images after the first batch over the seconds after it, timed
  only while :meth:`running` (training pauses it for validation and checkpoints).

The clock is read only at those marks (``clock``, a module attribute tests replace), so the rate is
exactly what a stopwatch started at the first batch's end and stopped at the last batch's end sees.
On CUDA the caller synchronizes before each mark: an asynchronous kernel has not finished when
Python returns from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from vsbench.io.terminal import wrap_lines

clock: Callable[[], float] = time.perf_counter


def _now() -> float:
    return clock()


@dataclass
class Throughput:
    """Marks of one run of batches; see the module docstring for what each figure means."""

    started: float = field(default_factory=_now)
    startup_seconds: float | None = None
    images: int = 0  # after the first batch
    steady_seconds: float = 0.0  # after the first batch, while running
    _since: float | None = None  # start of the current running stretch after the first batch

    def batch_done(self, images: int) -> None:
        """One batch came out of the model (its results computed: synchronize first on CUDA)."""
        now = _now()
        if self.startup_seconds is None:
            self.startup_seconds = now - self.started
            self._since = now
            return
        self.images += images
        if self._since is not None:
            self.steady_seconds += now - self._since
        self._since = now

    def pause(self) -> None:
        """Stop the stopwatch (validation, checkpoints, a new epoch's loader): not training time."""
        if self._since is not None:
            self.steady_seconds += _now() - self._since
            self._since = None

    def resume(self) -> None:
        """Start it again where batches flow again (a new epoch's loop)."""
        if self.startup_seconds is not None and self._since is None:
            self._since = _now()

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    @property
    def steady_images_per_second(self) -> float | None:
        """Images after the first batch per second after it; None before two batches."""
        return self.images / self.steady_seconds if self.images and self.steady_seconds > 0 else None

    def as_dict(self) -> dict[str, float | None]:
        """The two figures for a manifest or a summary, rounded for reading."""
        rate = self.steady_images_per_second
        return {"startup_seconds": None if self.startup_seconds is None else round(self.startup_seconds, 3),
                "images_per_second_steady": None if rate is None else round(rate, 2)}


def startup_line(stem: str, images: int, startup_seconds: float, steady: float | None) -> str:
    """What a shard's embedding says when done: its start-up (model build, workers, first batch), then
    its steady rate; within 100 columns, wrapped at a word (the one line ran to 108-112, issue 57)."""
    rate = f"{steady:,.0f} images/s" if steady else "one batch"
    return wrap_lines(f"[vsbench] {stem}: {images:,} images, start-up {startup_seconds:.1f} s "
                      f"(model, workers, first batch), then {rate}")
