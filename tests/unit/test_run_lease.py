"""One run, one holder (issue 46): a pipeline run holds its folders from its first step to its last.

Locally (``--runner subprocess`` or ``container``, ``abid run-local``) the command holds the folder
lock for the whole run and admits only its own steps, by the lease token they inherit; on a cluster
a lease file names the KFP run, each step checks and renews it, the exit handler releases it. A
busy folder is refused before any heavy import. On main before issue 46 nothing held the folder
between the steps: a second run slipped in between them (tests/pipelines/test_run_lease_pipeline.py
runs that end to end).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.locking import held_elsewhere
from vsbench.io import locks
from vsbench.io.locks import (
    LEASE_ENV,
    LEASE_FILE,
    OutputBusy,
    claim_lease,
    folder_lease,
    leased_folders,
    output_lock,
    release_lease,
    run_lease,
    step_lock,
)

HOLD_RUN = """
import sys, time
from vsbench.io.locks import run_lease
with run_lease(sys.argv[1:]) as token:
    print(token, flush=True)
    time.sleep(float(__import__("os").environ.get("HOLD_S", "120")))
    print("ending", flush=True)  # the run's last words, while it still holds its folders
"""


def _run_holder(*folders: Path, hold_s: float = 120) -> tuple[subprocess.Popen[str], str]:
    """A process holding ``folders`` as a pipeline run does, and its lease token."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_RUN, *map(str, folders)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "HOLD_S": str(hold_s)})
    assert proc.stdout is not None
    token = proc.stdout.readline().strip()
    assert token, "the holder did not start"
    return proc, token


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_run_admits_its_own_steps_and_refuses_every_other_process(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    proc, token = _run_holder(out)
    try:
        # Another process (no token, or another run's): refused in one line naming the run.
        for other in ("", "someone-elses-token"):
            monkeypatch.setenv(LEASE_ENV, other)
            with pytest.raises(OutputBusy, match=f"a pipeline run \\(for all its steps\\): pid {proc.pid}") as caught, \
                    step_lock(out, "embed-shard-0-of-1"):
                pass
            assert "\n" not in str(caught.value) and str(out) in str(caught.value)
            with pytest.raises(OutputBusy), output_lock(out):
                pass
        # The run's own steps go ahead, one step per unit among them.
        monkeypatch.setenv(LEASE_ENV, token)
        with step_lock(out, "embed-shard-0-of-2"), step_lock(out, "embed-shard-1-of-2"):
            pass
        with held_elsewhere(step_lock(out, "score")):
            with pytest.raises(OutputBusy, match=r"\(score\)"), step_lock(out, "score"):
                pass
            with step_lock(out, "search-task-0-of-1"):  # another unit of the run, beside it
                pass
            # A step of the run that writes the whole folder waits for the run's other steps.
            with pytest.raises(OutputBusy), output_lock(out):
                pass
        with output_lock(out):  # alone among the run's steps: admitted
            pass
    finally:
        _stop(proc)
    monkeypatch.delenv(LEASE_ENV)
    with output_lock(out):  # the run ended: the folder is free again
        pass


def test_a_waiting_process_waits_for_the_whole_run_not_for_one_step(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks, "POLL_S", 0.02)
    out = tmp_path / "out"
    proc, token = _run_holder(out, hold_s=1.5)
    try:
        with monkeypatch.context() as inside:  # a step of the run starts and ends: the folder stays held
            inside.setenv(LEASE_ENV, token)
            with step_lock(out, "embed-shard-0-of-1"):
                pass
        with step_lock(out, "index-train", wait_s=60):
            # the run's last words were written before it let go (select: never wait for them here)
            assert proc.stdout is not None and select.select([proc.stdout], [], [], 0)[0], \
                "a waiting step got the folder while the run still held it"
            assert proc.stdout.readline().strip() == "ending"
    finally:
        _stop(proc)


def test_a_run_holds_every_folder_it_names_and_restores_the_environment(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEASE_ENV, raising=False)
    folders = [tmp_path / "raw", tmp_path / "runs" / "counting"]
    with run_lease(folders) as token:
        assert os.environ[LEASE_ENV] == token
        for folder in folders:
            record = json.loads((folder / locks.LOCK_FILE).read_text())
            assert record["lease"] == token and record["pid"] == os.getpid()
    assert LEASE_ENV not in os.environ
    with run_lease(folders) as other:
        assert other != token  # a token per run: a record left by an earlier run admits no one


def test_the_token_reaches_every_container_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Container steps get the environment through the plan kfp_runner builds (step_environment)."""
    from vsbench.platform import local_run

    captured = {}

    @contextlib.contextmanager
    def fake_runner(plan, pipeline_root, note):  # noqa: ANN001, ANN202 - the container runner's stand-in
        captured["plan"] = plan
        yield object(), type("Identity", (), {"name": "image", "image_id": "sha256:" + "0" * 64})()

    monkeypatch.setattr(local_run, "container_runner", fake_runner)
    monkeypatch.setenv("VSBENCH_EMBED_CACHE", "off")
    with run_lease([tmp_path / "out"]) as token, local_run.kfp_runner("container", tmp_path / "out" / "_kfp",
                                                                   data=(tmp_path / "out",)):
        pass
    assert dict(captured["plan"].environment)[LEASE_ENV] == token


# --- on a cluster: the lease file ----------------------------------------------------------------------


def test_a_folder_leased_by_a_live_run_refuses_the_steps_of_another(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEASE_ENV, raising=False)
    out = tmp_path / "out"
    assert claim_lease(out, "run-a") == "claimed"
    assert claim_lease(out, "run-a") == "renewed"
    with pytest.raises(OutputBusy) as caught:
        claim_lease(out, "run-b")
    line = str(caught.value)
    assert "\n" not in line and "run-a" in line and str(out) in line and LEASE_FILE in line
    with pytest.raises(OutputBusy, match="run-a"), folder_lease(out, "run-b"):
        raise AssertionError("a step of another run ran")
    assert not release_lease(out, "run-b")  # a refused run's exit handler leaves the holder's lease alone
    with folder_lease(out, "run-a"):  # the holder's own steps go on
        pass
    assert release_lease(out, "run-a")
    assert claim_lease(out, "run-b") == "claimed"  # released: the next run takes it


def test_an_expired_lease_is_taken_over_with_one_warning_and_its_run_is_then_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(LEASE_ENV, raising=False)
    monkeypatch.setenv(locks.LEASE_TTL_ENV, "100")
    out = tmp_path / "out"
    claim_lease(out, "killed-run", now=1000.0)
    with pytest.raises(OutputBusy, match="killed-run"):
        claim_lease(out, "run-b", now=1099.0)
    with caplog.at_level(logging.WARNING, logger="vsbench.io.locks"):
        assert claim_lease(out, "run-b", now=1101.0) == "taken over"
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "killed-run" in warned[0] and str(out) in warned[0]
    # The run it was taken from, were it only paused, must not write into the taker's outputs.
    with pytest.raises(OutputBusy, match="taken over by run run-b"):
        claim_lease(out, "killed-run", now=1102.0)
    assert release_lease(out, "run-b")
    with pytest.raises(OutputBusy, match="taken over"):
        claim_lease(out, "killed-run")


def test_a_step_renews_the_lease_while_it_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEASE_ENV, raising=False)
    monkeypatch.setenv(locks.LEASE_TTL_ENV, "0.2")
    out = tmp_path / "out"
    claim_lease(out, "run-a")
    with folder_lease(out, "run-a"):
        first = json.loads((out / LEASE_FILE).read_text())["expires"]
        deadline = time.monotonic() + 30
        while json.loads((out / LEASE_FILE).read_text())["expires"] == first:
            assert time.monotonic() < deadline, "the lease was not renewed"
            time.sleep(0.02)


def test_a_local_run_only_checks_the_lease_file_and_never_leaves_one(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a local run the flock holds the folder (and dies with the run): no lease file, which a
    run killed outright would leave behind for an hour; a cluster run's live lease still refuses."""
    out = tmp_path / "out"
    monkeypatch.setenv(LEASE_ENV, "a-local-run")
    assert claim_lease(out, "local-kfp-id") == "checked" and not (out / LEASE_FILE).exists()
    assert not release_lease(out, "local-kfp-id")
    monkeypatch.delenv(LEASE_ENV)
    claim_lease(out, "cluster-run")
    monkeypatch.setenv(LEASE_ENV, "a-local-run")
    with pytest.raises(OutputBusy, match="cluster-run"):
        claim_lease(out, "local-kfp-id")


def test_the_leased_folders_are_one_folder_or_a_json_list() -> None:
    assert leased_folders("") == [] and leased_folders("/data/runs/x") == ["/data/runs/x"]
    assert leased_folders('["/a", "/b"]') == ["/a", "/b"]
    with pytest.raises(ValueError, match="JSON list of folders"):
        leased_folders('[1, ""]')


# --- a busy folder is refused before any heavy import ----------------------------------------------------

REFUSE = """
import json, sys
from typer.testing import CliRunner
from vsbench.cli.app import app
results = [[r.exit_code, r.output] for r in (CliRunner().invoke(app, args) for args in json.loads(sys.argv[1]))]
heavy = sorted(m for m in ("torch", "mlflow", "faiss", "kfp", "timm", "torchvision") if m in sys.modules)
print(json.dumps({"results": results, "heavy": heavy}))
"""


def test_a_busy_folder_is_refused_in_one_line_before_the_heavy_imports(tmp_path: Path) -> None:
    out, data = tmp_path / "out", tmp_path / "abid"
    (tmp_path / "disc").mkdir()
    common = ["--benchmark", "disc", "--root", str(tmp_path / "disc"), "--out", str(out)]
    commands = [["similarity", "run", *common, "--runner", runner, "--no-track"] for runner in
                ("inline", "subprocess", "container")]
    commands += [["similarity", step, *common] for step in ("index", "search", "score")]
    commands += [["abid", "run-local", "--data-root", str(data), "--no-track"],
                 ["abid", "train", "counting", "--tasks", str(data / "tasks"), "--images", str(data / "img"),
                  "--out", str(data / "runs" / "counting"), "--no-track"],
                 ["abid", "prepare", "--data", str(data / "raw"), "--out", str(data / "tasks")]]
    holders = [_run_holder(out)[0], _run_holder(*(data / name for name in ("raw", "tasks", "runs/counting")))[0]]
    try:
        env = {k: v for k, v in os.environ.items() if k != locks.WAIT_ENV}
        done = subprocess.run([sys.executable, "-c", REFUSE, json.dumps(commands)], capture_output=True, text=True,
                              env=env, timeout=300)
    finally:
        for proc in holders:
            _stop(proc)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for args, (code, output) in zip(commands, report["results"], strict=True):
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1, (args, output)
        assert "is being written by another vsbench run: a pipeline run" in errors[0], (args, output)
    assert report["heavy"] == [], "imported before the busy folder was refused"
