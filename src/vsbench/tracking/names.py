"""The one place metric names are made for MLflow and KFP, and read back by the reports.

A score step's records become flat metrics ``<variant>__<metric>`` (:func:`flat_metrics`); on a
pipeline's parent run (and a command's run) they carry the pair they belong to,
``<benchmark>__<model>__<variant>__<metric>`` (:func:`run_metric_names`), since a nightly parent holds
many pairs; :func:`split_run_metric` reads such a name back. Every part goes through
:func:`safe_part`, MLflow's allowed characters.
"""

from __future__ import annotations

from typing import Any

SEPARATOR = "__"


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
