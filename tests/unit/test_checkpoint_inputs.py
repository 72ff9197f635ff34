"""A training's inputs re-checked before each checkpoint (issue 46), at unit level: no training.

Why here (issue 49): the training tests that change a file mid-epoch are slow (two trainings each),
so the mutation run of ``abid/checkpoints.py`` could not afford them and nothing fast judged
``InputRecord.changed``, ``TrainingIdentity.changed_input`` or ``check_inputs``: a re-check that
compared nothing, named the wrong file or kind, or let the other ranks go on would have passed.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest

from tests.digest_files import old_file
from vsbench.abid.checkpoints import InputsChanged, check_inputs, training_identity
from vsbench.abid.distributed import Distributed
from vsbench.abid.profiles import get_profile


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


@pytest.fixture
def inputs(tmp_path: Path, settled: None) -> dict[str, list[Path] | Path]:
    tasks = [old_file(tmp_path / "counting_train.json", b"[[1, 2]]"), old_file(tmp_path / "counting_val.json", b"[]")]
    images = [old_file(tmp_path / f"{i:05d}.jpg", bytes([i]) * 8) for i in range(1, 4)]
    trunk = old_file(tmp_path / "trunk.pt", b"trunk weights")
    return {"tasks": tasks, "images": images, "trunk": trunk}


def _identity(inputs, trunk: bool = True):
    return training_identity("siamese", get_profile("demo"), seed=0, hard=False, task_files=inputs["tasks"],
                             images=inputs["images"], memo_path=None, trunk=inputs["trunk"] if trunk else None)


def test_unchanged_inputs_are_no_change_and_cost_no_hash(inputs) -> None:
    identity = _identity(inputs)
    assert identity.hashed == 6  # 2 task files, 3 images, the trunk
    assert identity.changed_input() == ""
    assert identity.inputs is not None and identity.inputs.memo.hashed == 6  # the re-check only stat-ed them


@pytest.mark.parametrize(("which", "kind"), [("tasks", "a task file"), ("images", "an image"),
                                             ("trunk", "the trunk checkpoint")])
def test_a_file_rewritten_under_the_same_size_and_mtime_is_named_with_its_kind_and_both_digests(
        inputs, which: str, kind: str) -> None:
    identity = _identity(inputs)
    path = inputs[which][-1] if isinstance(inputs[which], list) else inputs[which]
    before = path.read_bytes()
    after = bytes(255 - b for b in before)  # every byte other, the same length
    assert len(after) == len(before) and after != before
    old_file(path, after)
    assert identity.changed_input() == (f"{path} ({kind}) changed while the training read it: sha256 {_sha(before)} "
                                        f"when it started, sha256 {_sha(after)} now")


def test_a_file_gone_or_appeared_is_said_in_words(inputs, tmp_path: Path) -> None:
    identity = _identity(inputs)
    first = inputs["tasks"][0]
    first.unlink()
    assert identity.changed_input() == (f"{first} (a task file) changed while the training read it: sha256 "
                                        f"{_sha(b'[[1, 2]]')} when it started, missing or unreadable now")
    missing = tmp_path / "00009.jpg"
    later = _identity({**inputs, "tasks": inputs["tasks"][1:], "images": [*inputs["images"], missing]})
    old_file(missing, b"new photo")
    assert later.changed_input() == (f"{missing} (an image) changed while the training read it: missing or "
                                     f"unreadable when it started, sha256 {_sha(b'new photo')} now")


def test_the_first_changed_file_is_named_in_the_groups_order(inputs) -> None:
    identity = _identity(inputs)
    old_file(inputs["trunk"], b"TRUNK WEIGHTS")
    old_file(inputs["images"][0], b"\x09" * 8)
    old_file(inputs["tasks"][1], b"{}")
    assert identity.changed_input().startswith(f"{inputs['tasks'][1]} (a task file) changed")


def test_without_a_trunk_only_task_files_and_images_are_rechecked(inputs) -> None:
    identity = _identity(inputs, trunk=False)
    assert identity.fields["trunk"] is None
    assert [kind for kind, _, _ in identity.inputs.groups] == ["a task file", "an image"]
    old_file(inputs["trunk"], b"TRUNK WEIGHTS")  # not an input of this training
    assert identity.changed_input() == ""


def test_an_identity_sent_to_another_rank_rechecks_nothing(inputs) -> None:
    identity = _identity(inputs)
    received = pickle.loads(pickle.dumps(identity))
    assert received == identity and received.inputs is None
    old_file(inputs["images"][0], b"\x09" * 8)
    assert received.changed_input() == "" and identity.changed_input() != ""


class _Context(Distributed):
    """One rank of a job whose ``share`` is rank 0's broadcast: records what this rank offered and
    answers what rank 0 sent."""

    def __init__(self, rank: int, from_rank_0: str | None = None) -> None:
        super().__init__(rank=rank, world_size=2)
        self.offered: list[str] = []
        self.from_rank_0 = from_rank_0

    def share(self, value):  # noqa: ANN001, ANN201 - Distributed.share's signature
        self.offered.append(value)
        return value if self.is_main else self.from_rank_0


def test_check_inputs_stops_rank_0_with_the_whole_line(inputs) -> None:
    identity = _identity(inputs)
    context = _Context(rank=0)
    check_inputs(identity, context, "last.pt")  # nothing changed: nothing raised
    assert context.offered == [""]
    old_file(inputs["images"][1], b"\x07" * 8)
    with pytest.raises(InputsChanged) as raised:
        check_inputs(identity, context, "/run/counting/checkpoints/last.pt")
    assert str(raised.value) == (
        f"{inputs['images'][1]} (an image) changed while the training read it: sha256 {_sha(bytes([2]) * 8)} when it "
        f"started, sha256 {_sha(bytes([7]) * 8)} now; /run/counting/checkpoints/last.pt is not written (the checkpoints "
        "before are of the bytes before); re-run: the training starts again from scratch on the new bytes")


def test_the_other_ranks_stop_on_rank_0s_word_without_checking_themselves(inputs) -> None:
    identity = _identity(inputs)
    old_file(inputs["images"][1], b"\x07" * 8)  # changed: but only rank 0 may say so
    quiet = _Context(rank=1, from_rank_0="")
    check_inputs(identity, quiet, "last.pt")
    assert quiet.offered == [""]  # offered nothing of its own: it did not re-check
    told = _Context(rank=1, from_rank_0="x.jpg (an image) changed")
    with pytest.raises(InputsChanged, match=r"^x\.jpg \(an image\) changed; best\.pt is not written "):
        check_inputs(identity, told, "best.pt")
