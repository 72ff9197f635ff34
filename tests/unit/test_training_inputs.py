"""A training's inputs stay what its checkpoints say they are (issue 46, item 5).

``abid train`` holds ``--images`` and ``--tasks`` as one of their readers, which ``abid resize``
and ``abid prepare`` respect (in both directions); and it re-checks its inputs' digests before
each checkpoint and before its result file, so that a file rewritten by something that takes no
lock (an rsync) stops it in one line instead of leaving a checkpoint whose identity names bytes it
was not trained on. Also: a ``--tasks`` folder without task files says to run ``abid prepare``.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.abid_data import tiny_abid
from tests.unit.test_input_locks import Holder
from vsbench.abid import data as abid_data
from vsbench.abid.checkpoints import MEMO_NAME, InputsChanged, checkpoint_dir, training_identity
from vsbench.abid.data import image_path
from vsbench.abid.prepare import prepare_abid
from vsbench.abid.profiles import get_profile
from vsbench.abid.resize import resize_abid
from vsbench.abid.trainer import BEST, LAST, load_state
from vsbench.cli.app import app
from vsbench.io import locks
from vsbench.io.locks import InputBusy
from vsbench.steps.abid import abid_train_counting_step

BASE = {"epochs": 1, "batch_size": 8, "image_size": 32, "workers": 0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """40 generated bins; counting trains on 16 rows (two batches)."""
    root = tmp_path_factory.mktemp("inputs")
    tasks, images = tiny_abid(root, 40)
    rows = json.loads((tasks / "counting_train.json").read_text())
    (tasks / "counting_train.json").write_text(json.dumps(rows[:16]))
    return tasks, images


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(locks.WAIT_ENV, raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("VSBENCH_NO_TRACK", "1")


def _copy_inputs(tiny: tuple[Path, Path], to: Path) -> tuple[Path, Path]:
    """A copy of the inputs a test may change."""
    import shutil

    return shutil.copytree(tiny[0], to / "tasks"), shutil.copytree(tiny[1], to / "images")


def _train(tasks: Path, images: Path, out: Path):
    """The training step (it holds the inputs' readers lock), tracking off."""
    return abid_train_counting_step(str(tasks), str(images), str(out), device="cpu", overrides=BASE, progress=False)


@pytest.mark.slow  # two one-epoch trainings (~20 s on 2 cores)
def test_an_image_rewritten_mid_epoch_is_refused_and_a_rerun_trains_fresh_on_the_new_bytes(
        tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-epoch, ``abid resize`` and ``abid prepare`` into the training's folders are refused (the
    step holds them as a reader; flock excludes a second open file in this process as in another);
    an rsync, which takes no lock, replaces a photo: the run stops before its checkpoint."""
    tasks, images = _copy_inputs(tiny, tmp_path)
    rows = json.loads((tasks / "counting_train.json").read_text())
    victim = image_path(images, int(rows[0][0]))
    other = image_path(images, int(rows[1][0])).read_bytes()
    assert other != victim.read_bytes()
    real_load, calls, refusals = abid_data.load_image, [], []

    def load_then_rewrite(path, size):  # noqa: ANN001 - load_image's signature
        calls.append(path)
        if len(calls) == BASE["batch_size"] + 1:  # the first batch is loaded
            for rewrite in (lambda: resize_abid(tiny[1].parent / "raw", images, size=32, workers=1, progress=False),
                            lambda: prepare_abid(tiny[0].parent / "raw", tasks, seed=1, val_fraction=0.25,
                                                 progress=False)):
                with pytest.raises(InputBusy) as refused:
                    rewrite()
                refusals.append(str(refused.value))
            victim.write_bytes(other)
        return real_load(path, size)

    monkeypatch.setattr(abid_data, "load_image", load_then_rewrite)
    out = tmp_path / "out"
    with pytest.raises(InputsChanged) as refused:
        _train(tasks, images, out)
    assert refusals[0].startswith(f"the resized images' folder {images} is being read by a training: pid {os.getpid()} ")
    assert refusals[1].startswith(f"the task files' folder {tasks} is being read by a training: pid {os.getpid()} ")
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{victim} (an image) changed while the training read it: sha256 ")
    assert "epoch 1's checkpoint is not written" in line and "re-run: the training starts again from scratch" in line
    directory = checkpoint_dir(out, "counting")
    assert not (directory / LAST).exists() and not (directory / BEST).exists()  # nothing under the old identity

    monkeypatch.setattr(abid_data, "load_image", real_load)
    again = _train(tasks, images, out)
    assert again.manifest["resumed_from_epoch"] == 0
    val = json.loads((tasks / "counting_val.json").read_text())
    now = training_identity("counting", get_profile("demo", **BASE), seed=0, hard=False,
                            task_files=[tasks / "counting_train.json", tasks / "counting_val.json"],
                            images=[image_path(images, int(i)) for i in sorted({r[0] for r in rows + val})],
                            memo_path=None)
    assert load_state(directory / LAST)["identity_sha256"] == now.digest  # keyed on the bytes it trained on

    # A finished training re-run reads the images once more for its answers: a photo put back then
    # stops it before the result file (the one there is the last run's, of its checkpoint's bytes).
    result = (out / "counting_result.txt").read_bytes()
    original = tiny[1] / victim.name

    def put_back(path, size):  # noqa: ANN001
        if victim.read_bytes() == other:
            victim.write_bytes(original.read_bytes())
        return real_load(path, size)

    monkeypatch.setattr(abid_data, "load_image", put_back)
    with pytest.raises(InputsChanged, match=r"; counting_result.txt is not written \(the checkpoints before"):
        _train(tasks, images, out)
    assert (out / "counting_result.txt").read_bytes() == result


def test_the_identity_reaches_other_ranks_without_its_record_of_the_inputs(tmp_path: Path) -> None:
    """The re-check is rank 0's; the record (a memo, every path) is not sent to the other ranks."""
    (tmp_path / "t.json").write_text("[]")
    identity = training_identity("counting", get_profile("demo", **BASE), seed=0, hard=False,
                                 task_files=[tmp_path / "t.json"], images=[tmp_path / "a.jpg"],
                                 memo_path=tmp_path / MEMO_NAME)
    assert identity.inputs is not None and identity.changed_input() == ""
    received = pickle.loads(pickle.dumps(identity))
    assert received == identity and received.inputs is None and received.changed_input() == ""
    (tmp_path / "a.jpg").write_bytes(b"appeared")
    assert identity.changed_input().startswith(f"{tmp_path / 'a.jpg'} (an image) changed while the training read it: "
                                               "missing or unreadable when it started, sha256 ")


def _cli_train(tasks: Path, images: Path, out: Path):
    return CliRunner().invoke(app, ["abid", "train", "counting", "--tasks", str(tasks), "--images", str(images),
                                    "--out", str(out), "--device", "cpu", "--no-track", "--overrides",
                                    json.dumps(BASE)])


def test_a_training_is_refused_while_a_resize_writes_its_images(tiny, tmp_path: Path) -> None:
    tasks, images = tiny
    with Holder("write", images) as writer:
        result = _cli_train(tasks, images, tmp_path / "out")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --images {images} is being rewritten"), result.output
    assert f"pid {writer.pid} " in lines[0] and "train again" in lines[0]
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.parametrize("kind", ["empty folder", "missing folder", "images folder"])
def test_a_tasks_folder_without_task_files_says_to_run_prepare(tiny, tmp_path: Path, kind: str) -> None:
    tasks = {"empty folder": tmp_path / "empty", "missing folder": tmp_path / "missing",
             "images folder": tiny[1]}[kind]
    if kind == "empty folder":
        tasks.mkdir()
    result = _cli_train(tasks, tiny[1], tmp_path / "out")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: --tasks {tasks}: ") and "`vsbench abid prepare --data DATA --out " \
        f"{tasks}`" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
