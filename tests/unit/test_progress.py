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
        _kfp_like("shard-list", ["[0, 1]"])
        _kfp_like("abid-download", ["fetched 10 objects"] + [f"noise {i}" for i in range(50)])
        _kfp_like("shard-list-2", ["[0, 1]"])
        _kfp_like("embed-shard", ["embedded"])
        _kfp_like("embed-shard-2", ["embedded"])
        _kfp_like("close-tracking", ["closed"])
    sink.close()
    shown = terminal.getvalue().splitlines()
    assert len(shown) == 2, shown  # one line per step: helpers and loop iterations folded in
    assert shown[0].startswith("  [  1/2] abid-download") and " s  ok" in shown[0]
    assert "(+ open-tracking " in shown[0] and ", shard-list " in shown[0]
    assert shown[1].startswith("  [  2/2] embed-shard ") and "(2 tasks)" in shown[1]
    assert "shard-list-2 " in shown[0] and "close-tracking " in shown[1]  # named beside the step before them
    log = (tmp_path / "logs" / "run.log").read_text()
    assert "noise 49" in log and '{"executor": "json"}' in log and "Executing task" in log
    assert sink.failed_task == ""
    assert [task for task, _, _ in sink.finished] == ["open-tracking", "shard-list", "abid-download", "shard-list-2",
                                                      "embed-shard", "embed-shard-2", "close-tracking"]


def test_a_failed_helper_gets_its_own_line(tmp_path: Path):
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "run.log", ("abid-download",), terminal=terminal)
    with redirect_stdout(sink):
        _kfp_like("abid-download", ["ok"])
        _kfp_like("close-tracking", ["boom"], status="FAILURE")
    sink.close()
    shown = terminal.getvalue().splitlines()
    assert len(shown) == 2 and "abid-download" in shown[0]
    assert "close-tracking" in shown[1] and shown[1].endswith("FAILURE") and sink.failed_task == "close-tracking"


def test_without_declared_steps_every_task_is_a_line(tmp_path: Path):
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "run.log", (), terminal=terminal)
    with redirect_stdout(sink):
        _kfp_like("a", ["x"])
        _kfp_like("b", ["y"])
    sink.close()
    assert [line.split()[2] for line in terminal.getvalue().splitlines()] == ["a", "b"]


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


def test_loop_iterations_run_at_once_are_one_line_even_when_a_finish_line_is_lost(tmp_path: Path):
    """kfp.local runs a ParallelFor's iterations together under one name; its log can drop one of
    their "finished" lines. The step is still one line, with its task count and wall time."""
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "run.log", ("abid-download", "abid-prepare"), terminal=terminal)
    with redirect_stdout(sink):
        print("Executing task 'abid-download'")
        print("Executing task 'abid-download'")
        print("Task 'abid-download' finished with status SUCCESS")  # the other one's line is lost
        _kfp_like("abid-prepare", ["split"])
    sink.close()
    shown = terminal.getvalue().splitlines()
    assert len(shown) == 2 and "(2 tasks)" in shown[0] and shown[0].startswith("  [  1/2] abid-download")
    assert shown[1].startswith("  [  2/2] abid-prepare")


def test_a_failed_step_is_one_failure_line_not_also_ok(tmp_path: Path):
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "run.log", ("index", "score"), terminal=terminal)
    with redirect_stdout(sink):
        _kfp_like("index", ["built"])
        _kfp_like("score", ["ValueError: bad"], status="FAILURE")
    sink.close()
    shown = terminal.getvalue().splitlines()
    assert len(shown) == 2 and shown[0].endswith("ok") and "index" in shown[0]
    assert "score" in shown[1] and shown[1].endswith("FAILURE") and sink.failed_task == "score"


def test_a_late_line_after_the_run_and_its_terminal_closed_is_dropped_quietly(tmp_path: Path) -> None:
    """kfp.local's logging handler outlives the run: a line it writes after the log file closed goes
    to the terminal, and when that is closed too (an earlier CliRunner's stream), nowhere: never a
    "--- Logging error ---" traceback in the next command's output."""
    terminal = io.StringIO()
    sink = StepLog(tmp_path / "logs" / "run.log", terminal=terminal)
    sink.close()
    assert sink.write("late\n") == 5 and terminal.getvalue().endswith("late\n")
    terminal.close()
    assert sink.write("later\n") == 6


def test_kfp_locals_closing_log_line_never_reaches_a_closed_stream(tmp_path: Path, capsys) -> None:
    """The flaky `similarity run --runner subprocess` test, made deterministic (issue 39): an earlier
    command left the root logger at INFO with a handler on its own stream, now closed (kfp.local's
    tasks interleave their ``local_logger_context`` and can leave exactly that). kfp.local's last line,
    "Cleaned up workspace", is logged on the root outside any context of its own: it must land in the
    run's log, and neither it nor a later line may print "--- Logging error ---"."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from kfp.local.logging_utils import local_logger_context

    from vsbench.platform.progress import root_logging_to

    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    earlier = io.StringIO()
    root.addHandler(logging.StreamHandler(earlier))
    root.setLevel(logging.INFO)
    earlier.close()  # the earlier command's CliRunner stream
    try:
        sink = StepLog(tmp_path / "logs" / "run.log", terminal=io.StringIO())
        with redirect_stdout(sink), root_logging_to(sink):
            def task(number: int) -> None:  # kfp.local's threads, each in its own logger context
                with local_logger_context():
                    logging.info("Executing task 'embed-shard-%d'", number)
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(task, range(8)))
            logging.info("Cleaned up workspace: /tmp/x")  # kfp.local's pipeline_orchestrator, at the end
        sink.close()
        logging.info("a later line")
        assert "Logging error" not in capsys.readouterr().err
        assert "Cleaned up workspace" in (tmp_path / "logs" / "run.log").read_text()
        assert root.handlers == [h for h in saved_handlers] and root.level == logging.INFO  # the closed one dropped
        assert sys.stdout is not sink
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
