"""Per-unit outcome files on MLflow runs: logged beside the metrics they decide, read back verified.

A run that scored units (an evaluation run, ABID's score step) holds each unit file as an artifact
under ``units/`` and names them in one tag, :data:`UNITS_TAG`: a JSON object ``{artifact path:
sha256}``. The metrics a file recomputes are named in the file itself (its ``vsbench.units``
metadata, :mod:`vsbench.stats.units`), under the run's own metric names. Readers (``vsbench compare``,
the HTML report, the nightly check) download a file, check its bytes against the tag, and use it; a
file whose bytes differ is refused naming the run and the file.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vsbench.stats.units import Units, UnitsError, read_units

UNITS_TAG = "vsbench.units"
UNITS_DIR = "units"


def log_unit_files(client: Any, run_id: str, files: Mapping[str, str]) -> None:
    """Log ``{local path: sha256}`` under ``units/`` on ``run_id`` and record them in :data:`UNITS_TAG`
    (merged with what the run already names)."""
    if not files:
        return
    run = client.get_run(run_id)
    named = json.loads(run.data.tags.get(UNITS_TAG) or "{}")
    for path, sha256 in files.items():
        artifact = f"{UNITS_DIR}/{Path(path).name}"
        if named.get(artifact) == sha256:
            continue  # already there (a retried upload)
        client.log_artifact(run_id, str(path), UNITS_DIR)
        named[artifact] = sha256
    client.set_tag(run_id, UNITS_TAG, json.dumps(named, sort_keys=True))


def fetch_units(client: Any, run: Any, cache: Path | None = None) -> dict[str, Units]:
    """metric -> the Units that recompute it, for one MLflow run (empty when it logged none).

    Raises :class:`~vsbench.stats.units.UnitsError` naming the run and the file when a file is
    missing or its bytes are not those the tag names."""
    named = json.loads(run.data.tags.get(UNITS_TAG) or "{}")
    out: dict[str, Units] = {}
    if not named:
        return out
    folder = Path(cache) if cache else Path(tempfile.mkdtemp(prefix="vsbench-units-"))
    for artifact, sha256 in sorted(named.items()):
        target = folder / run.info.run_id
        target.mkdir(parents=True, exist_ok=True)
        try:
            local = client.download_artifacts(run.info.run_id, artifact, str(target))
        except Exception as exc:  # noqa: BLE001 - MLflow raises several types for a missing artifact
            raise UnitsError(f"run {run.info.run_id}: its unit file {artifact} cannot be downloaded "
                             f"({type(exc).__name__}: {exc})") from None
        try:
            units = read_units(Path(local), sha256)
        except UnitsError as exc:
            raise UnitsError(f"run {run.info.run_id}: {exc}") from None
        for metric in units.metrics:
            out[metric] = units
    return out
