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
from vsbench.io.storage import file_sha256
from vsbench.runtime.device import setup_device

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


def _same_state(a: Path, b: Path, task: str) -> None:
    first, second = load_state(a / "checkpoints" / task / LAST), load_state(b / "checkpoints" / task / LAST)
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
    _same_state(tmp_path / "a", tmp_path / "b", "counting")
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
    _same_state(tmp_path / "a", tmp_path / "b", "siamese")
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


def test_hold_out_is_seeded_disjoint_and_refuses_to_take_everything() -> None:
    from vsbench.abid.trainer import hold_out

    kept, held = hold_out(list(range(50)), 0.1, seed=3)
    assert len(held) == 5 and sorted(kept + held) == list(range(50)) and not set(kept) & set(held)
    assert (kept, held) == hold_out(list(range(50)), 0.1, seed=3)
    assert held != hold_out(list(range(50)), 0.1, seed=4)[1]
    with pytest.raises(ValueError, match="cannot hold out"):
        hold_out([7], 0.5, seed=0)


@pytest.mark.parametrize("train", [train_counting, train_siamese], ids=["counting", "siamese"])
def test_the_epoch_is_chosen_on_held_out_training_bins_and_said_so(tiny, tmp_path, train, capsys):
    """epoch_selection holdout: the epoch with the best held-out score answers, its validation
    score is what is reported, and every epoch printed a line though the bars were off."""
    tasks, images = tiny
    profile = get_profile("demo", epochs=3, batch_size=8, image_size=32, workers=0, epoch_selection="holdout",
                          holdout_fraction=0.2)
    run = train(tasks, images, tmp_path, profile, setup_device("cpu"), seed=1, progress=False)
    held = [record["holdout_score"] for record in run.fit.history]
    assert run.fit.best_epoch == 1 + held.index(max(held))  # the first of equal bests
    assert run.fit.best_score == run.fit.history[run.fit.best_epoch - 1]["val_score"]
    assert run.fit.chosen_metrics() == {"chosen_holdout_accuracy": max(held)}
    assert "held out of training" in run.fit.describe_choice()
    summary = next(tmp_path.glob("*_summary.json")).read_text()
    assert json.loads(summary)["epoch_choice"] == run.fit.describe_choice()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 3 and all("held-out" in line for line in lines)


def test_the_last_epoch_answers_when_asked(tiny, tmp_path):
    tasks, images = tiny
    profile = get_profile("demo", epochs=2, batch_size=8, image_size=32, workers=0, epoch_selection="last")
    run = train_counting(tasks, images, tmp_path, profile, setup_device("cpu"), seed=1, progress=False)
    assert run.fit.best_epoch == 2 and run.fit.best_score == run.fit.history[-1]["val_score"]
    assert run.fit.describe_choice() == "epoch 2 of 2, the last epoch"


def test_held_out_siamese_bins_are_never_training_partners(tiny) -> None:
    """The held-out bins are out of the training rows, their targets and the negative pool."""
    from vsbench.abid.pairs import SiamesePairSampler
    from vsbench.abid.siamese import _usable_rows

    rows = [[1, [["a", [2, 3]]]], [2, [["a", [1, 3]]]], [3, [["a", [1, 2]], ["b", [4]]]]]
    available = {1, 3, 4}  # 2 held out
    usable = _usable_rows([r for r in rows if r[0] in available], available)
    assert usable == [[1, [["a", [3]]]], [3, [["a", [1]], ["b", [4]]]]]
    sampler = SiamesePairSampler(usable, {i: frozenset({"x" + str(i)}) for i in (1, 2, 3, 4)}, pool=sorted(available))
    import numpy as np

    rng = np.random.default_rng(0)
    assert all(2 not in (p.first, p.second) for p in (sampler.sample(k % 2, rng) for k in range(200)))


def test_majority_rates_are_named_for_what_they_measure() -> None:
    from vsbench.abid.counting import MajorityRates

    train = [[0, 1], [1, 1], [2, 1], [3, 2]]  # training's commonest count: 1 (3 of 4)
    val = [[10, 2], [11, 2], [12, 2], [13, 1], [14, 0]]  # validation's own: 2 (3 of 5); count 1 is 1 of 5
    rates = MajorityRates.of(train, val)
    assert rates.train_majority_class == 1 and rates.train_majority_rate == 0.75
    assert rates.val_rate_of_train_majority == pytest.approx(0.2)
    assert rates.val_own_majority_rate == pytest.approx(0.6)


def test_counting_summary_carries_both_rates_and_the_old_key(tiny, tmp_path):
    tasks, images = tiny
    run = train_counting(tasks, images, tmp_path, get_profile("demo", epochs=1, batch_size=8, image_size=32,
                                                              workers=0), setup_device("cpu"), seed=5, progress=False)
    summary = json.loads((tmp_path / "counting_summary.json").read_text())
    metrics = run.summary_metrics()
    assert summary["val_rate_of_train_majority"] == metrics["val_rate_of_train_majority"] == metrics["val_majority_rate"]
    assert summary["val_majority_rate"] == summary["val_rate_of_train_majority"]  # one release, for old readers
    assert summary["val_own_majority_rate"] >= summary["val_rate_of_train_majority"]
    calibration = json.loads((tmp_path / "counting_calibration.json").read_text())
    train_ids = {idx for idx, _ in json.loads((tasks / "counting_train.json").read_text())}
    assert calibration["trained_on"] is True and calibration["bins"]
    assert calibration["counting_result_sha256"] == file_sha256(tmp_path / "counting_result.txt")  # its key
    assert {idx for idx, _ in calibration["bins"]} <= train_ids
    assert all(0 <= predicted <= 5 for _, predicted in calibration["bins"])
