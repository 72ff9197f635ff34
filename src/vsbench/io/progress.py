"""Progress of long work: a live bar on a terminal, plain periodic lines anywhere else.

tqdm redraws its bar with carriage returns. On a terminal that is one line updating in place; in a
file, a pod's log or a pipe (``make demo > log``, ``kubectl logs``) every redraw stays: the demo's
log held 134 ``\\r`` frames from the generator, and a ``similarity run`` joined 10 frames into one
305-character line. So :func:`progress_bar` draws tqdm's bar only when its stream is a terminal;
otherwise it prints one plain line (under 100 columns) each time the work crosses another tenth of
its total, or every ``interval`` seconds when the total is unknown or the tenths are slow, and one
line when it ends: a reader of the log sees how far it got and how fast, and nothing to unpick.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol, TextIO, TypeVar

T = TypeVar("T")

PLAIN_INTERVAL_S = 30.0  # at most this long between two plain lines while work goes on
PLAIN_STEPS = 10  # a plain line at each tenth of the total
MAX_COLUMNS = 100


class Progress(Protocol):
    """What vsbench's long loops call on a bar: tqdm's own names, the subset in use."""

    def update(self, n: int = 1) -> Any: ...

    def set_postfix(self, **values: Any) -> Any: ...

    def close(self) -> Any: ...

    def __enter__(self) -> Progress: ...

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> Any: ...


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class PlainProgress:
    """tqdm's counting interface, written as plain lines: see the module's docstring.

    ``clock`` is injectable so that the lines a test sees do not depend on wall time."""

    def __init__(self, total: int | None, desc: str, unit: str, stream: TextIO, *,
                 interval: float = PLAIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total if total and total > 0 else None
        self.desc, self.unit, self.stream = desc, unit, stream
        self.interval, self._clock = interval, clock
        self.n = 0
        self._started = self._last = clock()
        self._step = 0  # the last tenth a line was printed for
        self._postfix = ""
        self._closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self._clock()
        step = self.n * PLAIN_STEPS // self.total if self.total else 0
        if (self.total and step > self._step and self.n < self.total) or now - self._last >= self.interval:
            self._step = max(step, self._step)
            self._write(now)

    def set_postfix(self, **values: Any) -> None:
        self._postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.n:
            self._write(self._clock(), final=True)

    def _write(self, now: float, *, final: bool = False) -> None:
        self._last = now
        elapsed = now - self._started
        done = f"{self.n:,}/{self.total:,} {self.unit}" if self.total else f"{self.n:,} {self.unit}"
        if self.total:
            done += f" ({100 * self.n // self.total}%)"
        rate = f", {self.n / elapsed:,.1f} {self.unit}/s" if elapsed > 0 else ""
        when = f", {'done in' if final else 'after'} {_duration(elapsed)}"
        line = f"{self.desc}: {done}{rate}{when}"
        if self._postfix:
            line += f", {self._postfix}"
        print(line[:MAX_COLUMNS], file=self.stream, flush=True)

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


class _Silent:
    """A bar that shows nothing (``disable``): the loops call it all the same."""

    def update(self, n: int = 1) -> None:
        return None

    def set_postfix(self, **values: Any) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        return None


def progress_bar(*, total: int | None, desc: str, unit: str, disable: bool = False,
                 stream: TextIO | None = None, leave: bool = True) -> Progress:
    """A bar for ``total`` items on ``stream`` (stderr): tqdm's on a terminal, plain lines elsewhere."""
    if disable:
        return _Silent()
    out = stream if stream is not None else sys.stderr
    if _is_terminal(out):
        from tqdm import tqdm  # deferred: only a terminal draws one

        return tqdm(total=total, desc=desc, unit=unit, file=out, leave=leave)
    return PlainProgress(total, desc, unit, out)


def progress_iter(items: Iterable[T], *, total: int | None, desc: str, unit: str, disable: bool = False,
                  stream: TextIO | None = None) -> Iterator[T]:
    """``items`` as they are, counted on a :func:`progress_bar`."""
    with progress_bar(total=total, desc=desc, unit=unit, disable=disable, stream=stream) as bar:
        for item in items:
            yield item
            bar.update(1)
