"""What a checkpoint folder is resumed from, decided on hand-written checkpoints (issue 49).

Why: ``resume_state``, ``check_best`` and the identity's spelling were reached only by the
checkpoint tests that train a network (slow, so mutation testing could not use them: 211 of 346
mutants of ``checkpoints.py`` had no fast test). Here the checkpoints are small dicts written with
``torch.save``, so each rule (other work, no identity, unreadable, past the epochs asked, a
``best.pt`` that is not its ``last.pt``'s, the layout before per-task folders) is a millisecond.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from vsbench.abid import checkpoints
from vsbench.abid.checkpoints import (
    BEST,
    LAST,
    SET_ASIDE,
    CheckpointMismatch,
    TrainingIdentity,
    check_best,
    checkpoint_dir,
    counting_trunk_for,
    resume_state,
    training_identity,
)
from vsbench.abid.profiles import TrainProfile
from vsbench.io import digests

PROFILE = TrainProfile(epochs=3, batch_size=8, lr=0.01, momentum=0.9, weight_decay=1e-4, lr_step_epochs=2,
                       lr_gamma=0.1, image_size=48, workers=0, max_targets=5, pos_prob=0.5, dropout=0.1)


def _inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    folder.mkdir(parents=True, exist_ok=True)
    past = time.time_ns() - 10 * digests.RACY_NS
    for name, data in (("train.txt", b"1 2\n"), ("a.jpg", b"\xff\xd8a"), ("b.jpg", b"\xff\xd8bb")):
        if not (folder / name).exists():  # written once: a rewrite is a new stat record
            (folder / name).write_bytes(data)
            os.utime(folder / name, ns=(past, past))
    return [folder / "train.txt"], [folder / "a.jpg", folder / "b.jpg"]


def _identity(tmp_path: Path, seed: int = 0, profile: TrainProfile = PROFILE, **overrides: Any) -> TrainingIdentity:
    task_files, images = _inputs(tmp_path / "inputs")
    arguments: dict[str, Any] = {"seed": seed, "hard": False, "task_files": task_files, "images": images,
                                 "memo_path": None, **overrides}
    return training_identity("counting", profile, **arguments)


def _save(path: Path, identity: TrainingIdentity | None, epoch: int, best_epoch: int = 0, **extra: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"epoch": epoch, "best_epoch": best_epoch, "model": {"w": torch.ones(2)}, **extra}
    if identity is not None:
        state.update(identity=identity.fields, identity_sha256=identity.digest)
    torch.save(state, path)


def _load_error(data: bytes) -> str:
    """What the line says of a file ``torch.load`` cannot read: the error's type and first line."""
    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever torch raises
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    raise AssertionError("torch.load read garbage")


def _set_aside(directory: Path) -> list[Path]:
    return sorted(p for p in (directory / SET_ASIDE).glob("*/*"))


def test_the_identity_has_a_fixed_spelling(tmp_path: Path) -> None:
    """Stored in every checkpoint: renaming a field or changing the JSON would orphan them all."""
    identity = _identity(tmp_path)
    assert set(identity.fields) == {"format", "task", "hard", "seed", "profile", "task_files", "images",
                                    "image_count", "trunk"}
    assert identity.fields["format"] == checkpoints.IDENTITY_FORMAT and identity.fields["image_count"] == 2
    assert identity.fields["task"] == "counting" and identity.fields["hard"] is False
    canonical = json.dumps(identity.fields, sort_keys=True, separators=(",", ":"))
    assert identity.digest == hashlib.sha256(canonical.encode()).hexdigest()
    assert identity.short == identity.digest[:12]


def test_the_identity_counts_what_it_hashed_and_an_unchanged_rerun_only_stats(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digests, "RACY_NS", 0)
    memo = tmp_path / "memo.json"
    first = _identity(tmp_path, memo_path=memo)
    assert (first.hashed, first.hashed_bytes) == (3, 4 + 3 + 4)
    again = _identity(tmp_path, memo_path=memo)
    assert (again.hashed, again.hashed_bytes) == (0, 0) and again == first


def test_differences_are_worded_field_by_field(tmp_path: Path) -> None:
    mine = _identity(tmp_path)
    theirs = dict(mine.fields, seed=3, hard=True, task_files="0" * 64, trunk="1" * 64, image_count=9,
                  profile={**mine.fields["profile"], "lr": 0.5, "gone": 1})
    assert mine.differences(theirs) == ["hard True, here False", "gone 1, here None", "lr 0.5, here 0.01", "seed 3, here 0", "other task files",
                                        "other trunk"]
    assert mine.differences(dict(mine.fields, image_count=9)) == ["another identity format"]
    assert mine.differences({k: v for k, v in mine.fields.items() if k != "hard"}) == ["hard None, here False"]
    assert mine.differences(dict(mine.fields, images="x")) == ["other images"]
    assert mine.differences(dict(mine.fields, profile="flat")) == ["profile 'flat', here " +
                                                                    repr(mine.fields["profile"])]


def test_an_empty_folder_starts_from_scratch_and_moves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    directory = checkpoint_dir(tmp_path / "out", "counting")
    assert resume_state(directory, _identity(tmp_path), epochs=3) is None
    assert not (directory / SET_ASIDE).exists() and capsys.readouterr().out == ""


def test_this_runs_checkpoint_is_resumed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    _save(directory / LAST, identity, epoch=2, best_epoch=1)
    _save(directory / BEST, identity, epoch=1)
    state = resume_state(directory, identity, epochs=3)
    assert state is not None and state["epoch"] == 2 and capsys.readouterr().out == ""
    assert (directory / LAST).exists() and (directory / BEST).exists()
    _save(directory / BEST, identity, epoch=3)  # a run killed between writing best.pt and last.pt
    assert resume_state(directory, identity, epochs=3) is not None
    assert resume_state(directory, identity, epochs=2) is not None  # epoch 2 of 2: finished, not past


@pytest.mark.parametrize("case", ["other work", "no identity", "unreadable", "not a dict", "past the epochs",
                                  "best without last", "best missing", "best of other work", "best of another epoch",
                                  "best unreadable", "best not a dict"])
def test_what_is_not_this_runs_is_moved_aside_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           case: str) -> None:
    identity = _identity(tmp_path)
    other = _identity(tmp_path, seed=1)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    last, best = directory / LAST, directory / BEST
    expected, tag = {
        "other work": (f"{last}: a checkpoint of other work (seed 1, here 0)", other.short),
        "no identity": (f"{last}: a checkpoint of other work (no identity)", "unkeyed"),
        "unreadable": (f"{last}: unreadable ({_load_error(b'not a checkpoint')})", "unreadable"),
        "not a dict": (f"{last}: a checkpoint of other work (no identity)", "unreadable"),
        "past the epochs": (f"{last}: holds epoch 4, past the 3 asked", identity.short),
        "best without last": (f"{best}: a best.pt without its last.pt", identity.short),
        "best missing": (f"{best}: unreadable or missing beside last.pt", identity.short),
        # what differs, not "not the chosen epoch" (issue 46)
        "best of other work": (f"{best}: a checkpoint of other work beside this run's last.pt (seed 1, here 0)",
                               identity.short),
        "best of another epoch": (f"{best}: not the chosen epoch of {last} (epoch 2, chosen 1)", identity.short),
        "best unreadable": (f"{best}: unreadable or missing beside last.pt ({_load_error(b'garbage').split(':')[0]})",
                            identity.short),
        "best not a dict": (f"{best}: a checkpoint of other work beside this run's last.pt (no identity)",
                            identity.short),
    }[case]
    if case == "other work":
        _save(last, other, epoch=1)
    elif case == "no identity":
        _save(last, None, epoch=1)
    elif case == "unreadable":
        directory.mkdir(parents=True)
        last.write_bytes(b"not a checkpoint")
    elif case == "not a dict":
        directory.mkdir(parents=True)
        torch.save([1, 2], last)
    elif case == "past the epochs":
        _save(last, identity, epoch=4)
    elif case == "best without last":
        _save(best, identity, epoch=1)
    elif case == "best missing":
        _save(last, identity, epoch=2, best_epoch=1)
    else:
        _save(last, identity, epoch=2, best_epoch=1)
        if case == "best of other work":
            _save(best, other, epoch=1)
        elif case == "best of another epoch":
            _save(best, identity, epoch=2)
        elif case == "best not a dict":
            torch.save([1], best)
        else:
            best.write_bytes(b"garbage")
    before = {p.name for p in (last, best) if p.exists()}
    assert resume_state(directory, identity, epochs=3) is None
    out = capsys.readouterr().out
    assert expected in out and out.count("\n") == 1, out
    assert "not resumed; moved aside to" in out and "training from scratch" in out
    moved = _set_aside(directory)
    assert {p.name for p in moved} == before and not last.exists() and not best.exists()
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}-{re.escape(tag)}", moved[0].parent.name), moved[0].parent.name
    assert str(moved[0].parent) in out


def test_a_best_without_a_chosen_epoch_is_still_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``best_epoch`` 0 with a ``best.pt`` beside: the file is checked all the same."""
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    _save(directory / LAST, identity, epoch=2)
    _save(directory / BEST, _identity(tmp_path, seed=5), epoch=0)
    assert resume_state(directory, identity, epochs=3) is None
    assert "a checkpoint of other work beside this run's last.pt (seed 5, here 0)" in capsys.readouterr().out


def test_two_set_asides_in_one_second_get_two_folders(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints.time, "strftime", lambda _format: "20260101T000000")
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    for _ in range(3):
        _save(directory / LAST, None, epoch=1)
        assert resume_state(directory, identity, epochs=3) is None
    folders = sorted(p.name for p in (directory / SET_ASIDE).iterdir())
    assert folders == ["20260101T000000-unkeyed", "20260101T000000-unkeyed~2", "20260101T000000-unkeyed~3"]
    capsys.readouterr()


def test_checkpoints_of_the_layout_before_are_moved_aside(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    legacy = directory.parent
    _save(legacy / LAST, None, epoch=1)
    _save(legacy / BEST, None, epoch=1)
    _save(directory / LAST, identity, epoch=1)
    state = resume_state(directory, identity, epochs=3)
    assert state is not None and state["epoch"] == 1  # this run's own is still resumed
    out = capsys.readouterr().out
    assert f"{legacy / LAST}: a checkpoint from before checkpoints were keyed (issue 37), in the folder both " \
           "tasks share: not resumed" in out
    assert {p.parent.name.split("-")[-1] for p in _set_aside(directory)} == {"unkeyed"}
    assert {p.name for p in _set_aside(directory)} == {LAST, BEST}
    assert not (legacy / LAST).exists() and not (legacy / BEST).exists()


@dataclass
class OtherRank:
    """Rank 1 of a job: rank 0 decided ``decision``."""

    decision: bool
    is_main: bool = False

    def share(self, value: Any) -> Any:
        return self.decision


def test_another_rank_loads_only_what_rank_0_kept(tmp_path: Path) -> None:
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    _save(directory / LAST, None, epoch=1)
    assert resume_state(directory, identity, epochs=3, context=OtherRank(False)) is None  # type: ignore[arg-type]
    assert (directory / LAST).exists(), "a rank other than 0 moved a file"
    with pytest.raises(CheckpointMismatch, match=r"changed while the ranks started \(not this run's checkpoint on this rank\); run again"):
        resume_state(directory, identity, epochs=3, context=OtherRank(True))  # type: ignore[arg-type]
    _save(directory / LAST, identity, epoch=2)
    state = resume_state(directory, identity, epochs=3, context=OtherRank(True))  # type: ignore[arg-type]
    assert state is not None and state["epoch"] == 2


def test_check_best_refuses_a_best_of_other_work(tmp_path: Path) -> None:
    identity = _identity(tmp_path)
    path = checkpoint_dir(tmp_path / "out", "counting") / BEST
    _save(path, identity, epoch=2)
    assert check_best(path, identity)["epoch"] == 2
    _save(path, _identity(tmp_path, seed=2), epoch=2)
    with pytest.raises(CheckpointMismatch, match=r"not this run's best epoch .* remove .*counting and train again"):
        check_best(path, identity)


def test_the_siamese_trunk_comes_from_counting_in_the_same_out_or_the_sibling(tmp_path: Path) -> None:
    out = tmp_path / "siamese"
    sibling = tmp_path / "counting" / "checkpoints" / "counting" / BEST
    assert counting_trunk_for(out) == sibling
    own = out / "checkpoints" / "counting" / BEST
    own.parent.mkdir(parents=True)
    own.write_bytes(b"x")
    assert counting_trunk_for(out) == own
    assert checkpoint_dir(tmp_path, "siamese") == tmp_path / "checkpoints" / "siamese"


def test_a_checkpoint_that_runs_code_when_loaded_is_not_loaded(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``weights_only``: a pickle naming any class is refused as unreadable, never run."""
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    directory.mkdir(parents=True)
    torch.save({"identity_sha256": identity.digest, "epoch": 1, "payload": PROFILE}, directory / LAST)
    assert resume_state(directory, identity, epochs=3) is None
    assert "unreadable (UnpicklingError" in capsys.readouterr().out


def test_missing_counters_read_as_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A last.pt with no ``epoch`` or ``best_epoch`` is epoch 0 with no chosen epoch: resumed, no best.pt asked."""
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    directory.mkdir(parents=True)
    torch.save({"identity_sha256": identity.digest, "identity": identity.fields}, directory / LAST)
    assert resume_state(directory, identity, epochs=1) is not None
    assert capsys.readouterr().out == ""


def test_the_line_names_at_most_four_differences(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    identity = _identity(tmp_path)
    directory = checkpoint_dir(tmp_path / "out", "counting")
    other = dict(identity.fields, seed=9, hard=True, task="siamese", images="x", trunk="y")
    directory.mkdir(parents=True)
    torch.save({"epoch": 1, "identity": other, "identity_sha256": "f" * 64}, directory / LAST)
    resume_state(directory, identity, epochs=3)
    words = "; ".join(identity.differences(other)[:4])
    assert len(identity.differences(other)) == 5
    assert f"a checkpoint of other work ({words})" in capsys.readouterr().out


@pytest.mark.parametrize("which", [LAST, BEST])
def test_a_checkpoint_of_other_work_names_the_first_four_differences_joined_by_semicolons(
        tmp_path: Path, capsys: pytest.CaptureFixture, which: str) -> None:
    """Five profile fields differ: the line names four, in the order ``differences`` gives them."""
    identity = _identity(tmp_path)
    other = _identity(tmp_path, profile=PROFILE.model_copy(update={"lr": 0.5, "momentum": 0.5, "lr_gamma": 0.5,
                                                                   "weight_decay": 0.5, "image_size": 64}))
    words = identity.differences(other.fields)
    assert len(words) == 5
    directory = checkpoint_dir(tmp_path / "out", "counting")
    if which == LAST:
        _save(directory / LAST, other, epoch=1)
        expected = f"{directory / LAST}: a checkpoint of other work ({'; '.join(words[:4])})"
    else:
        _save(directory / LAST, identity, epoch=2, best_epoch=1)
        _save(directory / BEST, other, epoch=1)
        expected = f"{directory / BEST}: a checkpoint of other work beside this run's last.pt ({'; '.join(words[:4])})"
    assert resume_state(directory, identity, epochs=3) is None
    out = capsys.readouterr().out
    assert out.startswith(expected + ": not resumed; moved aside to "), out
