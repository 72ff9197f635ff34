"""Two MLflow runs compared metric by metric: ``vsbench compare --runs FIRST SECOND``.

Per metric both values with their 95% intervals, the difference (second minus first), its 95%
interval, the p-value and the test that made it: paired (a paired bootstrap interval, a paired
permutation p-value, and McNemar's exact test for an accuracy) when both runs' unit files hold the
same units of the same data; unpaired (two independent bootstraps), said in one line, when the units
differ; no test when either run lacks a unit file for the metric (then only the values are shown).

A run is an evaluation run (its own unit files), an ABID pipeline's parent (its ``abid-score`` step's
unit files) or any run that names unit files itself.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from vsbench.io.terminal import wrap_lines
from vsbench.reporting.changes import count_words
from vsbench.reporting.runs import display_name, evaluation_record
from vsbench.reporting.significance import (
    UnitsReader,
    difference_line,
    format_interval,
    format_p,
    resampling_of,
    split_intervals,
    verdict_line,
)
from vsbench.stats.compare import Difference
from vsbench.tracking.evaluations import BENCHMARK_TAG, EVALUATION_STEP, LOWER_TAG
from vsbench.tracking.names import is_summary_metric, lower_is_better, note_metric
from vsbench.tracking.provenance import STEP_TAG
from vsbench.tracking.units import TOLERANCE


@dataclass(frozen=True)
class MetricPair:
    metric: str
    higher_is_better: bool
    first: float
    second: float
    first_interval: tuple[float, float]
    second_interval: tuple[float, float]
    difference: Difference | None  # None: no unit files for it in one of the runs
    note: str = ""
    # Each run's interval note (issue 55: few units, zero width, resamples left out), from its tag
    # ``interval_note.<metric>`` (an ABID parent's: its score step's); "" for none.
    interval_notes: tuple[str, str] = ("", "")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metric": self.metric, "higher_is_better": self.higher_is_better,
                               "first": _number(self.first), "second": _number(self.second),
                               "first_ci95": [_number(v) for v in self.first_interval],
                               "second_ci95": [_number(v) for v in self.second_interval]}
        if self.difference is not None:
            out.update({k: _number(v) if isinstance(v, float) else v for k, v in self.difference.as_dict().items()
                        if k not in ("metric", "first", "second")})
        else:
            out["difference"] = _number(self.second - self.first)
        if self.note:
            out["note"] = self.note
        for side, text in zip(("first", "second"), self.interval_notes):
            if text:
                out[f"{side}_interval_note"] = text
        return out


@dataclass(frozen=True)
class RunPair:
    """The comparison of two runs (``second - first`` throughout)."""

    first_run_id: str
    second_run_id: str
    first_label: str
    second_label: str
    metrics: list[MetricPair] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # unpaired because the units differ; refused files
    # The compare sheet (issue 47): "png"/"html" paths, "first_only"/"second_only" counts, and the
    # links the report uses ("png_href"/"html_href", relative to the report); empty when none was made.
    sheet: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {"first": {"run_id": self.first_run_id, "label": self.first_label},
               "second": {"run_id": self.second_run_id, "label": self.second_label},
               "metrics": [m.as_dict() for m in self.metrics], "notes": self.notes}
        if self.sheet:
            out["sheet"] = {k: v for k, v in self.sheet.items() if not k.endswith("_href")}
        return out


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _label(run: Any) -> str:
    if run.data.tags.get(STEP_TAG) == EVALUATION_STEP:
        record = evaluation_record(run)  # the model as MLflow names it (issue 57), not its options' JSON
        return f"{record.benchmark} · {display_name(record.model)}"
    return run.data.tags.get("mlflow.runName") or run.info.run_name or run.info.run_id


def _higher(metric: str, run: Any) -> bool:
    tag = run.data.tags.get(LOWER_TAG)
    if tag is not None:
        return metric not in tag.split(",")
    return not lower_is_better(metric)


def compare_runs(reader: UnitsReader, first_run_id: str, second_run_id: str,
                 metrics: list[str] | None = None) -> RunPair:
    """Every metric both runs hold (or those named), ``second - first``; see the module docstring."""
    first, second = reader.run(first_run_id), reader.run(second_run_id)
    for run in (first, second):
        if run.info.status != "FINISHED":  # a night in progress: its numbers may still change
            raise CompareRefused(f"run {run.info.run_id} is {run.info.status}, not FINISHED: its numbers may still "
                                 "change; compare it once it has finished")
    # A parent's best.<benchmark>.* (issue 57) copies one child's numbers: compare the children.
    values_a, bounds_a = split_intervals(_own_metrics(first))
    values_b, bounds_b = split_intervals(_own_metrics(second))
    units_a, units_b = reader.units_run_id(first_run_id), reader.units_run_id(second_run_id)
    if units_a and units_a != first_run_id:  # an ABID parent: its scores' intervals are on its score step
        bounds_a = {**split_intervals(reader.run(units_a).data.metrics)[1], **bounds_a}
    if units_b and units_b != second_run_id:
        bounds_b = {**split_intervals(reader.run(units_b).data.metrics)[1], **bounds_b}
    notes_a, notes_b = _interval_notes(reader, first, units_a), _interval_notes(reader, second, units_b)
    _same_benchmark(reader, first, second, units_a, units_b)
    shared = [m for m in values_a if m in values_b and (metrics is None or m in metrics)]
    if metrics:
        unknown = [m for m in metrics if m not in shared]
        if unknown:
            raise LookupError(f"runs {first_run_id} and {second_run_id} do not both hold {', '.join(unknown)}")
    if not shared:
        raise CompareRefused(f"runs {first_run_id} and {second_run_id} share no metric: nothing to compare "
                             "(compare two runs of one benchmark)")
    resampling = resampling_of(dict(second.data.params), dict(first.data.params))
    nan2 = (math.nan, math.nan)
    rows: list[MetricPair] = []
    notes: list[str] = []
    for metric in sorted(shared):
        _same_meaning(reader, metric, units_a, units_b)
        difference = (reader.difference(units_a, units_b, metric, resampling) if units_a and units_b else None)
        if difference is not None:  # the units recompute the very numbers shown (issue 54)
            _shown(metric, first_run_id, float(values_a[metric]), difference.first)
            _shown(metric, second_run_id, float(values_b[metric]), difference.second)
        note = "" if difference is not None else "no unit files for it in both runs: no test"
        rows.append(MetricPair(metric, _higher(metric, second), float(values_a[metric]), float(values_b[metric]),
                               bounds_a.get(metric, nan2), bounds_b.get(metric, nan2), difference, note,
                               (notes_a.get(metric, ""), notes_b.get(metric, ""))))
    if any(r.difference is not None and not r.difference.paired for r in rows):
        why = ("the two runs scored other data (data digests differ)" if not reader.same_data(units_a, units_b)
               else "the two runs scored different units")
        notes.append(f"unpaired: {why}; each run bootstrapped on its own")
    notes += [f"unit files refused: {why}" for why in reader.refused.values()]
    return RunPair(first_run_id, second_run_id, _label(first), _label(second), rows, notes)


def _interval_notes(reader: UnitsReader, run: Any, units_run: str) -> dict[str, str]:
    """metric -> the run's interval note (its tags; an ABID parent's score step's beside its own)."""
    tags = dict(run.data.tags)
    if units_run and units_run != run.info.run_id:
        tags = {**reader.run(units_run).data.tags, **tags}
    return {metric: text for tag, text in tags.items() if (metric := note_metric(tag))}


class CompareRefused(LookupError):
    """Two runs that cannot be compared (another benchmark, no shared metric, one still running): one
    line, exit 2 (issue 54)."""

    one_line = True


def _benchmarks(reader: UnitsReader, run: Any, units_run: str) -> set[str]:
    """What ``run`` says it scored: its benchmark tag or param, and its unit files' benchmarks."""
    named = {run.data.tags.get(BENCHMARK_TAG, ""), run.data.params.get("benchmark", "")}
    if units_run:
        named |= {units.benchmark for units in reader.units(units_run).values()}
    return {name for name in named if name}


def _same_benchmark(reader: UnitsReader, first: Any, second: Any, units_a: str, units_b: str) -> None:
    """Refuse two runs that name only different benchmarks (ABID counting against copy detection)."""
    a, b = _benchmarks(reader, first, units_a), _benchmarks(reader, second, units_b)
    if a and b and not a & b:
        raise CompareRefused(f"runs {first.info.run_id} ({', '.join(sorted(a))}) and {second.info.run_id} "
                             f"({', '.join(sorted(b))}) scored different benchmarks; compare two runs of one benchmark")


def _same_meaning(reader: UnitsReader, metric: str, units_a: str, units_b: str) -> None:
    """Refuse a metric whose unit files say it measures different things in the two runs (counting
    accuracy against verification accuracy, both logged as ``accuracy``)."""
    if not (units_a and units_b):
        return
    a, b = reader.units(units_a).get(metric), reader.units(units_b).get(metric)
    if a is not None and b is not None and (a.benchmark, a.kind) != (b.benchmark, b.kind):
        raise CompareRefused(f"{metric} means {a.benchmark} ({a.kind}s) in run {units_a} and {b.benchmark} "
                             f"({b.kind}s) in run {units_b}: not one metric; compare runs of one benchmark")


def _shown(metric: str, run_id: str, logged: float, recomputed: float) -> None:
    if not (math.isclose(logged, recomputed, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
            or (math.isnan(logged) and math.isnan(recomputed))):
        raise CompareRefused(f"run {run_id}: {metric} is logged as {logged!r} but its unit files give {recomputed!r}; "
                             "refused (the units are not those behind the number)")


def render_pair(pair: RunPair) -> str:
    """The terminal text: a block per metric (values, difference, test), then the notes; within 100
    columns, a longer line wrapped at a word under its own indentation (issue 57: long model labels,
    verdicts and notes ran to 120 and a terminal split them anywhere)."""
    lines = [f"first:  {pair.first_label} ({pair.first_run_id})",
             f"second: {pair.second_label} ({pair.second_run_id})", ""]
    for row in pair.metrics:
        better = "higher" if row.higher_is_better else "lower"
        lines.append(f"{row.metric} ({better} is better)")
        for side, value, interval, note in (("first ", row.first, row.first_interval, row.interval_notes[0]),
                                            ("second", row.second, row.second_interval, row.interval_notes[1])):
            lines.append(f"  {side}  {format_interval(value, *interval)}" + (f"  ({note})" if note else ""))
        if row.difference is not None:
            lines.append(f"  second - first  {difference_line(row.difference)}")
            if row.difference.note:  # issue 55: a weak interval of the difference says so, as a run's does
                lines.append(f"  ({row.difference.note})")
            lines.append(f"  verdict  {verdict_line(row.difference, row.higher_is_better)}")
        else:
            lines.append(f"  second - first  {row.second - row.first:+.4g} ({row.note})")
    if pair.notes:
        lines += ["", *pair.notes]
    lines += ["", "[low, high]: 95% interval; the difference's from a paired bootstrap (the same resampled units "
              "for both runs) when paired"]
    return wrap_lines("\n".join(lines))


def pair_table(pair: RunPair) -> str:
    """The report's table of the difference per metric (second minus first)."""
    rows = []
    for row in pair.metrics:
        d = row.difference
        if d is None:
            cells = (f"<td>{row.second - row.first:+.4g}</td><td>-</td><td>-</td>"
                     f"<td>{html.escape(row.note)}</td><td>-</td><td>-</td>")
        else:
            mcnemar = (f"{d.mcnemar[0]} / {d.mcnemar[1]}, {format_p(d.mcnemar[2])}" if d.mcnemar else "-")
            cells = (f"<td>{d.difference:+.4g}</td><td>{_with_note(f'[{d.low:+.4g}, {d.high:+.4g}]', d.note)}</td>"
                     f"<td>{html.escape(format_p(d.p_value))}</td><td>{html.escape(d.test)}</td>"
                     f"<td>{html.escape(mcnemar)}</td>"
                     f"<td>{html.escape(verdict_line(d, row.higher_is_better))}</td>")
        rows.append(f'<tr data-metric="{html.escape(row.metric)}"><td>{html.escape(row.metric)}</td>'
                    f"<td>{_with_note(format_interval(row.first, *row.first_interval), row.interval_notes[0])}</td>"
                    f"<td>{_with_note(format_interval(row.second, *row.second_interval), row.interval_notes[1])}</td>"
                    f"{cells}</tr>")
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in pair.notes)
    notes += _sheet_link(pair)
    return (f'<h3>{html.escape(pair.second_label)} minus {html.escape(pair.first_label)}</h3>'
            '<table class="pair"><thead><tr><th>metric</th><th>first [95% interval]</th>'
            "<th>second [95% interval]</th><th>difference</th><th>95% interval</th><th>p</th><th>test</th>"
            f"<th>McNemar (first only / second only)</th><th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{notes}")


def _with_note(text: str, note: str) -> str:
    """A value and interval, escaped, with the interval's note beside it (issue 55)."""
    return html.escape(text) + (f' <span class="ci-note">({html.escape(note)})</span>' if note else "")


def _sheet_link(pair: RunPair) -> str:
    """The line under a pair's table linking its compare sheet (the units right in one run only)."""
    sheet = pair.sheet
    if not sheet.get("html_href"):
        return ""
    counts = count_words(sheet)
    png = f' (<a href="{html.escape(sheet["png_href"])}">PNG</a>)' if sheet.get("png_href") else ""
    return (f'<p class="sheet">What changed: <a href="{html.escape(sheet["html_href"])}">{html.escape(counts)}</a>'
            f"{png}</p>")


def _own_metrics(run: Any) -> dict[str, float]:
    """The run's metrics but a parent's summary copies (:func:`~vsbench.tracking.names.is_summary_metric`)."""
    return {name: value for name, value in run.data.metrics.items() if not is_summary_metric(name)}
