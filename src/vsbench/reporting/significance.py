"""Intervals and tests for the readers of MLflow runs: the leaderboard, ``vsbench compare``, the report
and the nightly check all speak in differences with intervals and p-values, not in bare gaps.

What a run holds (issue 45, docs/tracking.md): each headline metric ``m`` beside ``m_ci95_low`` and
``m_ci95_high`` (its expanded percentile bootstrap interval), the interval's params (``ci_method``,
``ci_resamples``, ``ci_seed``, ``ci_level``, ``ci_proportions``), and its per-unit outcomes as unit files named by the
tag ``vsbench.units`` (:mod:`vsbench.tracking.units`). The interval metrics are read as the interval
of their metric, never as metrics of their own (:func:`split_intervals`).

Two runs' metric is compared with :func:`vsbench.stats.compare.compare` on their unit files: paired
when both scored the same units (the same ids) of the same data (the same ``vsbench.data.digest``
where both record one), else unpaired (two independent bootstraps). :class:`UnitsReader` downloads a
run's unit files once (verified against the tag's digests) and keeps them for every later question;
a file refused for its digest is remembered as refused, said once, and never used.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsbench.stats.compare import Difference, compare, verdict
from vsbench.stats.resample import MAX_RESAMPLES, Resampling
from vsbench.stats.units import Units, UnitsError
from vsbench.tracking.names import interval_name
from vsbench.tracking.provenance import DATA_DIGEST_TAG, PARENT_TAG, STEP_TAG
from vsbench.tracking.units import UNITS_TAG, fetch_units

ALPHA = 0.05
# The step whose run holds ABID's unit files (its parent holds the headline scores).
ABID_SCORE_STEP = "abid-score"


def split_intervals(metrics: Mapping[str, float]) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """(the metrics without their interval bounds, metric -> (low, high)). A bound whose metric the
    run does not hold stays a metric (it is nobody's interval); a metric with one bound only gets none."""
    plain: dict[str, float] = {}
    bounds: dict[str, dict[str, float]] = {}
    for name, value in metrics.items():
        split = interval_name(name)
        if split is not None and split[0] in metrics:
            bounds.setdefault(split[0], {})[split[1]] = float(value)
        else:
            plain[name] = value
    return plain, {m: (b["low"], b["high"]) for m, b in bounds.items() if "low" in b and "high" in b}


def format_interval(value: float, low: float, high: float, digits: int = 4) -> str:
    """``0.4523 [0.4012, 0.5011]``; the value alone when the interval is unknown."""
    text = f"{value:.{digits}g}"
    if math.isfinite(low) and math.isfinite(high):
        text += f" [{low:.{digits}g}, {high:.{digits}g}]"
    return text


def format_p(p: float) -> str:
    if not math.isfinite(p):
        return "-"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def resampling_of(*params: Mapping[str, str]) -> Resampling:
    """The resampling the runs' intervals were drawn with (the first run naming ``ci_resamples``),
    else the environment's (``VSBENCH_RESAMPLES``, ``VSBENCH_RESAMPLE_SEED``) and the defaults. A run
    logged with intervals off still gets a test: the default number of resamples."""
    for found in params:
        try:
            resamples = int(found.get("ci_resamples", ""))
            seed = int(found.get("ci_seed", "0") or 0)
        except ValueError:
            continue
        if 10 <= resamples <= MAX_RESAMPLES:  # a param over the cap is not obeyed (it is data)
            return Resampling(resamples, seed)
    fallback = Resampling.from_env()
    return fallback if fallback.enabled else Resampling(seed=fallback.seed)


def compare_metric(first: Units, second: Units, metric: str, resampling: Resampling, *,
                   same_data: bool = True) -> Difference:
    """``second - first`` for one metric: paired when both scored the same units of the same ground
    truth, else unpaired, saying why (a truth of another digest is compared unpaired even where its
    unit ids coincide)."""
    why = "" if same_data else "their ground truths differ (another vsbench.data.digest under the same ids)"
    return compare(first, second, resampling, [metric], unpaired_because=why)[metric]


def bad_direction(difference: Difference, higher_is_better: bool) -> bool:
    """The second run is worse than the first, and not by chance: the one decision rule
    (:attr:`~vsbench.stats.compare.Difference.distinguishable`, the 95% interval of the difference
    excludes 0), on the worse side. The test's p-value is reported beside it, never a second rule."""
    if not difference.distinguishable:
        return False
    return bool(difference.high < 0 if higher_is_better else difference.low > 0)


VERDICT_WORDS = {"same": "indistinguishable (≈): the 95% interval of the difference holds 0",
                 "better": "the second is better: the 95% interval of the difference excludes 0",
                 "worse": "the second is worse: the 95% interval of the difference excludes 0"}


def verdict_line(difference: Difference, higher_is_better: bool) -> str:
    """The verdict in words, from the one rule (:func:`vsbench.stats.compare.verdict`)."""
    return VERDICT_WORDS[verdict(difference, higher_is_better)]


def difference_line(difference: Difference) -> str:
    """One line: ``-0.031 [-0.052, -0.011], p=0.004 (paired permutation test ...)`` plus McNemar's counts."""
    text = (f"{difference.difference:+.4g} [{difference.low:+.4g}, {difference.high:+.4g}], "
            f"{format_p(difference.p_value)} ({difference.test})")
    if difference.test_disagrees:
        text += "; the test and the interval disagree at this edge: the verdict is the interval's"
    return text


@dataclass
class UnitsReader:
    """Unit files of MLflow runs, each run's downloaded at most once (verified against its tag).

    ``refused`` keeps, per run, why its files cannot be used (a bad digest, a missing artifact): the
    readers say it once and fall back to what they do without unit files. ``strict`` (``vsbench compare
    --runs``): a refused file is raised instead, one line naming the run and the file, exit 2: a
    comparison of two named runs has nothing to fall back to."""

    client: Any
    cache: Path | None = None
    strict: bool = False

    def __post_init__(self) -> None:
        self._units: dict[str, dict[str, Units]] = {}
        self._runs: dict[str, Any] = {}
        self._score_runs: dict[str, str] = {}
        self._differences: dict[tuple[str, str, str, Resampling | None], Difference | None] = {}
        self.refused: dict[str, str] = {}
        self.downloads = 0  # runs whose files were fetched (tests check the cache)
        if self.cache is None:
            self.cache = Path(tempfile.mkdtemp(prefix="vsbench-units-"))

    def run(self, run_id: str) -> Any:
        if run_id not in self._runs:
            self._runs[run_id] = self.client.get_run(run_id)
        return self._runs[run_id]

    def remember(self, run: Any) -> None:
        """A run already read (a search result): no second request for its tags."""
        self._runs.setdefault(run.info.run_id, run)

    def units_run_id(self, run_id: str) -> str:
        """The run whose unit files cover ``run_id``'s metrics: itself when it names unit files; for a
        pipeline's parent (the ABID pipeline keeps its scores there), its one ``abid-score`` step when
        that names them; "" when none."""
        run = self.run(run_id)
        if run.data.tags.get(UNITS_TAG):
            return run_id
        if run.data.tags.get(STEP_TAG) != "pipeline":
            return ""
        if run_id not in self._score_runs:
            found = self.client.search_runs(
                [run.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{run_id}' and "
                f"tags.`{STEP_TAG}` = '{ABID_SCORE_STEP}'", max_results=2)
            named = [r for r in found if r.data.tags.get(UNITS_TAG)]
            for r in named:
                self.remember(r)
            self._score_runs[run_id] = named[0].info.run_id if len(named) == 1 else ""
        return self._score_runs[run_id]

    def units(self, run_id: str) -> dict[str, Units]:
        """metric -> Units of ``run_id`` (itself naming unit files); empty when refused (see ``refused``)."""
        if run_id in self._units:
            return self._units[run_id]
        try:
            self.downloads += 1
            found = fetch_units(self.client, self.run(run_id), self.cache)
        except UnitsError as exc:
            if self.strict:
                raise
            self.refused[run_id] = str(exc)
            found = {}
        self._units[run_id] = found
        return found

    def data_digest(self, run_id: str) -> str:
        """The data digest the run records (its own tag, else its parent's); "" when unrecorded."""
        run = self.run(run_id)
        digest = run.data.tags.get(DATA_DIGEST_TAG, "")
        if not digest and run.data.tags.get(PARENT_TAG):
            digest = self.run(run.data.tags[PARENT_TAG]).data.tags.get(DATA_DIGEST_TAG, "")
        return digest

    def same_data(self, first: str, second: str) -> bool:
        """Both runs scored data with the same digest (or either does not say: the ids decide)."""
        a, b = self.data_digest(first), self.data_digest(second)
        return not a or not b or a == b

    def difference(self, first: str, second: str, metric: str, resampling: Resampling | None = None,
                   ) -> Difference | None:
        """``second - first`` of ``metric`` from the two runs' unit files (each the run naming them, see
        :meth:`units_run_id`); None when either lacks a unit file for it or its file was refused."""
        key = (first, second, metric, resampling)
        if key in self._differences:  # the terminal's leaderboard and the report ask the same
            return self._differences[key]
        a, b = self.units(first).get(metric), self.units(second).get(metric)
        found = None
        if a is not None and b is not None:
            chosen = resampling or resampling_of(dict(self.run(second).data.params),
                                                 dict(self.run(first).data.params))
            try:
                found = compare_metric(a, b, metric, chosen, same_data=self.same_data(first, second))
            except UnitsError as exc:  # the two files compute the metric differently
                if self.strict:
                    raise UnitsError(f"runs {first} and {second}: {metric}: {exc}") from None
                self.refused.setdefault(f"{first} vs {second}", f"{metric}: {exc}")
        self._differences[key] = found
        return found
