"""`changed()` counts a unit only one run judged as unjudged, never as a change (issue 56: the
mutants ``judged[i] and judged[j]`` -> ``or`` and ``unjudged += 1`` -> ``= 1`` survived). Both rules:
right/wrong and rank of the first true match."""

from __future__ import annotations

import numpy as np
import pytest

from vsbench.stats.outcomes import Outcomes, changed


class _Ids:
    """The part of a unit file `changed()` reads: the unit ids (and their count)."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = np.asarray(ids)

    def __len__(self) -> int:
        return len(self.ids)


def _outcomes(ids: list[str], right: list[bool], judged: list[bool], rank: list[float] | None) -> Outcomes:
    return Outcomes(_Ids(ids), np.asarray(right), np.asarray(judged), np.zeros(len(ids)), "rule",  # type: ignore[arg-type]
                    lambda row: "", rank=None if rank is None else np.asarray(rank, dtype=float))


@pytest.mark.parametrize("by_rank", [False, True])
def test_a_unit_judged_by_one_run_only_is_unjudged(by_rank: bool) -> None:
    # u1: judged in the first only (right there), u2: in the second only (right there), u3: neither;
    # u0 right in both (same), u4 right only in the first, u5 only in the second. The second run's
    # rows in another order (matched by id).
    first = _outcomes(["u0", "u1", "u2", "u3", "u4", "u5"], [True, True, False, False, True, False],
                      [True, True, False, False, True, True], [1, 1, 2, 3, 1, 4] if by_rank else None)
    second = _outcomes(["u5", "u4", "u3", "u2", "u1", "u0", "x"], [True, False, True, True, False, True, True],
                       [True, True, False, True, False, True, True], [1, 3, 2, 1, 5, 1, 1] if by_rank else None)
    result = changed(first, second, by_rank=by_rank)
    assert result.unjudged == 3 and result.same == 1 and result.unmatched == 1
    assert [first.units.ids[i] for i, _ in result.first_only] == ["u4"]
    assert [first.units.ids[i] for i, _ in result.second_only] == ["u5"]


def _with_ap(ids: list[str], ap: list[float], rank: list[float] | None = None) -> Outcomes:
    return Outcomes(_Ids(ids), np.zeros(len(ids), dtype=bool), np.ones(len(ids), dtype=bool), np.zeros(len(ids)),
                    "rule", lambda row: "", rank=None if rank is None else np.asarray(rank, dtype=float),
                    ap=np.asarray(ap, dtype=float))


def test_aps_are_compared_before_ranks_within_a_summations_last_bits() -> None:
    """Issue 55 item 8: a unit's own AP, where both rules give it, decides (u0's first match stays at rank
    1 while its AP moves); APs a summation's last bits apart (u1) are the same AP, a move of 1e-7 (u2) is
    not; each section largest move first, the first run's order between equal moves (u3, u4)."""
    first = _with_ap(["u0", "u1", "u2", "u3", "u4"], [0.5, 0.5, 0.5, 0.25, 0.5], [1, 1, 1, 4, 2])
    second = _with_ap(["u4", "u3", "u2", "u1", "u0"], [0.75, 0.5, 0.5 - 1e-7, 0.5 + 1e-15, 1.0], [1, 2, 1, 1, 1])
    result = changed(first, second, by_rank=True)
    assert result.measure == "ap" and result.by_rank and result.same == 1
    assert [first.units.ids[i] for i, _ in result.first_only] == ["u2"]
    assert [first.units.ids[i] for i, _ in result.second_only] == ["u0", "u3", "u4"]
    assert [second.units.ids[j] for _, j in result.second_only] == ["u0", "u3", "u4"]  # matched by id
    assert first.ap_words(3) == "AP 0.25"
    # Without ``by_rank`` the rule's right/wrong stands; a rule without APs keeps the rank.
    assert changed(first, second).measure == "" and not changed(first, second).by_rank
    ranked = changed(_outcomes(["u"], [False], [True], [2]), _with_ap(["u"], [1.0], [1]), by_rank=True)
    assert ranked.measure == "rank" and len(ranked.second_only) == 1


def test_ranks_far_down_a_long_list_still_count_as_moves() -> None:
    """Ranks are compared exactly (their reciprocals differ by under the APs' 1e-9 past rank 31623)."""
    result = changed(_outcomes(["u"], [False], [True], [100000]), _outcomes(["u"], [False], [True], [100001]),
                     by_rank=True)
    assert [(i, j) for i, j in result.first_only] == [(0, 0)] and result.same == 0


def test_an_ap_per_unit_or_nothing() -> None:
    with pytest.raises(ValueError, match="2 APs for 3 units"):
        _with_ap(["a", "b", "c"], [0.5, 0.5])


@pytest.mark.parametrize("by_rank", [False, True])
@pytest.mark.parametrize("numbers_in", ["first", "second"])
def test_units_are_paired_by_their_ids_as_text_whatever_each_runs_id_dtype(by_rank: bool, numbers_in: str) -> None:
    """A run scored in this process may hold numeric unit ids, one read back from its unit file holds
    them as text (Parquet strings): unit 7 is ``"7"`` in both, paired, never "only one run scored",
    whichever run holds the numbers (make mutate's stats_outcomes survivors: the ids' ``dtype=str``
    dropped, for either run; each seen failing planted)."""
    ids_a: list = [7, 8] if numbers_in == "first" else ["7", "8"]
    ids_b: list = ["8", "7"] if numbers_in == "first" else [8, 7]
    first = _outcomes(ids_a, [True, False], [True, True], [1, 3] if by_rank else None)
    second = _outcomes(ids_b, [True, True], [True, True], [1, 1] if by_rank else None)
    result = changed(first, second, by_rank=by_rank)
    assert (result.unmatched, result.unjudged, result.same) == (0, 0, 1)
    assert result.first_only == [] and result.second_only == [(1, 0)]  # unit 8: row 1 in the first, row 0 in the second
