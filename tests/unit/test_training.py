"""Baseline training on tiny generated data: exact resume, result files in the challenge format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.abid_data import tiny_abid
from vsbench.abid.counting import train_counting
from vsbench.abid.profiles import get_profile
from vsbench.abid.siamese import train_siamese
from vsbench.abid.trainer import LAST, load_state
from vsbench.device import setup_device

pytestmark = pytest.mark.slow
TIMING = {"epoch_seconds", "train_images_per_second"}


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tiny_abid(tmp_path_factory.mktemp("tiny"), 150)


def _profile():
    return get_profile("demo", epochs=2, batch_size=8, image_size=32, workers=0, lr_step_epochs=1)


def _interrupt_after(epochs: int):
    def callback(record: dict[str, float]) -> None:
        if record["epoch"] == epochs:
            raise Interrupted

    return callback


def _same_state(a: Path, b: Path) -> None:
    first, second = load_state(a / "checkpoints" / LAST), load_state(b / "checkpoints" / LAST)
    assert first["epoch"] == second["epoch"] == 2
    for key, tensor in first["model"].items():
        assert torch.equal(tensor, second["model"][key]), key
    strip = [{k: v for k, v in h.items() if k not in TIMING} for h in first["history"]]
    assert strip == [{k: v for k, v in h.items() if k not in TIMING} for h in second["history"]]
    assert first["optimizer"]["state"].keys() == second["optimizer"]["state"].keys()
    for key, state in first["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(second["optimizer"]["state"][key][name])), name


def test_counting_interrupted_and_resumed_ends_in_the_same_state(tiny, tmp_path):
    tasks, images = tiny
    device = setup_device("cpu")
    straight = train_counting(tasks, images, tmp_path / "a", _profile(), device, seed=5, progress=False)
    with pytest.raises(Interrupted):
        train_counting(tasks, images, tmp_path / "b", _profile(), device, seed=5, progress=False,
                       on_epoch_end=_interrupt_after(1))
    resumed = train_counting(tasks, images, tmp_path / "b", _profile(), device, seed=5, progress=False)
    assert resumed.fit.resumed_from == 1 and straight.fit.resumed_from == 0
    _same_state(tmp_path / "a", tmp_path / "b")
    assert resumed.predictions == straight.predictions

    lines = (tmp_path / "b" / "counting_result.txt").read_text().splitlines()
    assert len(lines) == len(json.loads((tasks / "counting_val.json").read_text()))
    assert all(0 <= int(line) <= 5 for line in lines)


def test_siamese_interrupted_and_resumed_ends_in_the_same_state(tiny, tmp_path):
    tasks, images = tiny
    device = setup_device("cpu")
    profile = _profile()
    straight = train_siamese(tasks, images, tmp_path / "a", profile, device, seed=2, progress=False)
    with pytest.raises(Interrupted):
        train_siamese(tasks, images, tmp_path / "b", profile, device, seed=2, progress=False,
                      on_epoch_end=_interrupt_after(1))
    resumed = train_siamese(tasks, images, tmp_path / "b", profile, device, seed=2, progress=False)
    assert profile.siamese_lr is not None and straight.fit.history[0]["lr"] == profile.siamese_lr
    _same_state(tmp_path / "a", tmp_path / "b")
    assert resumed.predictions == straight.predictions
    lines = (tmp_path / "b" / "obj_verification_result.txt").read_text().splitlines()
    assert len(lines) == len(json.loads((tasks / "obj_verification_val.json").read_text()))
    assert set(lines) <= {"0", "1"}


def test_a_finished_run_is_not_trained_again(tiny, tmp_path):
    tasks, images = tiny
    device = setup_device("cpu")
    train_counting(tasks, images, tmp_path, _profile(), device, seed=5, progress=False)
    again = train_counting(tasks, images, tmp_path, _profile(), device, seed=5, progress=False)
    assert again.fit.resumed_from == 2 and len(again.fit.history) == 2


def test_adamw_runs_fused_and_matches_the_per_tensor_update() -> None:
    """Fused AdamW (one kernel for all parameters) is what the demo's profile gets; same step to rounding."""
    from vsbench.abid.trainer import make_optimizer

    torch.manual_seed(0)
    fused_model, loop_model = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    loop_model.load_state_dict(fused_model.state_dict())
    fused = make_optimizer(fused_model, get_profile("demo"))
    assert fused.defaults["fused"] is True
    loop = torch.optim.AdamW(loop_model.parameters(), lr=fused.defaults["lr"], weight_decay=fused.defaults["weight_decay"])
    for _ in range(3):
        for model, optimizer in ((fused_model, fused), (loop_model, loop)):
            optimizer.zero_grad()
            model(torch.ones(2, 8)).square().sum().backward()
            optimizer.step()
    for a, b in zip(fused_model.parameters(), loop_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert not make_optimizer(fused_model, get_profile("full")).defaults.get("fused")
