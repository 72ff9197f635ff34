"""vsbench.platform.progress.StepLog: kfp.local's output to a file, one line per step on the terminal,
the failed step's last lines kept; --verbose streams everything as before."""

from __future__ import annotations

import io
import logging
from contextlib import redirect_stdout
from pathlib import Path

from vsbench.platform.progress import StepLog

CYAN, RESET = "\x1b[96m", "\x1b[0m"


def _kfp_like(task: str, lines: list[str], status: str = "SUCCESS") -> None:
    """What kfp.local writes for a task: log lines on sys.stdout (its handler is made per task), then the
    step's own output printed line by line."""
    handler = logging.StreamHandler(__import__("sys").stdout)
    logger = logging.getLogger(f"fake-kfp-{task}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.info(f"Executing task {CYAN}'{task}'{RESET}")
    for line in lines:
        print("    " + line)
    logger.info(f"Task {CYAN}'{task}'{RESET} finished with status {status}")
    logger.removeHandler(handler)


def test_one_line_per_step_and_the_log_in_a_file(tmp_path: Path):
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "logs" / "run.log", ("abid-download", "embed-shard"), terminal=terminal)
    with redirect_stdout(sink):
        _kfp_like("open-tracking", ['{"executor": "json"}'])
        _kfp_like("abid-download", ["fetched 10 objects"] + [f"noise {i}" for i in range(50)])
        _kfp_like("embed-shard-2", ["embedded"])
    sink.close()
    shown = terminal.getvalue().splitlines()
    assert len(shown) == 3
    assert "open-tracking" in shown[0] and shown[0].endswith("ok") and "[  0/2]" in shown[0]
    assert "abid-download" in shown[1] and "[  1/2]" in shown[1] and " s " in shown[1]
    assert "embed-shard-2" in shown[2] and "[  2/2]" in shown[2]
    log = (tmp_path / "logs" / "run.log").read_text()
    assert "noise 49" in log and '{"executor": "json"}' in log and "Executing task" in log
    assert sink.failed_task == ""


def test_a_failed_step_keeps_its_last_lines(tmp_path: Path):
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "run.log", ("score",), terminal=terminal)
    with redirect_stdout(sink):
        _kfp_like("score", [f"line {i}" for i in range(100)] + ["ValueError: bad input"], status="FAILURE")
    sink.close()
    assert sink.failed_task == "score"
    tail = sink.tail()
    assert tail[-1].strip() == "ValueError: bad input" and len(tail) == 30
    assert "FAILURE" in terminal.getvalue()


def test_verbose_streams_everything(tmp_path: Path):
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "run.log", ("score",), verbose=True, terminal=terminal)
    with redirect_stdout(sink):
        _kfp_like("score", ["step output"])
    sink.close()
    assert "step output" in terminal.getvalue() and "Executing task" in terminal.getvalue()
    assert terminal.getvalue() == (tmp_path / "run.log").read_text()


def test_a_task_cut_short_is_shown_where_it_stopped(tmp_path: Path):
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "run.log", ("index",), terminal=terminal)
    with redirect_stdout(sink):
        print("Executing task 'index'")
        print("half a line", end="")
    sink.close()
    assert "INTERRUPTED" in terminal.getvalue()
    assert sink.tail("index") == ["half a line"]
