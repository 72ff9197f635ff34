"""Launching data-parallel training on this machine (``vsbench abid train --nproc N``; a TrainJob's
nodes as local processes): what can be checked before any process starts, and the job's output
sorted so that a user reads the workers' own lines and their one-line error, not torchrun's
bookkeeping around it (a batch larger than the training set once printed 43 lines for one error).
torchrun's whole output is kept in a log file, which the last line names."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from vsbench.runtime.torchrun import TorchrunLines

# The file whose rows a task trains on: their number bounds the training set (missing or held-out
# images only take rows away), so a global batch above it fails on every rank, for sure.
TRAIN_ROWS = {"counting": "counting_train.json", "siamese": "obj_verification_train.json"}

def check_before_launch(task: str, tasks_dir: Path, profile: str, overrides: Mapping[str, Any],
                        world_size: int) -> None:
    """Refuse, in one line and before any process starts, what would stop every worker after its
    start-up (a minute on a busy machine): a bad profile or override, a missing task file, a global
    batch that the processes cannot split or that exceeds the training set. The workers check the
    exact training set again (images missing or held out make it smaller)."""
    from vsbench.abid.distributed import Distributed
    from vsbench.abid.profiles import get_profile
    from vsbench.io.inputs import read_json

    settings = get_profile(profile, **overrides)
    global_batch = settings.batch_size if task == "counting" else settings.batch_size // settings.pairs_per_row
    rows_file = tasks_dir / TRAIN_ROWS[task]
    rows = read_json(rows_file)
    Distributed(world_size=world_size).per_rank_batch(global_batch, len(rows), bound=f"the rows of {rows_file}")


def pipeline_problems(arguments: Mapping[str, Any], option: Callable[[str], str]) -> list[str]:
    """What is wrong with the ABID pipeline's ``arguments`` (its parameter names: ``source``,
    ``train_profile``, ``train_overrides``) that this machine can tell before the pipeline starts,
    one line each naming the option as ``option(parameter)`` spells it (``--train-profile`` for
    `abid run-local`, ``--arg train_profile`` for a submitted run).

    Why: these used to start the pipeline and end, minutes later, in a traceback of 35 lines and a
    FAILED run in MLflow; ``abid train`` refused the same values in one line (issue 48)."""
    from vsbench.abid.profiles import profile_problems

    problems = []
    source = str(arguments.get("source", "s3://aft-vbi-pds"))
    bucket = source.removeprefix("s3://").split("/", 1)[0]
    if not source.startswith("s3://"):
        hint = f"s3://{source.lstrip('/')}" if source and "://" not in source else "s3://BUCKET[/PREFIX]"
        problems.append(f"{option('source')} {source!r}: not an s3:// URI; write {hint}")
    elif not bucket:
        problems.append(f"{option('source')} {source!r}: names no bucket; write s3://BUCKET[/PREFIX]")
    problems += profile_problems(str(arguments.get("train_profile", "demo")), arguments.get("train_overrides", "{}"),
                                 profile_option=option("train_profile"), overrides_option=option("train_overrides"))
    return problems


class JobOutput:
    """Every line of a torchrun job goes to ``log``; the workers' lines also to ``echo``, except their
    ``error:`` lines, which each rank prints alike: those are kept, once each, for :meth:`failure`.
    torchrun's records, banner and post-mortem (its traceback, the failure table) go to the log only.
    Thread-safe: the nodes of a local TrainJob feed one instance from their reader threads."""

    def __init__(self, log: Path, echo: Callable[[str], None]) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log
        self._log: IO[str] = open(log, "w", encoding="utf-8")  # noqa: SIM115 - a log, grown as the job runs
        self._echo = echo
        self._lock = threading.Lock()
        self._torchrun = TorchrunLines()
        self.errors: list[str] = []  # the workers' distinct one-line errors, in order

    def feed(self, line: str, prefix: str = "") -> None:
        text = line.rstrip("\r\n")
        shown = f"[{prefix}] {text}" if prefix else text
        with self._lock:
            self._log.write(shown + "\n")
            self._log.flush()
            if self._torchrun.bookkeeping(text, prefix):
                return
            if text.startswith("error: "):
                if text not in self.errors:
                    self.errors.append(text)
                return
            if text.strip():
                self._echo(shown)

    def close(self) -> None:
        with self._lock:
            self._log.close()

    def failure(self, what: str) -> list[str]:
        """The lines a failed job ends with: each worker's distinct error, else ``what`` failed; the
        last names the log."""
        lines = list(self.errors) or [f"error: {what} failed"
                                      + (f" (a worker exited with {self.worker_exit})" if self.worker_exit else "")]
        lines[-1] += f" (torchrun's whole output: {self.log_path})"
        return lines

    @property
    def worker_exit(self) -> int | None:
        """The first failed worker's exit code, from torchrun's failure table."""
        return self._torchrun.worker_exit

    @property
    def exit_code(self) -> int:
        """2 when the workers stopped on a user's mistake (their exit code 2), else 1."""
        return 2 if self.worker_exit == 2 else 1


def run_logged(command: Sequence[str], output: JobOutput, env: Mapping[str, str] | None = None,
               prefix: str = "") -> int:
    """Run ``command`` (a torchrun), its stdout and stderr through ``output``; returns its exit code.
    Ctrl-C reaches torchrun too (same process group), which stops its workers: this waits for it."""
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace", env=dict(env) if env is not None else None, bufsize=1)
    try:
        pipe(process, output, prefix)
    finally:
        code = process.wait()
    return code


def pipe(process: subprocess.Popen[str], output: JobOutput, prefix: str = "") -> None:
    """Feed every line of ``process``'s output to ``output`` until it closes."""
    assert process.stdout is not None
    for line in process.stdout:
        output.feed(line, prefix)
