"""One live line per pipeline step while kfp.local runs, its executor logs in a file.

kfp.local writes everything to ``sys.stdout``: its logger's handler is made on ``sys.stdout`` for
each task (``kfp.local.logging_utils.local_logger_context``), and the subprocess and container
handlers ``print`` every line a step writes. Run under ``contextlib.redirect_stdout`` of a
:class:`StepLog`, all of it lands in the log file instead, and the task-boundary lines kfp.local
logs ("Executing task 'x'", "Task 'x' finished with status SUCCESS") drive one line per step on
the real terminal: name, progress (steps done of the steps expected) and time. With ``verbose``
the log is streamed as well, as before. A failed step's last lines are kept for the error report.

A step's line is printed once the step is over: its ParallelFor iterations ("embed-shard",
"embed-shard-2", ...) are one line with their count and their wall time (kfp.local runs them at once), and the helper tasks
around the steps (tracking, shard lists) print no line of their own: their time is named on the
line of the step they ran next to. A failed task of any kind gets its own line at once.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
TAIL_LINES = 30


@dataclass
class _StepLine:
    """A main step being gathered: its tasks (loop iterations) and the helper tasks beside it.

    kfp.local runs a ParallelFor's iterations at once, under one task name, and its log can lose
    one of their "finished" lines; so tasks are counted as they start, and the step's time is the
    wall time from its first start to its last finish (or to the next step's start)."""

    step: str
    started: float
    ended: float = 0.0
    tasks: int = 0
    helpers: list[tuple[str, float]] = field(default_factory=list)


class StepLog(io.TextIOBase):
    """A text sink for kfp.local's stdout: the log file, the live step lines, the failure tail.

    ``steps`` are the pipeline's main steps (for "3/7"); tasks outside them (tracking, shard
    lists) are folded into a step's line and do not count; with no ``steps`` every task is a step.
    Thread-safe: a ticker refreshes the live line."""

    def __init__(self, log_path: Path, steps: tuple[str, ...] = (), *, verbose: bool = False,
                 terminal: TextIO | None = None) -> None:
        super().__init__()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.steps = steps
        self.verbose = verbose
        self._terminal = terminal or sys.stdout
        self._live = (not verbose) and bool(getattr(self._terminal, "isatty", lambda: False)())
        self._file = open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in close()
        self._lock = threading.RLock()
        self._partial = ""
        self._task = ""
        self._task_started = 0.0
        self._tails: dict[str, deque[str]] = {}
        self._done: set[str] = set()
        self.failed_task = ""
        self.finished: list[tuple[str, str, float]] = []  # (task, status, seconds)
        self._pending: _StepLine | None = None  # the step whose line is not printed yet
        self._waiting: list[tuple[str, float]] = []  # helper tasks seen before any step
        self._helper_started: dict[str, float] = {}
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self._live:
            self._ticker = threading.Thread(target=self._tick, name="vsbench-step-line", daemon=True)
            self._ticker.start()

    # -- file protocol -------------------------------------------------------------------------------
    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        with self._lock:
            if self._file.closed:  # a late writer (a handler kept past the run): straight to the terminal,
                if not getattr(self._terminal, "closed", False):  # unless that is gone too (an earlier
                    self._terminal.write(text)  # CliRunner's stream): nothing to show it on, no logging error
                return len(text)
            self._file.write(text)
            if self.verbose:
                self._terminal.write(text)
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                self._line(_ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.flush()
            if self.verbose:
                self._terminal.flush()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            if self._partial:
                self._line(_ANSI.sub("", self._partial))
                self._partial = ""
            if self._task:  # a task that never finished (the runner raised): show where it stopped
                self._finish(self._task, "INTERRUPTED")
            self._flush()
            for task, seconds in self._waiting:  # helpers with no step to name them (a run cut short)
                self._emit_line(task, seconds, "ok")
            self._waiting = []
            if not self._file.closed:
                self._file.close()
        super().close()

    # -- parsing and display -------------------------------------------------------------------------
    def _line(self, line: str) -> None:
        started = _STARTED.search(line)
        if started:
            self._task, self._task_started = started.group(1), time.monotonic()
            base = self._base(self._task)
            if self._is_step(base):
                if self._pending is not None and base != self._pending.step:
                    self._flush()
                if self._pending is None:
                    self._pending, self._waiting = _StepLine(base, self._task_started, helpers=self._waiting), []
                self._pending.tasks += 1
            else:
                self._helper_started[self._task] = self._task_started
            self._tails[self._task] = deque(maxlen=TAIL_LINES)
            self._show()
            return
        finished = _FINISHED.search(line)
        if finished:
            self._finish(finished.group(1), finished.group(2))
            return
        if self._task and line.strip():
            self._tails[self._task].append(line.rstrip())
            if self._live:
                self._show()

    def _base(self, task: str) -> str:
        """A task's step name without kfp.local's loop suffix ("embed-shard" for "embed-shard-2")."""
        for step in self.steps:
            if task == step or (task.startswith(step + "-") and task[len(step) + 1:].isdigit()):
                return step
        return task

    def _progress(self) -> str:
        return f"{len(self._done)}/{len(self.steps)}" if self.steps else f"{len(self.finished)}"

    def _is_step(self, base: str) -> bool:
        return not self.steps or base in self.steps

    def _finish(self, task: str, status: str) -> None:
        now = time.monotonic()
        base = self._base(task)
        started = self._helper_started.pop(task, None) if not self._is_step(base) else None
        seconds = now - (started if started is not None else self._task_started)
        self.finished.append((task, status, seconds))
        self._task = ""
        if status != "SUCCESS":
            self.failed_task = self.failed_task or task
            if self._pending is not None and self._pending.step == base:
                self._done.add(base)  # it ran; its line is the failure's, not "ok"
                self._pending = None
            self._flush()
            self._emit_line(task, seconds, status)
            return
        if not self._is_step(base):
            (self._pending.helpers if self._pending is not None else self._waiting).append((task, seconds))
            return
        if self._pending is not None and self._pending.step == base:
            self._pending.ended = now

    def _flush(self) -> None:
        """Print the gathered step's one line."""
        line, self._pending = self._pending, None
        if line is None:
            return
        self._done.add(line.step)
        extra = f"  ({line.tasks} tasks)" if line.tasks > 1 else ""
        if line.helpers:
            extra += "  (+ " + ", ".join(f"{task} {seconds:.1f} s" for task, seconds in line.helpers) + ")"
        self._emit_line(line.step, (line.ended or time.monotonic()) - line.started, "ok", extra)

    def _emit_line(self, name: str, seconds: float, mark: str, extra: str = "") -> None:
        if not self.verbose:
            self._emit(f"  [{self._progress():>5}] {name:<32} {seconds:7.1f} s  {mark}{extra}", final=True)

    def _show(self) -> None:
        if not self._live or not self._task:
            return
        seconds = time.monotonic() - self._task_started
        last = self._tails[self._task][-1].split("\r")[-1].strip() if self._tails[self._task] else ""
        self._emit(f"  [{self._progress():>5}] {self._task:<32} {seconds:7.1f} s  running  {last}"[:150], final=False)

    def _emit(self, text: str, *, final: bool) -> None:
        if self._live:
            self._terminal.write("\r\x1b[2K" + text + ("\n" if final else ""))
        elif final:
            self._terminal.write(text + "\n")
        self._terminal.flush()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self._show()

    def tail(self, task: str | None = None) -> list[str]:
        """The last lines a task wrote (the failed one by default)."""
        with self._lock:
            return list(self._tails.get(task or self.failed_task or self._task, ()))


@contextlib.contextmanager
def root_logging_to(sink: StepLog) -> Iterator[None]:
    """The root logger writes to ``sink`` for the block, and is left as it was found after it.

    Why: kfp.local changes the root logger from several threads at once (each task's
    ``local_logger_context`` saves the handlers, sets its own on ``sys.stdout`` and restores what it
    saved; a ParallelFor's tasks interleave), so a run can leave the root at INFO with a handler on a
    stream that is later closed, and kfp.local logs "Cleaned up workspace" at the end of every run
    outside any such context. That line, written to an earlier command's closed stream, printed
    "--- Logging error --- ValueError: I/O operation on closed file" and its traceback into the next
    command's output (a flaky test on a loaded machine; a user's terminal could get the same). Here
    the root's only handler during the run is one on ``sink`` (the log file), every line kfp.local
    logs lands there, and afterwards the root gets back its own handlers and level, less any whose
    stream has been closed meanwhile (it can only raise a logging error)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    ours = logging.StreamHandler(sink)
    root.handlers[:] = [ours]
    try:
        yield
    finally:
        root.handlers[:] = [h for h in handlers if not getattr(getattr(h, "stream", None), "closed", False)]
        root.setLevel(level)
        ours.close()
