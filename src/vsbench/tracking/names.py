"""The one place metric names are made for MLflow and KFP, and read back by the reports.

Since issue 38 an evaluation run holds a record's metrics under their plain names
(:mod:`vsbench.tracking.evaluations`); the names below are what runs logged before it hold, and
what the KFP ``Metrics`` output of a score step still holds (one output for all its records).

A score step's records become flat metrics ``<variant>__<metric>`` (:func:`flat_metrics`); on a
pipeline's parent run (and a command's run) they carry the pair they belong to,
``<benchmark>__<model>__<variant>__<metric>`` (:func:`run_metric_names`), since a nightly parent holds
many pairs; :func:`split_run_metric` reads such a name back. Every part goes through
:func:`safe_part`, MLflow's allowed characters.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from vsbench.stats.names import INTERVAL_NAME, NOTE_TAG, interval_name, note_metric  # noqa: F401 - read back by the reports

SEPARATOR = "__"
# A parent run's own copy of its best evaluation's headline metrics (``best.disc.uap``, issue 57): so
# its page opens on numbers, not on "No metrics recorded". A summary, not a record: readers skip it.
SUMMARY_PREFIX = "best."

# Words that make a metric lower-is-better whatever its benchmark says (errors, losses, timings).
LOWER_IS_BETTER_WORDS = ("rmse", "loss", "error", "seconds")


def lower_is_better(metric: str, declared: Collection[str] = ()) -> bool:
    """Whether lower values of ``metric`` are better: its benchmark declares it so (``declared``:
    ``mean_rank`` names ``l2__mean_rank`` too), or its name says error, loss, rmse or seconds.
    Decided once, when a run is logged (the evaluation's ``vsbench.lower_is_better`` tag); readers of
    older runs decide it here."""
    name = metric.lower()
    return name in declared or name.rsplit(SEPARATOR, 1)[-1] in declared or any(w in name for w in LOWER_IS_BETTER_WORDS)


def summary_metric(benchmark: str, metric: str) -> str:
    """The name a parent run holds its best evaluation's ``metric`` of ``benchmark`` under."""
    return f"{SUMMARY_PREFIX}{safe_part(benchmark)}.{metric}"


def is_summary_metric(name: str) -> bool:
    """Whether ``name`` is a parent's summary (:func:`summary_metric`), a copy of a child's value that
    the reports and the nightly check must not count a second time."""
    return name.startswith(SUMMARY_PREFIX)


def safe_part(text: str) -> str:
    """A name part MLflow accepts: letters, digits and ``._-``, others ``_``, no ``_`` at the ends."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).strip("_") or "x"


def flat_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """One flat metrics dict: ``<variant>__<metric>`` for every numeric field, where the variant joins
    the record's string fields (``PCAW512,L2norm,Flat`` -> ``PCAW512_L2norm_Flat``)."""
    out: dict[str, float] = {}
    for record in records:
        prefix = SEPARATOR.join(safe_part(str(v)) for v in record.values() if isinstance(v, str))
        for key, value in record.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{prefix}{SEPARATOR}{key}" if prefix else key] = float(value)
    return out


def run_metric_names(benchmark: str, model: str, metrics: dict[str, float]) -> dict[str, float]:
    """A pair's metrics as a parent run holds them: ``<benchmark>__<model>__<metric>``."""
    prefix = f"{benchmark}{SEPARATOR}{safe_part(model or 'model')}"
    return {f"{prefix}{SEPARATOR}{name}": value for name, value in metrics.items()}


def split_run_metric(name: str) -> tuple[str, str, str] | None:
    """``(benchmark, model, metric)`` of a name :func:`run_metric_names` made; None for any other name."""
    parts = name.split(SEPARATOR, 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None
