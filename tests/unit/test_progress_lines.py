"""Progress written to a file or a pod's log is plain lines; a terminal gets tqdm's live bar.

Issue 57: `make demo`'s log held 134 carriage-return frames from the generator, and each
`similarity run` joined 10 frames into 305-character lines. These tests read what a log would hold.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vsbench.io import progress
from vsbench.io.progress import PlainProgress, progress_bar, progress_iter


class _Clock:
    """A clock the test moves by hand: no line depends on wall time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_plain_line_per_tenth_and_one_at_the_end_never_a_carriage_return() -> None:
    log, clock = io.StringIO(), _Clock()
    bar = PlainProgress(1000, "resize", "img", log, clock=clock)
    with bar:
        for _ in range(1000):
            clock.now += 0.001  # one second in all: the interval never fires
            bar.update(1)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert len(lines) == 10  # 10%, 20%, ..., 90%, then the end
    assert lines[0].startswith("resize: 100/1,000 img (10%), ")
    assert lines[-1].startswith("resize: 1,000/1,000 img (100%), ") and "done in 1 s" in lines[-1]
    assert all(len(line) <= 100 for line in lines)


def test_slow_work_still_says_something_every_interval_and_an_unknown_total_counts() -> None:
    log, clock = io.StringIO(), _Clock()
    with PlainProgress(None, "download", "obj", log, interval=30, clock=clock) as bar:
        for _ in range(10):
            clock.now += 10
            bar.update(5)
    lines = log.getvalue().splitlines()
    # 100 s: a line after 30, 60 and 90 s, then the end
    assert [line.split(",")[0] for line in lines] == ["download: 15 obj", "download: 30 obj", "download: 45 obj",
                                                       "download: 50 obj"]
    assert lines[1].endswith("after 1 min 00 s") and "0.5 obj/s" in lines[1]


def test_the_postfix_is_kept_and_a_long_line_is_held_to_100_columns() -> None:
    log, clock = io.StringIO(), _Clock()
    with PlainProgress(4, "epoch 1/2", "batch", log, clock=clock) as bar:
        for _ in range(4):
            clock.now += 1
            bar.update(1)
            bar.set_postfix(loss="0.693", note="x" * 200)
    lines = log.getvalue().splitlines()
    assert len(lines) == 4 and "loss=0.693" in lines[-1]
    assert max(len(line) for line in lines) == 100


def test_nothing_is_written_for_no_work_or_a_disabled_bar() -> None:
    log = io.StringIO()
    with progress_bar(total=10, desc="x", unit="img", stream=log):
        pass
    with progress_bar(total=10, desc="x", unit="img", stream=log, disable=True) as bar:
        bar.update(10)
    assert log.getvalue() == ""


def test_only_a_terminal_gets_the_live_bar() -> None:
    terminal, log = _Terminal(), io.StringIO()
    tty_bar = progress_bar(total=3, desc="embed", unit="img", stream=terminal)
    file_bar = progress_bar(total=3, desc="embed", unit="img", stream=log)
    for bar in (tty_bar, file_bar):
        bar.update(3)
        bar.close()
    assert "\r" in terminal.getvalue()  # tqdm redraws in place
    assert isinstance(file_bar, PlainProgress) and "\r" not in log.getvalue()


def test_progress_iter_yields_every_item_and_counts_them() -> None:
    log = io.StringIO()
    assert list(progress_iter(range(20), total=20, desc="metadata", unit="file", stream=log)) == list(range(20))
    assert log.getvalue().splitlines()[-1].startswith("metadata: 20/20 file (100%)")


def test_no_long_step_draws_tqdm_itself() -> None:
    """Every bar goes through vsbench.io.progress: a module calling tqdm would put \\r back in logs."""
    src = Path(progress.__file__).resolve().parents[1]
    own = Path(progress.__file__).resolve()
    callers = [str(path.relative_to(src)) for path in sorted(src.rglob("*.py"))
               if path != own and any(words in path.read_text() for words in ("import tqdm", "from tqdm"))]
    assert callers == []


@pytest.mark.slow
def test_the_generator_writes_plain_lines_into_a_log(tmp_path: Path) -> None:
    """`vsbench synth` (the demo's first step) with stderr a file: lines, no frames."""
    log = tmp_path / "log"
    with log.open("w") as sink:
        subprocess.run([sys.executable, "-m", "vsbench", "synth", "abid", "--out", str(tmp_path / "data"), "--bins", "40"],
                       stdout=sink, stderr=sink, check=True, env={**os.environ, "COLUMNS": "100"}, timeout=600)
    text = log.read_text()
    assert "\r" not in text
    assert "synthetic ABID: 40/40 bin (100%)" in text
