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
import math
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vsbench.io.storage import SHA256_HEX
from vsbench.stats.units import ListColumn, Units, UnitsError, digest_of, units_from_bytes

UNITS_TAG = "vsbench.units"
UNITS_DIR = "units"
TOLERANCE = 1e-9  # a unit file's recomputed metric and the run's logged one agree this closely
_ARTIFACT = re.compile(r"units/(?!\.\.?$)[^/\\\x00-\x1f]{1,250}")  # one file right under units/
# List columns read value by value together (a query's predictions: reference, score, true or not; a
# copy's results; a seed's tagged pairs; a seed's neighbours), by the statistics, the compare sheets'
# verdicts, the failure sheets and ``vsbench export``. Their lists must have one length per unit, or
# a ``zip`` cuts them short in silence and an index past the shorter one fails. A statistic's params
# that name list columns are read together too (:func:`check_list_lengths`).
PAIRED_LISTS: tuple[frozenset[str], ...] = (
    frozenset({"references", "scores", "positive"}),
    frozenset({"references", "distances", "hits", "pooled_rank"}),
    frozenset({"score", "label", "rank", "candidate"}),
    frozenset({"top", "top_score"}),
)


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


def named_files(run: Any) -> dict[str, str]:
    """The run's :data:`UNITS_TAG` parsed strictly: ``{units/<name>: sha256}``; anything else (broken
    JSON, a path outside ``units/``, a digest that is not 64 hex digits) is one UnitsError naming the run."""
    raw = run.data.tags.get(UNITS_TAG) or "{}"
    try:
        named = json.loads(raw)
    except ValueError:
        named = None
    if not isinstance(named, dict) or not all(
            isinstance(k, str) and _ARTIFACT.fullmatch(k) and isinstance(v, str) and SHA256_HEX.fullmatch(v)
            for k, v in named.items()):
        raise UnitsError(f"run {run.info.run_id}: its {UNITS_TAG} tag is not a JSON object of "
                         f"{{'{UNITS_DIR}/<file>.parquet': sha256}} ({raw[:60]!r}); score the run again")
    return named


def fetch_units(client: Any, run: Any, cache: Path | None = None,
                logged: Mapping[str, float] | None = None) -> dict[str, Units]:
    """metric -> the Units that recompute it, for one MLflow run (empty when it logged none).

    A unit file is believed only when (issue 54): its bytes are those the tag names; its metadata
    passes the strict schema (:class:`~vsbench.stats.units.UnitsMetadata`); every statistic it names
    is registered (:mod:`vsbench.stats.statistics`; nothing is imported by name from the file); and
    each metric it recomputes that the run logged (``logged``, default the run's own metrics) comes
    out of the units at the logged value, to :data:`TOLERANCE`. The tag and the file are written by
    whoever can write the run, so the digest alone proves nothing; the logged number is what every
    table shows, and units that do not reproduce it are not the units behind it. A metric the run did
    not log is left out (nothing to check it against). Anything else raises a one-line
    :class:`~vsbench.stats.units.UnitsError` naming the run and the file."""
    run_id = run.info.run_id
    named = named_files(run)
    out: dict[str, Units] = {}
    if not named:
        return out
    values = dict(run.data.metrics) if logged is None else dict(logged)
    folder = Path(cache) if cache else Path(tempfile.mkdtemp(prefix="vsbench-units-"))
    for artifact, sha256 in sorted(named.items()):
        where = f"run {run_id}: unit file {artifact}"
        target = folder / run_id
        target.mkdir(parents=True, exist_ok=True)
        try:
            local = client.download_artifacts(run_id, artifact, str(target))
            data = Path(local).read_bytes()
        except UnitsError:
            raise
        except Exception as exc:  # noqa: BLE001 - MLflow raises several types for a missing artifact
            if getattr(exc, "one_line", False):  # the store itself is down or slow: that line says so
                raise
            raise UnitsError(f"{where} cannot be downloaded ({type(exc).__name__}: {str(exc)[:200]})") from None
        units = checked_units(data, sha256, values, where, f"the run's {UNITS_TAG} tag names")
        for metric in units.metrics:
            if metric in values:
                out[metric] = units
    return out


def checked_units(data: bytes, sha256: str, logged: Mapping[str, float], where: str, named_by: str) -> Units:
    """The unit file ``data`` as :class:`Units`, believed only as :func:`fetch_units` says: its bytes
    hash to ``sha256`` (which ``named_by`` names: the run's tag, the run folder's metrics.json); its
    metadata passes the strict schema; every statistic it names is registered; every metric it
    recomputes that ``logged`` holds equals the logged value to :data:`TOLERANCE`. The one checked
    reader of unit files: ``vsbench compare``, the leaderboard, the nightly check and ``vsbench export``
    all read them through it. List columns read together must have one length per unit
    (:func:`check_list_lengths`), checked before any statistic reads them. Else one UnitsError naming
    ``where`` (the run and the file)."""
    from vsbench.stats.statistics import check_units

    if digest_of(data) != sha256:
        raise UnitsError(f"{where}: its bytes are not those {named_by} (sha256 {digest_of(data)[:12]}..., "
                         f"named {sha256[:12]}...); score the run again")
    units = units_from_bytes(data, where)
    check_list_lengths(units, where)
    try:
        check_units(units)
    except UnitsError as exc:
        raise UnitsError(f"{where}: {exc}") from None
    check_logged(units, {m: logged[m] for m in units.metrics if m in logged}, where)
    return units


def folder_units(out: Path, manifest: Any) -> list[tuple[str, Units] | None]:
    """Per record of a run folder's ``metrics.json`` (``manifest``, as read from ``out``), its unit file
    checked by :func:`checked_units` against the record's own numbers, as ``(file, Units)``; None where
    the record has no units. The folder may be shared and its files are data: an entry that is not
    ``{"file": "units/<name>", "sha256": <64 hex>}``, entries that do not line up with the records, or
    a file whose units recompute none of its record's metrics (nothing to check them against) is one
    UnitsError naming the folder and the file."""
    where = f"run folder {out}"
    records = manifest.get("records") if isinstance(manifest, dict) else None
    entries = manifest.get("units") if isinstance(manifest, dict) else None
    if not isinstance(records, list) or not isinstance(entries, list) or len(records) != len(entries):
        raise UnitsError(f"{where}: its metrics.json's units do not line up with its records (one entry per "
                         "record); score the run again")
    found: list[tuple[str, Units] | None] = []
    for index, (record, entry) in enumerate(zip(records, entries)):
        if entry is None:
            found.append(None)
            continue
        file = entry.get("file") if isinstance(entry, dict) else None
        sha256 = entry.get("sha256") if isinstance(entry, dict) else None
        if not (isinstance(file, str) and _ARTIFACT.fullmatch(file) and isinstance(sha256, str)
                and SHA256_HEX.fullmatch(sha256) and isinstance(record, dict)):
            raise UnitsError(f"{where}: metrics.json's units entry {index} is not {{'file': "
                             f"'{UNITS_DIR}/<file>.parquet', 'sha256': <64 hex digits>}} ({str(entry)[:60]!r}); "
                             "score the run again")
        try:
            data = (Path(out) / file).read_bytes()
        except OSError as exc:
            raise UnitsError(f"{where}: unit file {file} cannot be read ({exc.strerror or exc})") from None
        logged = {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        units = checked_units(data, sha256, logged, f"{where}: unit file {file}",
                              "the evaluation wrote, as its metrics.json names them")
        if not any(m in logged for m in units.metrics):
            raise UnitsError(f"{where}: unit file {file}: its units recompute none of its record's metrics "
                             f"({', '.join(sorted(units.metrics)) or 'none named'}): nothing to check them "
                             "against (refused); score the run again")
        found.append((file, units))
    return found


def check_logged(units: Units, logged: Mapping[str, float], where: str) -> None:
    """Each metric in ``logged`` recomputed from ``units`` (every weight 1: the scorer's own number, by
    the statistics' contract) equals its logged value to :data:`TOLERANCE`; else one UnitsError naming
    ``where``, the metric and both values."""
    import numpy as np

    from vsbench.stats.statistics import evaluate

    if not logged:
        return
    recomputed = evaluate(units, np.ones((1, len(units)), dtype=np.int32), {m: units.metrics[m] for m in logged})
    for metric, value in sorted(logged.items()):
        again = float(recomputed[metric][0])
        if not (math.isclose(again, float(value), rel_tol=TOLERANCE, abs_tol=TOLERANCE)
                or (math.isnan(again) and math.isnan(float(value)))):
            raise UnitsError(f"{where}: its units give {metric} = {again!r}, the run logged {float(value)!r}; "
                             "these are not the units behind the logged number (refused)")


def check_list_lengths(units: Units, where: str) -> None:
    """The list columns of ``units`` that are read together (:data:`PAIRED_LISTS`, and those a
    metric's statistic names in its params) hold, unit by unit, lists of one length; else one
    UnitsError naming ``where`` (run and file), the unit, both columns and both lengths. Row counts
    are the schema's (every column one row per unit); this is the length within a row, which the
    Parquet file does not tie between columns: a forged or broken file's shorter list would be cut
    short by a ``zip``, or read past by an index, without a word."""
    import numpy as np

    lists = {name: column for name, column in units.columns.items() if isinstance(column, ListColumn)}
    groups = [group & lists.keys() for group in PAIRED_LISTS]
    groups += [{v for v in spec.values() if isinstance(v, str) and v in lists} for spec in units.metrics.values()]
    for group in groups:
        names = sorted(group)
        for first, second in zip(names, names[1:]):
            a, b = lists[first].offsets, lists[second].offsets
            if a is b or np.array_equal(a, b):
                continue
            differ = np.flatnonzero(np.diff(a) != np.diff(b))
            if differ.size == 0:  # the same lengths from another start: nothing cut short
                continue
            row = int(differ[0])
            raise UnitsError(f"{where}: unit {str(units.ids[row])[:80]!r} has {int(a[row + 1] - a[row])} values in "
                             f"{first!r} and {int(b[row + 1] - b[row])} in {second!r}, lists read value by value "
                             "together (refused); score the run again")
