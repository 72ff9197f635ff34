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
