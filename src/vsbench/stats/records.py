"""A score's records with their intervals, and their per-unit outcomes written beside them.

The one place a runner (the similarity engine, the ABID score step, ``vsbench score``) turns a
benchmark's records and units into what it keeps: each headline metric's interval added to its record
as ``<metric>_ci95_low`` / ``<metric>_ci95_high`` (the record's own values untouched), and each
record's units written as ``units/<benchmark>-<variant>.parquet`` under the output folder, named with
its SHA-256 in the returned entries (``metrics.json``'s ``units``, the evaluation's MLflow run).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from vsbench.stats.compare import interval_fields, interval_notes, intervals
from vsbench.stats.names import interval_name
from vsbench.stats.proportions import CLOPPER_PEARSON, PLURAL
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units

UNITS_DIR = "units"
EXACT_WORDS = "exact Clopper-Pearson interval, which covers near 0 and 1 (docs/intervals.md)"


def unit_file_name(benchmark: str, record: Mapping[str, Any], index: int) -> str:
    """``disc-Flat-none.parquet``: the benchmark and the record's text fields, file-name safe; a short
    digest keeps two variants whose safe names collide apart."""
    variant = [str(v) for v in record.values() if isinstance(v, str)]
    text = "-".join([benchmark, *variant]) if variant else f"{benchmark}-{index}"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in text)[:120]
    tag = hashlib.sha256("\x1f".join([benchmark, *variant, str(index)]).encode()).hexdigest()[:8]
    return f"{safe}-{tag}.parquet"


def add_intervals(benchmark: str, records: Sequence[MutableMapping[str, Any]], units: Sequence[Units | None],
                  out: Path, resampling: Resampling | None = None) -> list[dict[str, Any] | None]:
    """Intervals into ``records`` (in place) and unit files under ``out/units``; one entry per record
    (``file`` relative to ``out``, ``sha256``, ``kind``, ``units``, ``metrics``, ``ci``, and ``notes``:
    metric -> its interval's edge note, where one has any; ``exact``: the metrics whose interval is
    Clopper-Pearson's, where any), None where the
    benchmark gave no units. Intervals off (``VSBENCH_RESAMPLES=0``) still writes the units: a later
    comparison needs them, not the intervals."""
    resampling = resampling or Resampling.from_env()
    entries: list[dict[str, Any] | None] = []
    for index, record in enumerate(records):
        unit = units[index] if index < len(units) else None
        if unit is None:
            entries.append(None)
            continue
        metrics = [m for m in unit.metrics if m in record]
        started = time.perf_counter()
        notes: dict[str, str] = {}
        exact: list[str] = []
        if resampling.enabled and metrics:
            found = intervals(unit, resampling, metrics)
            record.update(interval_fields(found, resampling.percent))
            notes = interval_notes(found)
            exact = [m for m, interval in found.items() if interval.method == CLOPPER_PEARSON]
        seconds = time.perf_counter() - started
        name = unit_file_name(benchmark, record, index)
        sha256 = unit.write(Path(out) / UNITS_DIR / name)
        entries.append({"file": f"{UNITS_DIR}/{name}", "sha256": sha256, "kind": unit.kind, "units": len(unit),
                        "metrics": metrics, "ci": resampling.params(), "seconds": round(seconds, 3),
                        **({"notes": notes} if notes else {}), **({"exact": exact} if exact else {})})
        if unit.clusters is not None:  # drawn in groups (issue 55): the heading says how many
            entries[-1]["groups"] = unit.cluster_index()[1]
    return entries


def intervals_note(entries: Sequence[Mapping[str, Any] | None]) -> str:
    """One line for a table whose records carry no units (a plugin that declares none)."""
    return "" if any(entries) else "no intervals: this benchmark declares no per-unit outcomes (docs/intervals.md)"


def warn_without_units(benchmark: str, entries: Sequence[Mapping[str, Any] | None]) -> None:
    if entries and not any(entries):
        print(f"vsbench: {benchmark}: {intervals_note(entries)}", file=sys.stderr)


def is_interval_field(key: str) -> bool:
    """``uap_ci95_low`` and the like: printed beside their metric, not as columns of their own."""
    return interval_name(key) is not None


def format_interval(value: float, low: float | None, high: float | None) -> str:
    """``0.6094 [0.5812, 0.6370]``; the bare value when there is no interval."""
    if low is None or high is None:
        return f"{value:.4f}"
    return f"{value:.4f} [{low:.4f}, {high:.4f}]"


def interval_lines(records: Sequence[Mapping[str, Any]], entries: Sequence[Mapping[str, Any] | None],
                   percent: int = 95) -> list[str]:
    """The printed table's interval block: one line per (record, metric with an interval), the variant
    first, at most 80 columns for the usual names; a heading that says what was resampled and how."""
    lines: list[str] = []
    shown = [(record, entry) for record, entry in zip(records, entries) if entry]
    if not shown:
        return [intervals_note(entries)] if entries else []
    first = shown[0][1]
    ci = first.get("ci") or {}
    if ci.get("ci_method", "off") == "off":
        return [f"intervals off (VSBENCH_RESAMPLES=0); per-unit outcomes kept in {first['file']}"]
    counts = {entry["units"] for _, entry in shown}
    kinds = PLURAL.get(first["kind"], f"{first['kind']}s")
    over = f"{first['units']} {kinds}" if len(counts) == 1 else f"each record's {kinds}"
    groups = {entry.get("groups") for _, entry in shown}
    if len(groups) == 1 and first.get("groups"):
        over += f" in {first['groups']} groups, each drawn whole"
    lines.append(f"{percent}% intervals: {ci.get('ci_method')} over {over}, "
                 f"{ci.get('ci_resamples')} resamples, seed {ci.get('ci_seed')}")
    if any(entry.get("exact") for _, entry in shown):
        lines.append(f"  (a proportion of independent {kinds}, such as an accuracy: {EXACT_WORDS})")
    rows = []
    for record, entry in shown:
        variant = " · ".join(str(v) for v in record.values() if isinstance(v, str)) or "-"
        for metric in entry.get("metrics", []):
            low, high = record.get(f"{metric}_ci{percent}_low"), record.get(f"{metric}_ci{percent}_high")
            if isinstance(record.get(metric), (int, float)):
                note = (entry.get("notes") or {}).get(metric, "")
                rows.append((variant, metric, format_interval(float(record[metric]), low, high)
                             + (f"  ({note})" if note and low is not None else "")))
    width_v = max((len(r[0]) for r in rows), default=0)
    width_m = max((len(r[1]) for r in rows), default=0)
    lines += [f"  {v.ljust(width_v)}  {m.ljust(width_m)}  {text}" for v, m, text in rows]
    return lines
