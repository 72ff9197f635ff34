"""Training checkpoints that know what they belong to (issue 37).

Why: the trainer resumed any ``last.pt`` in its folder. A re-run with another seed or image size
answered "already trained" with the old network; another architecture, or the siamese baseline
trained where counting had been, died in a ``load_state_dict`` traceback. So every checkpoint now
carries its **identity**: the task, the profile fields that change the network, its data or its
schedule, the seed, and the sha256 of the task files and images the training reads (their
content, hashed once and remembered by a stat record: :class:`vsbench.io.digests.DigestMemo`),
and for a siamese trunk started from counting, that checkpoint's digest. A checkpoint is resumed
only when its identity is this run's; anything else (other work, no identity, unreadable, a
``best.pt`` that is not its ``last.pt``'s) is moved aside to ``set-aside/`` with one line naming
the file and why, and training starts from scratch. Nothing is deleted: moving a checkpoint back
resumes it. (The CLI has no "resume" flag to refuse instead: a re-run is always a resume when it can be.)

Layout: ``<out>/checkpoints/<task>/`` (``last.pt``, ``best.pt``, the digest memo, ``set-aside/``),
so counting and siamese can share one ``--out``. Checkpoints of the layout before this one
(``<out>/checkpoints/last.pt``) have no identity and are moved aside the same way.

Under torchrun rank 0 hashes, decides and moves files; the other ranks get its decision
(:meth:`Distributed.share`) and load ``last.pt`` only when told to, so no rank can resume what
another set aside.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vsbench.abid.distributed import SINGLE, Distributed
from vsbench.abid.profiles import TrainProfile
from vsbench.io.digests import DigestMemo, combine
from vsbench.io.inputs import WordedInputError

CHECKPOINTS = "checkpoints"
LAST = "last.pt"
BEST = "best.pt"
SET_ASIDE = "set-aside"
MEMO_NAME = "inputs-digests.json"
IDENTITY_FORMAT = 1

# Profile fields left out of every identity, because they change neither the network nor its data
# nor its schedule:
# - workers: DataLoader processes only load; every random draw is seeded by (seed, epoch, batch).
# - epochs: the lr schedule (StepLR) does not depend on the total, so a checkpoint of epoch k is
#   exactly epoch k of any longer run, and a finished run can be extended by asking more epochs.
#   A checkpoint past the epochs asked is not resumed (its chosen epoch may be a later one).
# The device, the number of processes and the engine are not in it either: one process resumes
# what N started and the other way round (vsbench.abid.distributed), equal to rounding.
NOT_IN_IDENTITY = frozenset({"workers", "epochs"})
# Fields only the siamese baseline reads (the counting network has no dropout), so that changing
# one of them in a pipeline's profile does not retrain counting.
SIAMESE_ONLY = frozenset({"pos_prob", "pairs_per_row", "siamese_lr", "siamese_trunk_init", "siamese_freeze_trunk",
                          "siamese_pair_features", "siamese_head_width", "max_targets", "dropout"})


class CheckpointMismatch(WordedInputError):
    """A checkpoint that must be this run's is not (one line naming it and the fix)."""


def checkpoint_dir(out: Path, task: str) -> Path:
    """Where ``task``'s checkpoints live in a run folder: one subfolder per task, so both
    baselines can be trained into one ``--out``."""
    return Path(out) / CHECKPOINTS / task


def counting_trunk_for(out: Path) -> Path:
    """The counting ``best.pt`` a siamese run in ``out`` starts its trunk from: counting's in the
    same folder when it was trained there, else the pipeline's sibling ``<out>/../counting``."""
    own = checkpoint_dir(out, "counting") / BEST
    return own if own.exists() else checkpoint_dir(Path(out).parent / "counting", "counting") / BEST


def _digest(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class TrainingIdentity:
    """What a checkpoint belongs to (``fields``) and its sha256 (``digest``), stored in every
    ``last.pt`` and ``best.pt`` the run writes. ``hashed`` and ``hashed_bytes`` say what this run
    had to read to know it (zero on an unchanged re-run: the memo answers from ``stat``)."""

    fields: dict[str, Any]
    digest: str
    hashed: int = field(default=0, compare=False)
    hashed_bytes: int = field(default=0, compare=False)
    # What was hashed, to re-check before each checkpoint (rank 0's only: not sent to other ranks).
    inputs: InputRecord | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "inputs"}  # the other ranks never re-check

    @property
    def short(self) -> str:
        return self.digest[:12]

    def changed_input(self) -> str:
        """The first input whose bytes are not the ones this identity names, in words ("" when none,
        or when this identity was not computed here)."""
        return self.inputs.changed() if self.inputs is not None else ""

    def differences(self, other: Any) -> list[str]:
        """How ``other`` (a stored identity) differs from this one, in words, for the log line."""
        if not isinstance(other, dict):
            return ["no identity"]
        words = []
        for key in sorted(set(self.fields) | set(other)):
            mine, theirs = self.fields.get(key), other.get(key)
            if mine == theirs:
                continue
            if key == "profile" and isinstance(mine, dict) and isinstance(theirs, dict):
                words += [f"{name} {theirs.get(name)!r}, here {mine.get(name)!r}"
                          for name in sorted(set(mine) | set(theirs)) if mine.get(name) != theirs.get(name)]
            elif key in ("task_files", "images", "trunk"):
                words.append(f"other {key.replace('_', ' ')}")
            elif key != "image_count":
                words.append(f"{key} {theirs!r}, here {mine!r}")
        return words or ["another identity format"]


@dataclass
class InputRecord:
    """The files an identity hashed and their digests then, with the memo that hashed them: a
    re-check costs one ``stat`` a file (what the memo remembers), a hash only for a file that changed.

    Why: the training reads every image again each epoch (the loader's workers, the validation),
    after the identity was taken. A file rewritten in between (an ``abid resize`` into ``--images``,
    an rsync) was trained on under the old digests, and a later run resumed that checkpoint."""

    memo: DigestMemo
    groups: list[tuple[str, list[Path], list[str | None]]]  # (what they are, files, digests at the start)

    def changed(self) -> str:
        for kind, files, before in self.groups:
            now = self.memo.digests(files, threads=min(8, os.cpu_count() or 1))
            for path, old, new in zip(files, before, now):
                if old != new:
                    was = f"sha256 {old[:12]}" if old else "missing or unreadable"
                    is_now = f"sha256 {new[:12]}" if new else "missing or unreadable"
                    return f"{path} ({kind}) changed while the training read it: {was} when it started, {is_now} now"
        return ""


class InputsChanged(WordedInputError):
    """An input of a training changed while it ran (one line naming the file; nothing written under
    the identity it no longer has)."""


def check_inputs(identity: TrainingIdentity, context: Distributed, writing: str) -> None:
    """Refuse to write ``writing`` (a checkpoint, the result file) when an input's bytes are not those
    ``identity`` names: rank 0 re-checks, every rank stops with its line."""
    problem = context.share(identity.changed_input() if context.is_main else "")
    if problem:
        raise InputsChanged(f"{problem}; {writing} is not written (the checkpoints before are of the bytes before); "
                            "re-run: the training starts again from scratch on the new bytes")


def profile_fields(task: str, profile: TrainProfile) -> dict[str, Any]:
    """The profile as it decides ``task``'s network, data and schedule (the comments above)."""
    left_out = NOT_IN_IDENTITY | (SIAMESE_ONLY if task == "counting" else frozenset())
    return profile.model_dump(exclude=set(left_out))


def training_identity(task: str, profile: TrainProfile, *, seed: int, hard: bool, task_files: list[Path],
                      images: list[Path], memo_path: Path | None, trunk: Path | None = None) -> TrainingIdentity:
    """The identity of a training run: hashes the task files, images and trunk checkpoint it reads
    (each file once; a re-run of unchanged files only stats them). Unreadable or missing images
    are part of it as such, so one appearing later changes it."""
    memo = DigestMemo(memo_path)
    file_digests = memo.digests(task_files, threads=1)
    image_digests = memo.digests(images, threads=min(8, os.cpu_count() or 1))
    fields: dict[str, Any] = {
        "format": IDENTITY_FORMAT, "task": task, "hard": hard, "seed": seed, "profile": profile_fields(task, profile),
        "task_files": combine((p.name, d) for p, d in zip(task_files, file_digests)),
        "images": combine((p.name, d) for p, d in zip(images, image_digests)), "image_count": len(images),
        "trunk": memo.digest_or_none(trunk) if trunk is not None else None,
    }
    memo.save()
    groups: list[tuple[str, list[Path], list[str | None]]] = [("a task file", list(task_files), file_digests),
                                                               ("an image", list(images), image_digests)]
    if trunk is not None:
        groups.append(("the trunk checkpoint", [trunk], [fields["trunk"]]))
    return TrainingIdentity(fields, _digest(fields), memo.hashed, memo.hashed_bytes, InputRecord(memo, groups))


def load_state(path: Path) -> dict[str, Any]:
    """A checkpoint's dict, with no pickle code run (``weights_only``)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def _inspect(directory: Path, identity: TrainingIdentity, epochs: int) -> tuple[dict[str, Any] | None, str]:
    """(the ``last.pt`` state to resume, or None; why the folder's checkpoints cannot be resumed,
    or "" when there is nothing to say)."""
    last, best = directory / LAST, directory / BEST
    if not last.exists():
        return None, (f"{best}: a best.pt without its last.pt" if best.exists() else "")
    try:
        state = load_state(last)
    except Exception as exc:  # noqa: BLE001 - torch.load raises many types; each means unreadable
        return None, f"{last}: unreadable ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
    if not isinstance(state, dict) or state.get("identity_sha256") != identity.digest:
        stored = state.get("identity") if isinstance(state, dict) else None
        return None, f"{last}: a checkpoint of other work ({'; '.join(identity.differences(stored)[:4])})"
    if state.get("epoch", 0) > epochs:
        return None, f"{last}: holds epoch {state['epoch']}, past the {epochs} asked (its chosen epoch may be later)"
    best_epoch = state.get("best_epoch", 0)
    if best_epoch or best.exists():
        try:
            kept = load_state(best)
        except Exception as exc:  # noqa: BLE001
            return None, f"{best}: unreadable or missing beside {LAST} ({type(exc).__name__})"
        # A run killed between writing best.pt and last.pt left best.pt one epoch ahead: that
        # epoch is trained again and chosen again, so best.pt is rewritten.
        kept = kept if isinstance(kept, dict) else {}
        if kept.get("identity_sha256") != identity.digest:  # say what differs (issue 46: "not the chosen epoch")
            differs = "; ".join(identity.differences(kept.get("identity"))[:4])
            return None, f"{best}: a checkpoint of other work beside this run's {LAST} ({differs})"
        if kept.get("epoch") not in (best_epoch, state["epoch"] + 1):
            return None, f"{best}: not the chosen epoch of {last} (epoch {kept.get('epoch')}, chosen {best_epoch})"
    return state, ""


def _set_aside(directory: Path, files: list[Path], reason: str, tag: str) -> Path:
    """Move ``files`` into a new ``set-aside/<time>-<tag>/`` folder and say so in one line."""
    destination = directory / SET_ASIDE / f"{time.strftime('%Y%m%dT%H%M%S')}-{tag}"
    suffix = 1
    while destination.exists():
        suffix += 1
        destination = destination.with_name(f"{destination.name.split('~')[0]}~{suffix}")
    destination.mkdir(parents=True)
    for file in files:
        os.replace(file, destination / file.name)
    print(f"{reason}: not resumed; moved aside to {destination}/ and training from scratch", flush=True)
    return destination


def _stored_tag(path: Path) -> str:
    try:
        stored = load_state(path).get("identity_sha256")
    except Exception:  # noqa: BLE001 - only a name for the folder
        return "unreadable"
    return str(stored)[:12] if stored else "unkeyed"


def resume_state(directory: Path, identity: TrainingIdentity, epochs: int,
                 context: Distributed = SINGLE) -> dict[str, Any] | None:
    """The ``last.pt`` state to resume from, or None to train from scratch, after moving aside
    whatever in ``directory`` is not this run's (and any checkpoint of the layout before
    per-task folders). Every rank gets the same answer."""
    state: dict[str, Any] | None = None
    if context.is_main:
        legacy = [p for p in (directory.parent / LAST, directory.parent / BEST) if p.exists()]
        if legacy:
            _set_aside(directory, legacy, f"{legacy[0]}: a checkpoint from before checkpoints were keyed "
                                          "(issue 37), in the folder both tasks share", "unkeyed")
        state, reason = _inspect(directory, identity, epochs)
        if reason:
            present = [p for p in (directory / LAST, directory / BEST) if p.exists()]
            _set_aside(directory, present, reason, _stored_tag(present[0]))
    if not context.share(state is not None):
        return None
    if state is None:  # another rank: rank 0 checked this very file
        state = load_state(directory / LAST)
        if state.get("identity_sha256") != identity.digest:
            raise CheckpointMismatch(f"{directory / LAST}: changed while the ranks started (not this run's "
                                     "checkpoint on this rank); run again")
    return state


def check_best(path: Path, identity: TrainingIdentity) -> dict[str, Any]:
    """The chosen epoch's state, refused when ``best.pt`` is not this run's (written over during
    the run: the run holds its folder's lock, so only by hand)."""
    state = load_state(path)
    if state.get("identity_sha256") != identity.digest:
        raise CheckpointMismatch(f"{path}: not this run's best epoch (another identity); remove {path.parent} "
                                 "and train again")
    return state
