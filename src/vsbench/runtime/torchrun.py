"""Which lines of a torchrun's output are torchrun's own, not its workers'.

torchrun writes glog-style records (``W1126 23:34:26.985000 12533 torch/...py:1028] ...``), an
OMP_NUM_THREADS banner, and, once a worker failed, a post-mortem (its traceback and a failure
table): 40 to 70 lines around the one line a vsbench worker printed about why it stopped. Both
``abid train --nproc N`` (:mod:`vsbench.abid.launch`) and a TrainJob's nodes
(:mod:`vsbench.platform.trainjob_logs`) keep those lines in their logs and off the terminal.
"""

from __future__ import annotations

import re

_TORCH_RECORD = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\]")
_POST_MORTEM = ("failed (exitcode", "Sending process", "ChildFailedError")
_EXIT_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


class TorchrunLines:
    """Classifies a torchrun's lines as they come (stateful: from the record that a worker failed on,
    everything from that torchrun is post-mortem). ``prefix`` tells the torchruns of several nodes
    apart. Not thread-safe: callers feed it under their own lock."""

    def __init__(self) -> None:
        self._post_mortem: set[str] = set()  # the prefixes (nodes) whose torchrun is reporting a failure
        self._root_cause = False
        self.worker_exit: int | None = None  # the first failed worker's exit code, from torchrun's table

    def bookkeeping(self, text: str, prefix: str = "") -> bool:
        """Whether ``text`` is torchrun's own line (for the log only)."""
        if prefix in self._post_mortem:
            if "Root Cause" in text:
                self._root_cause = True
            found = _EXIT_CODE.match(text)
            if found and self._root_cause and self.worker_exit is None:
                self.worker_exit = int(found.group(1))
            return True
        if _TORCH_RECORD.match(text):
            if any(mark in text for mark in _POST_MORTEM):  # its traceback and failure table follow
                self._post_mortem.add(prefix)
            return True
        stripped = text.strip()
        return (bool(stripped) and set(stripped) == {"*"}) or stripped.startswith("Setting OMP_NUM_THREADS")
