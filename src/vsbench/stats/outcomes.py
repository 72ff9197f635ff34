"""Each unit of an evaluation judged right or wrong, and the units two runs judged differently.

Why: a paired test says *whether* two runs differ; a person looking at a failed nightly check wants
to see *where*: the units one run got right and the other wrong, both ways (issue 47, "what changed
between two runs"). That needs one yes/no per unit, read from what the unit file already holds
(:mod:`vsbench.stats.units`: no image, no feature, no search again).

Each benchmark family defines its rule next to its units (``copy_detection_outcomes`` in
:mod:`vsbench.benchmarks.disc.units`, ``counting`` answers in :mod:`vsbench.abid.units` ...); this
module holds what every rule returns (:class:`Outcomes`), the generic rule for a unit file with a
0/1 ``correct`` column (:func:`correct_outcomes`), and the pairing (:func:`changed`). A rule may leave
units unjudged (``judged`` False: a DISC query without a copy has no right answer at rank 1); those
are never listed as changed. A rule over a ranking also gives each unit's own AP or its first true
match's rank, which a comparison of a ranking metric lists instead (issue 55 item 8: a match climbing
from rank 3 to 2 is no change of right/wrong).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vsbench.stats.units import Units

NO_ANSWER = "no answer"


@dataclass(frozen=True)
class Shown:
    """An image a unit's row shows, by the id its unit file names it with. ``kind``: ``unit`` (the
    unit's own photo(s), found by the benchmark from the unit id), ``reference`` (an index/gallery
    image id, e.g. a query's top match) or ``candidate`` (the 0-based place in the unit's candidate
    list, which only the benchmark's files name: product search). ``mark``: a key of
    :data:`vsbench.reporting.sheets.MARKS` (``true``/``false`` match, ``query``, "")."""

    image: str
    caption: tuple[str, ...] = ()
    mark: str = ""
    kind: str = "reference"


@dataclass(frozen=True)
class Outcomes:
    """One run's verdict per unit (rows of ``units``): ``right`` where ``judged``; ``severity`` how
    wrong a unit is (larger: worse; orders the sheet), ``rule`` the rule in one line; ``answer(row)``
    the run's answer in words and ``shows(row)`` the images it points at (its top match), both
    computed only for the rows a sheet shows."""

    units: Units
    right: np.ndarray  # bool, one per unit
    judged: np.ndarray  # bool: units the rule decides
    severity: np.ndarray  # float, one per unit
    rule: str
    answer: Callable[[int], str]
    shows: Callable[[int], tuple[Shown, ...]] = lambda row: ()
    # 1-based rank of each judged unit's first true match (inf: none retrieved), for a rule over a
    # ranking; None for a rule without one. A global-ranking metric (uAP, recall at p90) moves when a
    # true match climbs from rank 3 to 1, which right/wrong at rank 1 does not see (issue 55 item 8).
    rank: np.ndarray | None = None
    # Each judged unit's own AP, for a rule whose metric averages or pools per-query rankings with
    # several true matches (Copydays, product search): a query's AP moves with any of its matches,
    # its first match's rank only with that one. Compared before ``rank`` where both runs hold it.
    ap: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.units)
        if not (len(self.right) == len(self.judged) == len(self.severity) == n):
            raise ValueError(f"{len(self.right)} verdicts, {len(self.judged)} judged flags and "
                             f"{len(self.severity)} severities for {n} units")
        if self.rank is not None and len(self.rank) != n:
            raise ValueError(f"{len(self.rank)} ranks for {n} units")
        if self.ap is not None and len(self.ap) != n:
            raise ValueError(f"{len(self.ap)} APs for {n} units")

    def ap_words(self, row: int) -> str:
        """A unit's own AP as a sheet's row says it (``AP 0.3333``); for a rule that gives APs."""
        return f"AP {number(self.ap[row])}"  # type: ignore[index]


@dataclass(frozen=True)
class Changes:
    """Units both runs judged, right in one and wrong in the other: ``(row in first, row in second)``,
    the worst (by the wrong run's severity) first. ``unmatched``: units only one run holds;
    ``unjudged``: shared units a rule left undecided in either run; ``same``: shared units both
    runs judged alike."""

    first_only: list[tuple[int, int]]  # right in the first run, wrong in the second
    second_only: list[tuple[int, int]]  # right in the second run, wrong in the first
    unmatched: int
    unjudged: int
    same: int
    # "" (right/wrong); "rank" or "ap": first_only/second_only hold the units whose first true match
    # ranked higher, or whose own AP was higher, in that run
    measure: str = ""

    @property
    def by_rank(self) -> bool:
        """Whether the units were compared by a ranking value (rank or AP), not right/wrong."""
        return bool(self.measure)


# Two APs closer than this are the same AP: one query's AP summed over result lists of other
# lengths may differ in its last bits (numpy's pairwise summation), which is no change to show.
AP_SAME = 1e-9


def changed(first: Outcomes, second: Outcomes, by_rank: bool = False) -> Changes:
    """The units whose verdict differs between two runs, matched by unit id (order and subset free).
    ``by_rank``: where both rules give each unit's own AP, the units whose AP moved, each listed under
    the run with the higher AP, the largest move first; else where both rank, the units whose first
    true match moved, under the run that ranked it higher, the largest move of its reciprocal rank (its
    AP with one true match) first. A rule with neither keeps right/wrong."""
    if by_rank and first.ap is not None and second.ap is not None:
        return _moves(first, second, first.ap, second.ap, "ap")
    if by_rank and first.rank is not None and second.rank is not None:
        return _moves(first, second, 1.0 / first.rank, 1.0 / second.rank, "rank")  # 1/inf = 0: not retrieved
    ids_a = np.asarray(first.units.ids, dtype=str)
    ids_b = np.asarray(second.units.ids, dtype=str)
    row_b = {unit: row for row, unit in enumerate(ids_b.tolist())}
    pairs = [(i, row_b[unit]) for i, unit in enumerate(ids_a.tolist()) if unit in row_b]
    unmatched = len(ids_a) + len(ids_b) - 2 * len(pairs)
    first_only: list[tuple[int, int]] = []
    second_only: list[tuple[int, int]] = []
    unjudged = same = 0
    for i, j in pairs:
        if not (first.judged[i] and second.judged[j]):
            unjudged += 1
        elif bool(first.right[i]) == bool(second.right[j]):
            same += 1
        elif first.right[i]:
            first_only.append((i, j))
        else:
            second_only.append((i, j))
    # Worst first: the wrong run's severity, then the first run's order (stable, no float sums).
    first_only.sort(key=lambda p: -float(second.severity[p[1]]))
    second_only.sort(key=lambda p: -float(first.severity[p[0]]))
    return Changes(first_only, second_only, unmatched, unjudged, same)


def _moves(first: Outcomes, second: Outcomes, value_a: np.ndarray, value_b: np.ndarray, measure: str) -> Changes:
    """The judged units whose value (higher: better) moved, under the run where it is higher."""
    ids_b = {unit: row for row, unit in enumerate(np.asarray(second.units.ids, dtype=str).tolist())}
    ids_a = np.asarray(first.units.ids, dtype=str).tolist()
    pairs = [(i, ids_b[unit]) for i, unit in enumerate(ids_a) if unit in ids_b]
    same_within = AP_SAME if measure == "ap" else 0.0  # ranks are integers: their reciprocals are exact
    better_a: list[tuple[float, int, int]] = []
    better_b: list[tuple[float, int, int]] = []
    unjudged = same = 0
    for i, j in pairs:
        if not (first.judged[i] and second.judged[j]):
            unjudged += 1
            continue
        a, b = float(value_a[i]), float(value_b[j])
        move = abs(a - b)
        if move <= same_within:
            same += 1
            continue
        (better_a if a > b else better_b).append((move, i, j))
    # Largest move first; equal moves in the first run's order (a stable sort, no float sums).
    better_a.sort(key=lambda m: -m[0])
    better_b.sort(key=lambda m: -m[0])
    return Changes([(i, j) for _, i, j in better_a], [(i, j) for _, i, j in better_b],
                   len(ids_a) + len(ids_b) - 2 * len(pairs), unjudged, same, measure=measure)


def correct_outcomes(units: Units, column: str = "correct") -> Outcomes:
    """The generic rule: a 0/1 ``correct`` column (an accuracy's units) is the verdict itself."""
    correct = units.values(column) > 0.5
    return Outcomes(units, correct, np.ones(len(units), dtype=bool), (~correct).astype(np.float64),
                    f"right: {column} = 1", lambda row: "right" if correct[row] else "wrong")


def first_true_rank(labels: np.ndarray, order: np.ndarray) -> int | None:
    """1-based place of the first true label when the list is read in ``order``; None when none is true."""
    hits = np.flatnonzero(np.asarray(labels)[order])
    return int(hits[0]) + 1 if hits.size else None


def number(value: float) -> str:
    """A score or distance as a caption shows it (4 significant digits)."""
    return f"{float(value):.4g}"
