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
