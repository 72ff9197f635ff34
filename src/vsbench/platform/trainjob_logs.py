"""A TrainJob's node logs, and the one line that says why a job failed.

Every node's lines are echoed with the node's name (the terminal, or the pipeline step's log), are
written whole to one file per node under the run folder, and their last lines are kept (a bounded
number) so that a failed job ends naming the node that failed *first* with that node's own error:
when one node stops, the others fail too, with what is only the consequence (a peer that closed
the connection), and the line must not send the user after that one.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from vsbench.runtime.torchrun import TorchrunLines

TAIL_LINES = 200  # per node, kept for the failure's line (the whole log is in the node's file)
_ERROR_PREFIX = "error: "  # how a vsbench command's one-line error starts (vsbench.cli.common)


class NodeLogs:
    """The nodes' logs of one job (thread-safe: one reader thread per node writes here)."""

    def __init__(self, folder: Path, nodes: int, echo: Callable[[str], None]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._echo = echo
        self._lock = threading.Lock()
        self._files: dict[str, IO[str]] = {}
        self._tails: dict[str, deque[str]] = {}
        self._torchrun = TorchrunLines()
        try:
            for rank in range(nodes):
                step = f"node-{rank}"
                self._files[step] = (folder / f"{step}.log").open("a", encoding="utf-8", errors="replace")
                self._tails[step] = deque(maxlen=TAIL_LINES)
        except BaseException:
            self.close()
            raise

    def line(self, step: str, text: str) -> None:
        """One line of ``step``'s output: to its file and its tail; to the terminal unless it is
        torchrun's own bookkeeping or the node's one-line error (the job's last line says that one)."""
        with self._lock:
            file = self._files.get(step)
            if file is not None and not file.closed:
                file.write(text + "\n")
                file.flush()
            self._tails.setdefault(step, deque(maxlen=TAIL_LINES)).append(text)
            quiet = self._torchrun.bookkeeping(text, step) or text.startswith(_ERROR_PREFIX) or not text.strip()
        if not quiet:
            self._echo(f"[{step}] {text}")

    def own_error(self, step: str) -> str:
        """The last one-line error ``step``'s vsbench printed ("" when it printed none: killed, say)."""
        with self._lock:
            tail = list(self._tails.get(step, ()))
        for text in reversed(tail):
            if text.startswith(_ERROR_PREFIX):
                return text[len(_ERROR_PREFIX):].strip()
        return ""

    def close(self) -> None:
        with self._lock:
            for file in self._files.values():
                file.close()

    def __enter__(self) -> NodeLogs:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class NodeFailure:
    """A node that failed: its exit code and when it ended, where the engine says."""

    step: str
    code: int | None = None
    ended_at: float | None = None  # seconds on one clock for all nodes of the job; None: not known

    def describe(self) -> str:
        if self.code is None:
            return self.step
        return f"{self.step} (exit code {self.code}{', killed' if self.code in (137, 143) else ''})"


def first_failures(failures: list[NodeFailure], logs: NodeLogs) -> list[NodeFailure]:
    """The failures, the first one first: by when each node ended where the engine says; else a
    node that printed an error of its own before one that only failed with the others."""
    return sorted(failures, key=lambda f: (f.ended_at is None, f.ended_at or 0.0, not logs.own_error(f.step),
                                           f.step))


def failure_line(name: str, failures: list[NodeFailure], logs: NodeLogs, resume: str) -> str:
    """The job's last line: the first node to fail and its own error, the others after it, where
    every node's log is, and what a re-run will resume from (``resume``)."""
    ordered = first_failures(failures, logs) or [NodeFailure("a node")]
    first, after = ordered[0], ordered[1:]
    own = logs.own_error(first.step)
    text = f"TrainJob {name} failed: {first.describe()} failed first{f': {own}' if own else ''}"
    if after:
        text += f"; then {', '.join(f.describe() for f in after)}"
    return f"{text}; each node's log is in {logs.folder}/; {resume}"
