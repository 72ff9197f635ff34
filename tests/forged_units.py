"""Unit files as a hostile colleague with write access to the store would forge them (issue 54): the
honest units of a run, rewritten, their metadata replaced, and a module that leaves a marker file if
anything ever imports it. Shared by tests/unit/test_units_trust.py and
tests/integration/test_hostile_store.py."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.stats.units import METADATA_KEY, Units

MARKER_MODULE = "vsbench_hostile_marker"


def disc_units(n: int = 40, right: int = 14) -> Units:
    """DISC-like query units: ``accuracy_at_1`` = correct pairs at rank 1 over positives (``ratio``)."""
    correct = np.zeros(n)
    correct[:right] = 1
    return Units("query", "disc", np.array([f"Q{i:05d}" for i in range(n)]),
                 {"correct_at_1": correct, "n_positives": np.ones(n)},
                 {"accuracy_at_1": {"statistic": "ratio", "num": "correct_at_1", "den": "n_positives"}})


def logged_value(units: Units) -> float:
    """What the honest scorer logged for ``accuracy_at_1``."""
    return float(units.values("correct_at_1").sum() / units.values("n_positives").sum())


def all_right(units: Units) -> Units:
    """The issue's rewrite: every query's ``correct_at_1`` set to 1 (the run still logs the old value)."""
    columns = dict(units.columns)
    columns["correct_at_1"] = np.ones(len(units))
    return Units(units.kind, units.benchmark, units.ids, columns, units.metrics, units.clusters, units.variant)


def with_metadata(units: Units, change: Callable[[dict[str, Any]], Any]) -> bytes:
    """``units``' Parquet bytes with their ``vsbench.units`` metadata changed by ``change`` (given the
    metadata dict; it edits it in place, or returns what to store instead: any JSON value, or bytes)."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(units.to_parquet_bytes()))
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    replaced = change(meta)
    value = replaced if isinstance(replaced, bytes) else json.dumps(meta if replaced is None else replaced).encode()
    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: value}), sink)
    return sink.getvalue()


def naming_statistic(units: Units, statistic: str) -> bytes:
    """``units`` whose every metric names ``statistic`` (``this:x``, ``builtins:print``...)."""
    def change(meta: dict[str, Any]) -> None:
        for spec in meta["metrics"].values():
            spec["statistic"] = statistic
    return with_metadata(units, change)


def marker_module(folder: Path) -> Path:
    """A module :data:`MARKER_MODULE` in ``folder`` that writes ``folder/imported`` when imported and
    whose ``run`` writes ``folder/called``; returns the marker that importing it leaves."""
    (folder / f"{MARKER_MODULE}.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(folder)!r}, 'imported').write_text('imported')\n"
        "def run(*args, **kwargs):\n"
        f"    Path({str(folder)!r}, 'called').write_text('called')\n"
        "    return 0.0\n")
    return folder / "imported"
