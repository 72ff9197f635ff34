"""Training checkpoints know what they belong to (issue 37): a checkpoint of other work (another
seed, image size, architecture, task, task file or image) is moved aside with one line and the
run equals a fresh one; an unchanged re-run resumes without hashing or training; one writer per
``--out``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.abid_data import tiny_abid
from vsbench.abid.checkpoints import SET_ASIDE, checkpoint_dir
from vsbench.abid.counting import train_counting
from vsbench.abid.data import image_path
from vsbench.abid.profiles import get_profile
from vsbench.abid.trainer import BEST, LAST, load_state
from vsbench.cli.app import app
from vsbench.io.locks import output_lock
from vsbench.runtime.device import setup_device

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TIMING = {"epoch_seconds", "train_images_per_second"}
BASE = {"epochs": 1, "batch_size": 8, "image_size": 32, "workers": 0}
MOVED = "moved aside to"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """80 generated bins (enough for the siamese questions); counting trains on 16 rows."""
    root = tmp_path_factory.mktemp("ckpt")
    tasks, images = tiny_abid(root, 80)
    rows = json.loads((tasks / "counting_train.json").read_text())
    (tasks / "counting_train.json").write_text(json.dumps(rows[:16]))
    return tasks, images


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished counting run (seed 0, the BASE profile), copied by each test that reuses it."""
    out = tmp_path_factory.mktemp("trained") / "out"
    _train(tiny, out)
    return out


def _train(tiny, out: Path, seed: int = 0, **overrides):
    return train_counting(*tiny, out, get_profile("demo", **{**BASE, **overrides}), setup_device("cpu"), seed=seed,
                          progress=False)


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def _moved_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if MOVED in line]


def _same_weights_and_history(a: Path, b: Path, task: str = "counting") -> None:
    for name in (LAST, BEST):
        first, second = load_state(checkpoint_dir(a, task) / name), load_state(checkpoint_dir(b, task) / name)
        assert first["model"].keys() == second["model"].keys()
        for key, tensor in first["model"].items():
            assert torch.equal(tensor, second["model"][key]), (name, key)
    first, second = load_state(checkpoint_dir(a, task) / LAST), load_state(checkpoint_dir(b, task) / LAST)
    assert ([{k: v for k, v in h.items() if k not in TIMING} for h in first["history"]]
            == [{k: v for k, v in h.items() if k not in TIMING} for h in second["history"]])


@pytest.mark.parametrize("change", [{"seed": 1}, {"image_size": 40}, {"arch": "resnet34"}],
                         ids=["seed", "image_size", "arch"])
def test_other_work_into_the_same_out_is_set_aside_and_equals_a_fresh_run(tiny, trained, tmp_path, capsys, change):
    out = _copy(trained, tmp_path / "out")
    capsys.readouterr()
    again = _train(tiny, out, **change)
    moved = _moved_lines(capsys.readouterr().out)
    assert len(moved) == 1 and str(checkpoint_dir(out, "counting") / LAST) in moved[0], moved
    assert "a checkpoint of other work" in moved[0] and next(iter(change)) in moved[0]
    assert again.fit.resumed_from == 0
    fresh = _train(tiny, tmp_path / "fresh", **change)
    _same_weights_and_history(out, tmp_path / "fresh")
    assert again.predictions == fresh.predictions
    aside = list((checkpoint_dir(out, "counting") / SET_ASIDE).glob(f"*/{LAST}"))
    assert len(aside) == 1, "the other run's checkpoint is kept, not deleted"


def test_a_run_asked_for_more_epochs_resumes_and_equals_a_longer_fresh_run(tiny, trained, tmp_path, capsys):
    """``epochs`` is not in the identity (the lr schedule does not depend on the total)."""
    out = _copy(trained, tmp_path / "out")
    longer = _train(tiny, out, epochs=2)
    assert longer.fit.resumed_from == 1 and not _moved_lines(capsys.readouterr().out)
    _train(tiny, tmp_path / "fresh", epochs=2)
    _same_weights_and_history(out, tmp_path / "fresh")
    shorter = _train(tiny, out, epochs=1)  # past the epochs asked: its chosen epoch may be epoch 2
    assert shorter.fit.resumed_from == 0 and "past the 1 asked" in capsys.readouterr().out


def _replace_a_label(path: Path) -> None:
    text = path.read_text()
    match = re.search(r"\[(\d+), (\d)\]", text)
    assert match
    label = str((int(match.group(2)) + 1) % 6)
    path.write_text(text[:match.start(2)] + label + text[match.end(2):])


def _replace_a_quantization_value(path: Path) -> None:
    """Other pixels, same size, still a whole JPEG: one value of the first quantization table."""
    data = bytearray(path.read_bytes())
    at = data.index(b"\xff\xdb") + 5 + 10
    data[at] = data[at] + 1 if data[at] < 255 else data[at] - 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("replaced", ["task file", "image"])
def test_a_replaced_input_of_the_same_size_and_mtime_is_not_resumed_from(tiny, trained, tmp_path, capsys, replaced):
    tasks, images = _copy(tiny[0], tmp_path / "tasks"), _copy(tiny[1], tmp_path / "images")
    out = _copy(trained, tmp_path / "out")
    assert _train((tasks, images), out).fit.resumed_from == 1, "a copy of the same inputs is the same work"
    first_row = json.loads((tasks / "counting_train.json").read_text())[0][0]
    path = tasks / "counting_val.json" if replaced == "task file" else image_path(images, first_row)
    before = path.stat()
    (_replace_a_label if replaced == "task file" else _replace_a_quantization_value)(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    capsys.readouterr()
    again = _train((tasks, images), out)
    moved = _moved_lines(capsys.readouterr().out)
    assert again.fit.resumed_from == 0 and len(moved) == 1
    assert ("other task files" if replaced == "task file" else "other images") in moved[0]


def test_an_unchanged_rerun_resumes_and_only_stats_its_inputs(tiny, trained, tmp_path, capsys, monkeypatch):
    import vsbench.io.digests as digests

    monkeypatch.setattr(digests, "RACY_NS", 0)  # the generated files are seconds old
    out = _copy(trained, tmp_path / "out")
    _train(tiny, out)  # the copy's memo names no file as hashed out of the racy window: hashes once
    hashed: list[str] = []
    real = digests.file_sha256
    monkeypatch.setattr(digests, "file_sha256", lambda path: hashed.append(path) or real(path))
    capsys.readouterr()
    again = _train(tiny, out)
    printed = capsys.readouterr().out
    assert again.fit.resumed_from == 1 and "already trained: " in printed
    assert not [line for line in printed.splitlines() if line.startswith("epoch ")] and MOVED not in printed
    assert hashed == [], "an unchanged input is known by its stat record"


def test_a_checkpoint_of_the_layout_before_is_moved_aside(tiny, trained, tmp_path, capsys):
    out = _copy(trained, tmp_path / "out")
    (out / "checkpoints" / LAST).write_bytes(b"an unkeyed checkpoint")
    capsys.readouterr()
    assert _train(tiny, out).fit.resumed_from == 1
    moved = _moved_lines(capsys.readouterr().out)
    assert len(moved) == 1 and "before checkpoints were keyed" in moved[0]
    assert not (out / "checkpoints" / LAST).exists()


def _cli(tiny, out: Path, task: str, *extra: str, overrides: dict | None = None):
    tasks, images = tiny
    return CliRunner().invoke(app, ["abid", "train", task, "--tasks", str(tasks), "--images", str(images),
                                    "--out", str(out), "--device", "cpu",
                                    "--overrides", json.dumps({**BASE, **(overrides or {})}), *extra])


def test_siamese_trains_into_the_folder_counting_trained_in(tiny, trained, tmp_path, monkeypatch):
    """Both tasks in one --out, the siamese trunk started from that folder's counting network."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = _copy(trained, tmp_path / "out")
    result = _cli(tiny, out, "siamese", overrides={"siamese_trunk_init": "counting"})
    assert result.exit_code == 0, result.output
    assert "state_dict" not in result.output and "Traceback" not in result.output
    assert (out / "obj_verification_result.txt").is_file() and (checkpoint_dir(out, "siamese") / LAST).is_file()
    identity = load_state(checkpoint_dir(out, "siamese") / LAST)["identity"]
    assert identity["task"] == "siamese" and identity["trunk"]  # keyed on the counting weights it started from
    assert _train(tiny, out).fit.resumed_from == 1, "counting's checkpoint is untouched"


HOLD = """
import sys, time
from vsbench.io.locks import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_train_into_a_busy_out_stops_naming_the_folder(tiny, tmp_path):
    """Held by another process (within one process the lock is re-entrant)."""
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for extra in ((), ("--nproc", "2")):
            result = _cli(tiny, out, "counting", *extra)
            assert result.exit_code == 2, result.output
            lines = result.output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: ") and str(out) in lines[0], result.output
            assert "being written by another vsbench run" in lines[0] and f"pid {holder.pid}" in lines[0]
    finally:
        holder.kill()
        holder.wait()
    assert not (out / "checkpoints").exists()


def test_every_rank_of_a_job_into_a_busy_out_stops_without_waiting(tiny, tmp_path):
    """Rank 0 holds the lock for the job and tells the others: no rank waits on a collective."""
    tasks, images = tiny
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MLFLOW_TRACKING_URI")}
    env.update(OMP_NUM_THREADS="1", VSBENCH_DIST_TIMEOUT_S="60")
    with output_lock(out, what="a test's hold"):
        job = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                              "-m", "vsbench", "abid", "train", "counting", "--tasks", str(tasks), "--images",
                              str(images), "--out", str(out), "--device", "cpu", "--overrides", json.dumps(BASE)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert job.returncode != 0
    refusals = [line for line in job.stderr.splitlines() if "being written by another vsbench run" in line]
    assert len(refusals) == 2, job.stderr[-3000:]  # one line from each rank
    assert not (out / "checkpoints").exists()
