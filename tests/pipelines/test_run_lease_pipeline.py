"""Two pipeline runs into one ``--out`` with ``--runner subprocess`` (issue 46): the first holds the
folder from its first step to its last, so a second run is refused at once or, with
VSBENCH_LOCK_WAIT_S, waits for the whole first run, and the first run's table is its own.

On main before issue 46 the command held nothing between kfp.local's steps: the waiting run slipped
in between two of them and rewrote the features (the first run then failed, or scored the second
run's features). The inline runner's twin is tests/integration/test_input_changes.py; the container
runner's steps get the lease through the same environment (tests/unit/test_run_lease.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.integration.tiny_model import scripted_model
from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.cli.app import app

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")]


def _args(root: Path, out: Path, model: Path, *extra: str) -> list[str]:
    return ["similarity", "run", "--benchmark", "disc", "--root", str(root), "--out", str(out), "--model",
            "torchscript", "--model-options", f'{{"path": "{model}"}}', "--codecs", "Flat", "--batch-size", "8",
            "--no-track", "--device", "cpu", *extra]


def _rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Flat,")]


def test_a_second_run_waits_for_the_whole_subprocess_run_and_the_first_table_is_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    monkeypatch.delenv("VSBENCH_LOCK_WAIT_S", raising=False)
    root = tmp_path / "disc"
    generate_disc(root, references=12, queries=8, train=12, seed=3)
    models = {name: scripted_model(tmp_path / f"{name}.pt", seed) for name, seed in (("a", 0), ("b", 1))}
    result = CliRunner().invoke(app, _args(root, tmp_path / "fresh", models["a"]))  # the first run's own table
    assert result.exit_code == 0, result.output[-2000:]
    fresh = _rows(result.output)
    assert fresh

    out = tmp_path / "out"
    # Unbuffered, so each line reaches the pipe when the first run prints it, not at its exit.
    first = subprocess.Popen([sys.executable, "-m", "vsbench", *_args(root, out, models["a"], "--runner", "subprocess")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    # Its output is read as it comes (a full pipe would stop it mid-run, seen under pytest-xdist), each
    # line timed when it arrives. Its last line ("ran in: ...") is printed while it still holds OUT.
    # Why not the process's exit: interpreter shutdown after the lease is released (torch, kfp and
    # MLflow loaded) took longer than the whole waited run under pytest-xdist, which is no fault.
    lines: list[tuple[float, str]] = []

    def follow() -> None:
        assert first.stdout is not None
        for line in first.stdout:
            lines.append((time.monotonic(), line))

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    # The moment the waited run's own work starts: after it got OUT, and after its checks.
    from vsbench.steps import similarity as steps

    started: list[float] = []
    real_run_inline = steps.run_inline

    def timed_run_inline(*args, **kwargs):
        started.append(time.monotonic())
        return real_run_inline(*args, **kwargs)

    monkeypatch.setattr(steps, "run_inline", timed_run_inline)
    try:
        deadline = time.monotonic() + 120
        while not (out / "_kfp").exists():  # kfp.local has started: the pipeline's steps are under way
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.1)
        refused = CliRunner().invoke(app, _args(root, out, models["b"]))
        errors = [line for line in refused.output.splitlines() if line.startswith("error:")]
        assert refused.exit_code == 2 and len(errors) == 1, refused.output[-2000:]
        assert "a pipeline run (for all its steps)" in errors[0] and str(out) in errors[0]
        waited = CliRunner().invoke(app, _args(root, out, models["b"]), env={"VSBENCH_LOCK_WAIT_S": "600"})
        first.wait(timeout=120)
        follower.join(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
        follower.join(timeout=30)
    output = "".join(line for _, line in lines)
    assert first.returncode == 0, output[-3000:]
    last = [at for at, line in lines if line.startswith("ran in:")]
    assert len(last) == 1 and len(started) == 1, output[-3000:]
    assert last[0] <= started[0], "the second run started its work before the first run had printed its table"
    assert _rows(output) == fresh, output[-3000:]  # scored on its own features only
    assert waited.exit_code == 0, waited.output[-2000:]
    assert _rows(waited.output) and _rows(waited.output) != fresh  # then the second ran, on its own model
