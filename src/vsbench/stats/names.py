"""The names of a metric's interval bounds: ``<metric>_ci<percent>_low`` / ``_high``.

They are made here (:func:`interval_field`, used by :func:`vsbench.stats.compare.interval_fields`)
and read back here (:func:`interval_name`), in ``stats``, which owns intervals: before issue 55
``stats/records.py`` read them through ``tracking/names.py``, an import from a floor above.
"""

from __future__ import annotations

import re

INTERVAL_NAME = re.compile(r"^(?P<metric>.+)_ci(?P<percent>\d+)_(?P<side>low|high)$")


def interval_field(metric: str, percent: int, side: str) -> str:
    """``uap_ci95_low`` for ``("uap", 95, "low")``."""
    if side not in ("low", "high"):
        raise ValueError(f"an interval's side is low or high, not {side!r}")
    return f"{metric}_ci{percent}_{side}"


def interval_name(name: str) -> tuple[str, str] | None:
    """``("uap", "low")`` for ``uap_ci95_low`` (any level); None for any other name: the one reader
    of the names :func:`interval_field` makes."""
    found = INTERVAL_NAME.match(name)
    return (found["metric"], found["side"]) if found else None


# An interval's edge note (fewer than ~20 units, zero width, replicates left out) as a plain MLflow
# tag on the run that logged the interval: ``interval_note.uap`` (docs/intervals.md).
NOTE_TAG = "interval_note."


def note_metric(tag: str) -> str | None:
    """``uap`` for the tag ``interval_note.uap``; None for any other tag."""
    return tag[len(NOTE_TAG):] or None if tag.startswith(NOTE_TAG) else None
