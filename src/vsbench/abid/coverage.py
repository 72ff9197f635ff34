"""Why a task file of ``prepare`` came out empty, and about how many bins would fill it.

Why: a small download (``--limit 5``) gives validation and verification files with 0 entries, and
a training or scoring step then fails far from the cause, or scores nothing. ``prepare`` still
writes every file (an empty list is a valid file in the challenge's format), but names each empty
one in one warning with the reason and the size that would fill it; this module finds both from
the split and the bins' contents, so the reason is the data's, not a guess from the file name.

The sizes: the split's is exact (the validation split is ``round(val_fraction * eligible)``, so
``ceil(0.5 / val_fraction)`` eligible bins give it one bin). The files that need an asin shared
between bins depend on how often asins repeat; ``SHARED_ASIN_BINS`` is measured on the generated
bins (``vsbench.abid.synth``, tuned to ABID's published repetition): with 50 bins every one of
these files had entries for 5 or 6 of 6 seeds, with 20 for 1 to 5 of 6, with 5 for none. A run of
consecutive real ids may repeat asins less; the figure is an order of magnitude, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

MODERATE_MAX_QUANTITY = 5  # the moderate task sets keep bins with at most this many items (upstream's rule)

SHARED_ASIN_BINS = 50  # eligible bins after which asin-sharing files are filled (module doc)


class _Tasks(Protocol):
    """What :class:`vsbench.abid.prepare.AbidTasks` offers that the reasons need."""

    items: Sequence[Sequence[Any]]
    instances: dict[str, dict[str, Any]]

    def quantity(self, idx: int) -> int: ...


@dataclass(frozen=True)
class EmptyFile:
    """One task file written with 0 entries: its name, why, and what would fill it."""

    file: str
    reason: str
    needed: str

    def line(self) -> str:
        return f"{self.file} is empty: {self.reason}; {self.needed}"


def _split_bins_needed(val_fraction: float) -> int:
    """Eligible bins for a validation split of one bin (and a training split of at least one)."""
    return max(2, math.ceil(0.5 / val_fraction))


def _shared_needed(eligible: int) -> str:
    return f"about {max(SHARED_ASIN_BINS, eligible + 1)} eligible bins are needed (there are {eligible})"


def explain_empty(
    name: str, tasks: _Tasks, train: Sequence[int], val: Sequence[int], *, val_fraction: float,
) -> EmptyFile:
    """The reason ``name`` (written empty) has no entries; ``train``/``val`` are 0-based indices."""

    limit = MODERATE_MAX_QUANTITY + 1  # the moderate sets keep bins with fewer items (upstream's rule)
    eligible = len(train) + len(val)
    split_needed = (f"at least {_split_bins_needed(val_fraction)} eligible bins are needed at val_fraction "
                    f"{val_fraction} (there are {eligible})")
    if eligible == 0:
        return EmptyFile(name, "no bin has both an image and a valid metadata file", split_needed)
    split, rows = ("validation", val) if "_val" in name else ("training", train)
    if name.startswith("random_") or not rows:
        if split == "validation":
            return EmptyFile(name, f"the validation split is empty ({val_fraction} x {eligible} eligible bins "
                                   "rounds to 0)", split_needed)
        return EmptyFile(name, "the training split is empty (every eligible bin went to validation)", split_needed)
    nonempty = [i for i in rows if tasks.quantity(i) > 0]
    moderate = not name.endswith("_hard.json")
    if name == "instances.json":
        return EmptyFile(name, "no eligible bin has EXPECTED_QUANTITY > 0", "bins holding items are needed")
    if name.startswith("counting_"):
        return EmptyFile(name, f"every {split} bin holds {limit} or more items (the moderate set keeps "
                               f"fewer than {limit})", f"{split} bins with 0-{limit - 1} items are needed")
    candidates = [i for i in nonempty if not moderate or tasks.quantity(i) < limit]
    if not candidates:
        rule = f"1-{limit - 1} items" if moderate else "any items"
        return EmptyFile(name, f"no {split} bin holds {rule}", f"{split} bins holding {rule} are needed")
    if name.startswith("obj_verification_train"):
        return EmptyFile(name, "no training bin holds an asin that is also in two other training bins",
                         _shared_needed(eligible))
    train_asins = {item.asin for i in train for item in tasks.items[i]
                   if tasks.quantity(i) > 0 and (not moderate or tasks.quantity(i) < limit)}
    shares = [i for i in candidates if any(item.asin in train_asins for item in tasks.items[i])]
    if not shares:
        return EmptyFile(name, "no validation bin shares an asin with a training bin", _shared_needed(eligible))
    if name.startswith("obj_verification_val") and len(train_asins) <= 1:
        return EmptyFile(name, "no training asin is absent from a validation bin (no 'no' question can be asked)",
                         _shared_needed(eligible))
    return EmptyFile(name, f"only {len(shares)} validation bins share an asin with a training bin and the "
                           "questions are balanced (as many 'no' as 'yes'): none of one class was drawn",
                     _shared_needed(eligible))


def explain_all(
    counts: dict[str, int], tasks: _Tasks, train: Sequence[int], val: Sequence[int], *, val_fraction: float,
) -> list[EmptyFile]:
    """:func:`explain_empty` for every file of ``counts`` (name -> entries) that has 0 entries."""
    return [explain_empty(name, tasks, train, val, val_fraction=val_fraction)
            for name, entries in counts.items() if entries == 0]


def warning_line(empty: Sequence[EmptyFile]) -> str:
    """One warning naming every empty file with its reason ("" when none is empty)."""
    if not empty:
        return ""
    return f"warning: {len(empty)} task files are empty: " + " | ".join(item.line() for item in empty)
