"""A cluster run's live lease refuses every local run in one line, exit 2, whatever its runner (issue 54).

Before issue 54, a valid live lease of another run in OUT was ignored by ``--runner inline`` (its
steps never read the lease file) and ended ``--runner subprocess`` in a traceback from inside
kfp.local whose last line was the refusal. The run now checks the lease file as it takes its
folders (``io.locks.run_lease`` -> ``check_lease``), before any step or heavy import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vsbench.io.leases import LEASE_FILE
from vsbench.io.locks import OutputBusy, check_lease, run_lease
from vsbench.platform.local_run import ABID_FOLDERS

CLI = """
import json, sys
from typer.testing import CliRunner
from vsbench.cli.app import app
results = [[r.exit_code, r.output] for r in (CliRunner().invoke(app, args) for args in json.loads(sys.argv[1]))]
heavy = sorted(m for m in ("torch", "mlflow", "faiss", "kfp", "timm", "torchvision") if m in sys.modules)
print(json.dumps({"results": results, "heavy": heavy}))
"""


def _lease(folder: Path, **fields: object) -> dict[str, object]:
    lease = {"run": "cluster-run-7", "expires": time.time() + 3600, "renewed": "", "since": "", "host": "pod-1",
             "taken_over": [], **fields}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LEASE_FILE).write_text(json.dumps(lease))
    return lease


def test_a_live_lease_of_another_run_refuses_every_runner_in_one_line(tmp_path: Path) -> None:
    out, data = tmp_path / "out", tmp_path / "abid"
    (tmp_path / "disc").mkdir()
    common = ["--benchmark", "disc", "--root", str(tmp_path / "disc"), "--out", str(out), "--no-track"]
    commands = [["similarity", "run", *common, "--runner", runner] for runner in ("inline", "subprocess", "container")]
    commands.append(["abid", "run-local", "--data-root", str(data), "--no-track"])
    folders = [out, out, out, data / ABID_FOLDERS[-1]]  # run-local: the lease of any folder it writes
    for folder in folders:
        _lease(folder)
    done = subprocess.run([sys.executable, "-c", CLI, json.dumps(commands)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for args, folder, (code, output) in zip(commands, folders, report["results"], strict=True):
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1 and "Traceback" not in output, (args, output)
        assert f"{folder} is leased by pipeline run cluster-run-7 until " in errors[0], (args, output)
        assert f"if that run is dead, remove {folder / LEASE_FILE}" in errors[0], (args, output)
    assert report["heavy"] == [], "imported before the leased folder was refused"


def test_an_ended_lease_does_not_refuse_a_local_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Expired (its run killed without its exit handler) or released: the folder is free."""
    monkeypatch.delenv("VSBENCH_RUN_LEASE", raising=False)
    for fields in ({"expires": time.time() - 1}, {"released": "2026-12-06T10:00:00+0000"}):
        lease = _lease(tmp_path, **fields)
        check_lease(tmp_path)
        with run_lease([tmp_path]):
            pass
        assert json.loads((tmp_path / LEASE_FILE).read_text()) == lease  # a local run never writes it


def test_a_live_lease_is_checked_with_the_folder_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VSBENCH_RUN_LEASE", raising=False)
    other = tmp_path / "other"
    _lease(tmp_path / "leased")
    with pytest.raises(OutputBusy, match="is leased by pipeline run cluster-run-7"), \
            run_lease([other, tmp_path / "leased"]):
        pass
    with run_lease([other]):  # the refused run let go of the folders it had taken
        pass
    with pytest.raises(OutputBusy, match="cluster-run-7"):
        check_lease(tmp_path / "leased", now=time.time())
    check_lease(tmp_path / "leased", now=time.time() + 7200)  # an hour past its end: free
