"""``vsbench score ...``: score result files against their ground truth and write a metrics JSON.

Each command reads and validates its inputs (:mod:`vsbench.io.readers`), calls one pure
scorer, prints a small table and writes the record atomically. Bad input ends with exit code 2 and
a one-line message on stderr that names the file and line, never a traceback.
The readers, scorers, numpy and the tracking (MLflow) are imported inside the commands, so that
``vsbench --help`` stays quick (bench/cli_startup.py).
JSON has no NaN: a value that does not exist (a class without examples) is written as ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vsbench.benchmarks.registry import builtin_specs
from vsbench.benchmarks.ties import tie_fields
from vsbench.cli.common import user_errors
from vsbench.cli.helpfmt import App
from vsbench.tracking.names import interval_name

if TYPE_CHECKING:
    import numpy as np

score_app = App(no_args_is_help=True, add_completion=False,
                help="Score result files against ground truth; write a metrics JSON.")

HPATCHES_POSITIVES = {"easy": "test_pos_easy.results", "hard": "test_pos_hard.results"}
HPATCHES_NEGATIVES = {"diffseq": "test_neg_diffseq.results", "sameseq": "test_neg_sameseq.results"}

OutputOpt = Annotated[Path, typer.Option(help="Where the metrics JSON goes.")]
StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="Refuse short result files and out-of-range answers (the challenge script scores them).")]
ModelOpt = Annotated[str, typer.Option(help="Name of the model that made the results (MLflow param 'model').")]
TrackOpt = Annotated[bool, typer.Option(
    "--track/--no-track", help="Record an MLflow run (MLFLOW_TRACKING_URI, else a local store it prints); "
                               "a store down or hanging costs at most VSBENCH_TRACKING_TIMEOUT s (30).")]
ExperimentOpt = Annotated[str, typer.Option(help="MLflow experiment.")]
SCORE_EXPERIMENT = "vsbench-score"
SCORE_PIPELINE = "vsbench-score"


def _json_number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _json_list(values: np.ndarray) -> list[Any]:
    return [_json_number(v) for v in values.tolist()]


def _scalar_rows(record: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Numbers of the record, nested objects flattened as ``outer.inner`` (lists are left out)."""
    for key, value in record.items():
        if isinstance(value, dict):
            yield from _scalar_rows(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)):
            yield f"{prefix}{key}", value


def _warn(notes: tuple[str, ...] | list[str]) -> None:
    """Each note (an input the original scores silently, and the option that changes it) on one line."""
    for note in notes:
        typer.echo(f"warning: {note}", err=True)


def _track(benchmark: str, record: dict[str, Any], output: Path, inputs: dict[str, Path], options: dict[str, Any],
           model: str, track: bool, experiment: str, units_file: tuple[Path, str] | list[tuple[Path, str]] | None = None,
           resampling: Any = None, truth: tuple[str, ...] = ("gt",)) -> None:
    """The scored record as an MLflow run (params, metrics, the metrics JSON; the digest of the
    ``truth`` inputs (the ground truth, never the predictions) as the data tag; the unit file under
    ``units/``, named in the ``vsbench.units`` tag as the pipelines name theirs), bounded against a
    store that is down; skipped with ``--no-track``.

    The data tag is what decides whether two runs are compared paired (with their unit ids): two
    models' prediction files on the same questions must pair (issue 55), so it hashes the truth
    alone. A benchmark whose truth and scores share one file (patch pairs' results) records none,
    and the unit ids decide."""
    if not track:
        return
    import json
    import time

    from vsbench.tracking.command import BUNDLE_SUFFIX, record_command_run
    from vsbench.tracking.names import NOTE_TAG
    from vsbench.tracking.provenance import data_tags
    from vsbench.tracking.units import UNITS_DIR, UNITS_TAG

    artifacts = {str(output): ""}
    tags = dict(data_tags(*(inputs[name] for name in truth))) if truth else {}
    tags.update({f"{NOTE_TAG}{metric}": note[:5000] for metric, note in interval_notes_of(record).items()})
    files = units_file if isinstance(units_file, list) else [units_file] if units_file is not None else []
    if files:
        for path, _ in files:
            artifacts[str(path)] = UNITS_DIR
        tags[UNITS_TAG] = json.dumps({f"{UNITS_DIR}/{path.name}": sha256 for path, sha256 in files}, sort_keys=True)
    record_command_run(output.parent / (output.stem + BUNDLE_SUFFIX), experiment=experiment, pipeline=SCORE_PIPELINE,
                       params={"benchmark": benchmark, "model": model or "unnamed", **options,
                               **(resampling.params() if resampling is not None else {}),
                               **{name: str(path) for name, path in inputs.items()}},
                       metrics=dict(_scalar_rows(record)), tags=tags,
                       artifacts=artifacts, started=time.time(), kept=output, announce=typer.echo)


def _unit_entries(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The record's unit file entries by part ("" for a record with one file; ``part`` for one per
    nested object), as :func:`_add_units` wrote them."""
    units = record.get("units")
    if not isinstance(units, dict):
        return {}
    if "sha256" in units:
        return {"": units}
    return {part: entry for part, entry in units.items() if isinstance(entry, dict)}


def interval_notes_of(record: dict[str, Any]) -> dict[str, str]:
    """metric (``part.metric`` for a part's) -> its interval's edge note (docs/intervals.md): what the
    terminal prints beside the interval and the run's ``interval_note.<metric>`` tags say."""
    out: dict[str, str] = {}
    for part, entry in _unit_entries(record).items():
        for metric, note in (entry.get("notes") or {}).items():
            out[f"{part}.{metric}" if part else str(metric)] = str(note)
    return out


def _interval_of(record: dict[str, Any], metric: str) -> tuple[float, float] | None:
    """``(low, high)`` when the record holds ``<metric>_ci<level>_low/_high`` (any level), else None;
    ``outer.inner`` looks in the nested object ``outer`` (the pairs' record: a grid of variants)."""
    outer, dot, inner = metric.partition(".")
    if dot and isinstance(record.get(outer), dict):
        return _interval_of(record[outer], inner)
    for key in record:
        if interval_name(key) == (metric, "low"):
            high = record.get(key.removesuffix("_low") + "_high")
            if isinstance(record[key], (int, float)) and isinstance(high, (int, float)):
                return float(record[key]), float(high)
    return None


def print_record(title: str, record: dict[str, Any], units: Any = None, resampling: Any = None) -> None:
    """Print a scored record: each number, with its interval ``[low, high]`` where the record holds
    ``<metric>_ci95_low/_high``, then one line on what the intervals are, or why there are none.

    ``units`` (:class:`vsbench.stats.units.Units`, or None when the benchmark keeps no per-unit
    outcomes) also lists the metrics it recomputes that the record holds only as lists (ABID's per-class
    scores) with their intervals. A metric with a ``<name>_worst``/``<name>_best`` range (ties that
    other orders would break otherwise) shows it beside its value.
    """
    from vsbench.stats.records import is_interval_field

    ranges = {key[: -len("_worst")] for key in record if key.endswith("_worst") and
              key[: -len("_worst")] + "_best" in record}
    shown = {k: ({i: x for i, x in v.items() if not is_interval_field(i)} if isinstance(v, dict) else v)
             for k, v in record.items() if not is_interval_field(k) and k != "units"
             and not any(k in (f"{n}_worst", f"{n}_best") for n in ranges)}
    rows: list[tuple[str, str]] = []
    notes = interval_notes_of(record)
    for key, value in _scalar_rows(shown):
        text = f"{value:.4f}" if isinstance(value, float) else f"{value}"
        if (interval := _interval_of(record, key)) is not None:
            text += f" [{interval[0]:.4f}, {interval[1]:.4f}]" + (f"  ({notes[key]})" if key in notes else "")
        if key in ranges:
            text += f"  (ties: {record[key + '_worst']:.4f} to {record[key + '_best']:.4f})"
        rows.append((key, text))
    if units is not None:
        rows += _unit_only_rows(record, units, {key for key, _ in rows})
    width = max((len(key) for key, _ in rows), default=0)
    typer.echo(title)
    for key, text in rows:
        typer.echo(f"  {key:<{width}}  {text}")
    if ranges:
        typer.echo("  (ties: the range over every order of tied scores; the value is the original's order)")
    from vsbench.io.terminal import wrap_lines

    typer.echo(wrap_lines(_interval_note(record, units, resampling)))  # within 100 columns (issue 57)


def _unit_only_rows(record: dict[str, Any], units: Any, shown: set[str]) -> list[tuple[str, str]]:
    """Metrics the units recompute and the record keeps only as lists, with their intervals (the point
    value recomputed from the units with every weight 1: by the statistics' contract, the scorer's)."""
    names = [m for m in units.metrics if m not in shown and _interval_of(record, m) is not None]
    if not names:
        return []
    import numpy as np

    from vsbench.stats.statistics import evaluate

    values = evaluate(units, np.ones((1, len(units)), dtype=np.int32), {m: units.metrics[m] for m in names})
    rows = []
    for metric in names:
        low, high = _interval_of(record, metric)  # type: ignore[misc]
        note = interval_notes_of(record).get(metric)
        rows.append((metric, f"{float(values[metric][0]):.4f} [{low:.4f}, {high:.4f}]" + (f"  ({note})" if note else "")))
    return rows


def _interval_note(record: dict[str, Any], units: Any, resampling: Any) -> str:
    from vsbench.stats.records import PLURAL, is_interval_field

    if units is None:
        return "  (95% intervals are not available for this benchmark here: its scorer keeps no per-unit outcomes)"
    if resampling is None or not resampling.enabled or not any(is_interval_field(k) for k in record):
        return (f"  (no intervals: resampling is off (--resamples 0 or VSBENCH_RESAMPLES=0); "
                f"{len(units):,} {PLURAL.get(units.kind, units.kind)} scored)")
    clustered = f" in {units.cluster_index()[1]:,} groups, each drawn whole" if units.clusters is not None else ""
    kinds = PLURAL.get(units.kind, units.kind)
    line = (f"  [low, high]: {resampling.percent}% interval, expanded percentile bootstrap over the {len(units):,} "
            f"{kinds}{clustered} ({resampling.resamples} resamples, seed {resampling.seed})")
    if any(entry.get("exact") for entry in _unit_entries(record).values()):
        from vsbench.stats.records import EXACT_WORDS

        line += f"; a proportion of independent {kinds} (an accuracy): {EXACT_WORDS}"
    return line


def _report(title: str, record: dict[str, Any], output: Path, units: Any = None, resampling: Any = None) -> None:
    """Print the record (:func:`print_record`), then write the whole record."""
    from vsbench.io.storage import atomic_write_json

    print_record(title, record, units, resampling)
    with user_errors():
        atomic_write_json(output, record)
    typer.echo(f"metrics: {output}")


def _resampling(resamples: int | None) -> Any:
    """The intervals' resampling (``--resamples``, else ``VSBENCH_RESAMPLES``), checked before any work."""
    from vsbench.stats.resample import Resampling

    with user_errors():
        return Resampling.from_env(resamples)


def units_path_for(output: Path) -> Path:
    """The unit file beside a metrics JSON: ``m.json`` -> ``m.units.parquet``."""
    return output.with_name(output.stem + ".units.parquet")


def _add_units(record: dict[str, Any], units: Any, resampling: Any, output: Path, part: str = "") -> tuple[Path, str]:
    """Add the interval fields of every metric ``units`` recomputes to ``record`` (to its nested object
    ``part`` when given), write the unit file beside ``output`` and name it in the record (``units``:
    its path and sha256; with parts, one entry per part)."""
    from vsbench.io.ids import release_memory
    from vsbench.stats.compare import interval_fields, interval_notes, intervals
    from vsbench.stats.proportions import CLOPPER_PEARSON

    target = record[part] if part and isinstance(record.get(part), dict) else record
    _add_unit_values(target, units)
    extra: dict[str, Any] = {}
    if resampling.enabled:
        found = intervals(units, resampling)
        target.update(interval_fields(found, resampling.percent))
        if notes := interval_notes(found):  # printed beside each interval, tagged interval_note.<metric>
            extra["notes"] = notes
        if exact := [m for m, interval in found.items() if interval.method == CLOPPER_PEARSON]:
            extra["exact"] = exact
        units.forget()  # the statistics' sorted copies: the file is written from the columns alone
        release_memory()
    path = units_path_for(output) if not part else output.with_name(f"{output.stem}.units.{part}.parquet")
    with user_errors():
        sha256 = units.write(path)
    entry = {"path": str(path), "sha256": sha256, **extra}
    if part:
        record.setdefault("units", {})[part] = entry
    else:
        record["units"] = entry
    return path, sha256


def _add_unit_values(target: dict[str, Any], units: Any) -> None:
    """Each metric the units recompute that the record keeps only inside a list (ABID's per-class
    accuracy and RMSE), as a plain value beside its interval: a run logs ``accuracy_class_1`` with its
    ``_ci95_low``/``_high``, never the bounds alone (issue 55, which ``compare --metric`` then found
    no metric for). The value is the statistic with every weight 1: by the statistics' contract, the
    scorer's number."""
    import numpy as np

    from vsbench.stats.statistics import evaluate

    missing = {m: spec for m, spec in units.metrics.items() if not isinstance(target.get(m), (int, float))}
    if not missing:
        return
    values = evaluate(units, np.ones((1, len(units)), dtype=np.int32), missing)
    target.update({m: float(v[0]) for m, v in values.items() if np.isfinite(v[0])})


ResamplesOpt = Annotated[int | None, typer.Option(
    "--resamples", min=0, help="Bootstrap resamples for the 95% intervals (0: none; else at least 10). "
                               "Default: VSBENCH_RESAMPLES, else 1000; the seed: VSBENCH_RESAMPLE_SEED (0).")]


@score_app.command("abid-counting")
def abid_counting(
    pred: Annotated[Path, typer.Option(help="counting_result.txt: one count per line.")],
    gt: Annotated[Path, typer.Option(help="counting_val.json (or *_hard.json).")],
    output: OutputOpt,
    num_classes: Annotated[int | None, typer.Option(min=1, help="Classes 0..N-1 (default: inferred).")] = None,
    strict: StrictOpt = False,
    resamples: ResamplesOpt = None,
    model: ModelOpt = "",
    track: TrackOpt = True,
    experiment: ExperimentOpt = SCORE_EXPERIMENT,
) -> None:
    """ABID counting: accuracy, RMSE, per-class accuracy and RMSE (each with its 95% bootstrap interval
    over the questions), confusion matrix. The per-question outcomes go to <output>.units.parquet."""
    from vsbench.abid import readers as abid_readers
    from vsbench.abid.metrics import counting_metrics
    from vsbench.abid.units import counting_units

    resampling = _resampling(resamples)
    with user_errors():
        truth = abid_readers.read_counting_ground_truth(gt)
        result = abid_readers.read_abid_result(pred, truth.size, gt, binary=False, strict=strict)
        m = counting_metrics(result.values, truth[: result.values.size], num_classes)
        ids = abid_readers.read_question_ids(gt, "counting")[: result.values.size]
    _warn(list(result.notes) + _counting_notes(pred, result.values, truth[: result.values.size], m.per_class_count))
    record = {
        "accuracy": m.accuracy,
        "rmse": m.rmse,
        "per_class_accuracy": _json_list(m.per_class_accuracy),
        "per_class_rmse": _json_list(m.per_class_rmse),
        "confusion_matrix": m.confusion_matrix.tolist(),
        "num_examples": m.num_examples,
    }
    units = counting_units(result.values, truth[: result.values.size], ids)
    units_file = _add_units(record, units, resampling, output)
    _report("abid counting", record, output, units, resampling)
    _track("abid_counting", record, output, {"pred": pred, "gt": gt},
           {"num_classes": num_classes or "inferred", "strict": strict}, model, track, experiment, units_file, resampling)


def _listed(values: list[int], most: int = 10) -> str:
    """``3, 4, 5`` or ``3, 4, ... (and 20,093 more)``: a bounded list for a one-line message."""
    shown = ", ".join(map(str, values[:most]))
    return shown if len(values) <= most else f"{shown} ... (and {len(values) - most:,} more)"


def _counting_notes(pred: Path, answers: np.ndarray, truth: np.ndarray, per_class_count: np.ndarray) -> list[str]:
    """One line each, whatever the number of classes or answers: classes the ground truth does not
    use, answers outside its classes, and errors too large for the challenge script's integer square."""
    import numpy as np

    from vsbench.abid.metrics import WRAP_FREE_ERROR

    notes = []
    classes = per_class_count.size
    empty = np.flatnonzero(per_class_count == 0).tolist()
    if empty:
        notes.append(f"{len(empty)} of the {classes} classes have no ground-truth example ({_listed(empty)}); "
                     "their per-class values are null")
    outside = answers >= classes  # negative answers have the reader's note
    if outside.any():
        row = int(np.argmax(outside))
        notes.append(f"{pred}:{row + 1}: {int(np.count_nonzero(outside)):,} answer(s) are above the classes "
                     f"0..{classes - 1} (e.g. {answers[row]}); scored as wrong answers, as the challenge script "
                     "scores them")
    wraps = np.abs(answers.astype(np.float64) - truth.astype(np.float64)) > WRAP_FREE_ERROR
    if wraps.any():
        row = int(np.argmax(wraps))
        notes.append(f"{pred}:{row + 1}: answer {answers[row]} is off by more than {WRAP_FREE_ERROR:,}: the "
                     "challenge script's squared error wraps around in 64-bit integers there (a meaningless "
                     "RMSE); this RMSE uses the exact square")
    return notes


@score_app.command("abid-verification")
def abid_verification(
    pred: Annotated[Path, typer.Option(help="obj_verification_result.txt: 0/1 per line.")],
    gt: Annotated[Path, typer.Option(help="obj_verification_val.json.")],
    output: OutputOpt,
    strict: StrictOpt = False,
    resamples: ResamplesOpt = None,
    model: ModelOpt = "",
    track: TrackOpt = True,
    experiment: ExperimentOpt = SCORE_EXPERIMENT,
) -> None:
    """ABID object verification: accuracy (with its 95% bootstrap interval over the questions), precision
    and recall of "yes". The per-question outcomes go to <output>.units.parquet."""
    import numpy as np

    from vsbench.abid import readers as abid_readers
    from vsbench.abid.metrics import verification_metrics
    from vsbench.abid.units import answer_units

    resampling = _resampling(resamples)
    with user_errors():
        truth = abid_readers.read_verification_ground_truth(gt)
        result = abid_readers.read_abid_result(pred, truth.size, gt, binary=True, strict=strict)
        m = verification_metrics(result.values, truth[: result.values.size])
        ids = abid_readers.read_question_ids(gt, "verification")[: result.values.size]
    _warn(result.notes)
    if repeated := abid_readers.repeated_questions(ids):  # each copy weighs in accuracy (issue 54)
        _warn([f"{gt}: {len(repeated)} question(s) are listed more than once with the same label (e.g. "
               f"{repeated[0].rsplit('#', 1)[0]}); each copy is scored, as the challenge's script does, so they "
               "weigh more than once in accuracy, precision and recall"])
    if m.precision == 0.0 and not np.any(result.values == 1):
        _warn([f"precision is 0: no answer in {pred} is 1, so it is 0/0 (reported as 0, as sklearn's zero_division=0)"])
    if m.recall == 0.0 and not np.any(truth[: result.values.size] == 1):
        _warn([f"recall is 0: no scored entry of {gt} is 1, so it is 0/0 (reported as 0, as sklearn's zero_division=0)"])
    record: dict[str, Any] = {"accuracy": m.accuracy, "precision": m.precision, "recall": m.recall}
    units = answer_units(result.values, truth[: result.values.size], ids, task="verification")
    units_file = _add_units(record, units, resampling, output)
    _report("abid verification", record, output, units, resampling)
    _track("abid_verification", record, output, {"pred": pred, "gt": gt}, {"strict": strict}, model, track, experiment,
           units_file, resampling)


@score_app.command("abid-quantity")
def abid_quantity(
    pred: Annotated[Path, typer.Option(help="Quantity verification result: 0/1 per line.")],
    gt: Annotated[Path, typer.Option(help="obj_num_verification_val.json.")],
    output: OutputOpt,
    strict: StrictOpt = False,
    resamples: ResamplesOpt = None,
    model: ModelOpt = "",
    track: TrackOpt = True,
    experiment: ExperimentOpt = SCORE_EXPERIMENT,
) -> None:
    """ABID quantity verification: accuracy, with its 95% bootstrap interval over the questions. The
    per-question outcomes go to <output>.units.parquet."""

    from vsbench.abid import readers as abid_readers
    from vsbench.abid.metrics import verification_metrics
    from vsbench.abid.units import answer_units

    resampling = _resampling(resamples)
    with user_errors():
        truth = abid_readers.read_quantity_ground_truth(gt)
        result = abid_readers.read_abid_result(pred, truth.size, gt, binary=True, strict=strict)
        m = verification_metrics(result.values, truth[: result.values.size])
        ids = abid_readers.read_question_ids(gt, "quantity")[: result.values.size]
    _warn(result.notes)
    record: dict[str, Any] = {"accuracy": m.accuracy}
    units = answer_units(result.values, truth[: result.values.size], ids, task="quantity")
    units_file = _add_units(record, units, resampling, output)
    _report("abid quantity verification", record, output, units, resampling)
    _track("abid_quantity", record, output, {"pred": pred, "gt": gt}, {"strict": strict}, model, track, experiment,
           units_file, resampling)


@score_app.command("copy-detection")
def copy_detection(
    predictions: Annotated[Path, typer.Option(help="CSV query_id,reference_id,score.")],
    gt: Annotated[Path, typer.Option(help="CSV query_id,reference_id (empty reference: no copy).")],
    output: OutputOpt,
    normalize_ids: Annotated[bool, typer.Option(
        "--normalize-ids", help="Strip spaces, quotes and byte-order marks around ids (isc2021 keeps them).")] = False,
    gt_duplicates: Annotated[str, typer.Option(
        help="A ground-truth pair listed twice: 'count' it twice (isc2021) or count it 'once'.")] = "count",
    resamples: ResamplesOpt = None,
    model: ModelOpt = "",
    track: TrackOpt = True,
    experiment: ExperimentOpt = SCORE_EXPERIMENT,
) -> None:
    """DISC2021 metrics: micro AP, accuracy at 1, recall at precision 0.9, as isc2021 computes them, each
    with its 95% bootstrap interval over the queries. The per-query outcomes go to <output>.units.parquet."""
    from vsbench.benchmarks.disc import readers as disc_readers
    from vsbench.benchmarks.disc.metrics import copy_detection_metrics, match_predictions
    from vsbench.benchmarks.disc.units import copy_detection_units
    from vsbench.io.ids import release_memory

    resampling = _resampling(resamples)
    with user_errors():
        preds = disc_readers.read_copy_detection_predictions(predictions, normalize_ids=normalize_ids)
        truth = disc_readers.read_copy_detection_ground_truth(gt, normalize_ids=normalize_ids)
        columns = (preds.query_ids, preds.reference_ids, preds.scores, truth.query_ids, truth.reference_ids)
        matched = match_predictions(*columns, ground_truth_duplicates=gt_duplicates)  # type: ignore[arg-type]
        m = copy_detection_metrics(*columns, matched=matched)
        release_memory()  # the matching's sort temporaries, kept by Arrow's pool and the heap
    unknown = disc_readers.count_unknown_queries(preds, truth)
    release_memory()  # its hash table of the listed queries (~50 MB for a million), before the units
    file_notes = preds.notes + truth.notes
    _warn(file_notes + m.notes)
    if unknown:
        typer.echo(f"warning: {unknown} predictions are for queries absent from {gt}; "
                   "they count as false positives", err=True)
    if m.num_true_positives == 0:
        if not file_notes:  # (else a note on the ids says why already)
            _warn([f"uap, accuracy_at_1 and recall_at_p90 are 0: none of the {m.num_predictions:,} predictions in "
                   f"{predictions} is a pair of {gt}; check that both files name the same queries and references"])
    elif m.threshold_at_p90 is None:
        _warn(["recall_at_p90 is 0: precision never reaches 0.9 at any score threshold "
               "(isc2021 reports None there)"])
    record: dict[str, Any] = {"uap": m.uap, "accuracy_at_1": m.accuracy_at_1, "recall_at_p90": m.recall_at_p90,
                              **tie_fields(m.ties)}
    with user_errors():
        units = copy_detection_units(*columns, queries=truth.listed_queries, benchmark="copy_detection",
                                     matched=matched)
    # The intervals need only the units: the tables and the matching go first (memory bounded at a
    # small multiple of the predictions file, docs/reliability.md).
    del preds, truth, columns, matched
    release_memory()
    units_file = _add_units(record, units, resampling, output)
    _report("copy detection", record, output, units, resampling)
    _track("copy_detection", record, output, {"predictions": predictions, "gt": gt},
           {"normalize_ids": normalize_ids, "gt_duplicates": gt_duplicates}, model, track, experiment,
           units_file, resampling)


@score_app.command("pairs")
def pairs(
    results: Annotated[Path, typer.Option(
        help="Folder with test_{pos_easy,pos_hard,neg_diffseq,neg_sameseq}.results.")],
    output: OutputOpt,
    resamples: ResamplesOpt = None,
    model: ModelOpt = "",
    track: TrackOpt = True,
    experiment: ExperimentOpt = SCORE_EXPERIMENT,
) -> None:
    """HPatches-style patch-pair classification: balanced ROC AUC and imbalanced PR AP, each with its 95%
    bootstrap interval over the pairs (.results files name no patch, so pairs are not clustered by
    sequence here: `similarity run` on the patches does that). The per-pair outcomes go to
    <output>.units.<variant>.parquet."""
    from vsbench.benchmarks.patch_pairs import readers as pairs_readers
    from vsbench.benchmarks.patch_pairs.metrics import mean_pr_ap, patch_pair_grid
    from vsbench.benchmarks.patch_pairs.units import patch_pair_units
    from vsbench.io.inputs import InputError

    resampling = _resampling(resamples)
    with user_errors():
        if not results.is_dir():
            raise InputError(results, "not a folder")
        positives = {name: pairs_readers.read_hpatches_results(results / f, 1) for name, f in HPATCHES_POSITIVES.items()}
        negatives = {name: pairs_readers.read_hpatches_results(results / f, 0) for name, f in HPATCHES_NEGATIVES.items()}
        grid = patch_pair_grid(positives, negatives)
    record: dict[str, Any] = {key: {"roc_auc": m.roc.auc, "pr_ap": m.pr.ap} for key, m in grid.items()}
    record["mean_pr_ap"] = mean_pr_ap(grid)
    if empty := [key for key, m in grid.items() if m.num_imbalanced_positives == 0]:
        few = [name for name in positives if positives[name].size < 5]
        sizes = ", ".join(f"{HPATCHES_POSITIVES[name]} holds {positives[name].size}" for name in few)
        _warn([f"pr_ap is 0 for {', '.join(empty)}: the imbalanced protocol keeps the first 20% of the positives "
               f"(n // 5), none of fewer than 5 ({sizes}); give at least 5 positive pairs"])
    unit_files = []
    for part, units in patch_pair_units(positives, negatives).items():  # the grid's variants, then "mean"
        unit_files.append(_add_units(record, units, resampling, output, part=part))  # mean_pr_ap: top level
    _report("patch pairs", record, output, units, resampling)
    _track("patch_pairs", record, output, {"results": results}, {}, model, track, experiment, unit_files, resampling,
           truth=())


@score_app.command("product-search")
def product_search(
    queries: Annotated[Path, typer.Option(help="Queries JSONL with labelled candidates.")],
    gallery: Annotated[Path, typer.Option(help="Gallery CSV (ASIN, Image ID).")],
    features: Annotated[Path, typer.Option(
        help=".npz (or restricted pickle) with query_feature and gallery_feature.")],
    output: OutputOpt,
    resamples: ResamplesOpt = None,
    model: ModelOpt = "",
    track: TrackOpt = True,
    experiment: ExperimentOpt = SCORE_EXPERIMENT,
) -> None:
    """Language-assisted product search: mAP of the annotated candidates ranked by cosine, with its 95%
    bootstrap interval over the queries. The per-query outcomes go to <output>.units.parquet."""
    from vsbench.benchmarks.product_search import readers as product_readers
    from vsbench.benchmarks.product_search.metrics import product_search_metrics
    from vsbench.benchmarks.product_search.units import product_search_units, query_ids

    resampling = _resampling(resamples)
    with user_errors():
        query_list = product_readers.read_product_queries(queries)
        gallery_ids = product_readers.read_gallery_image_ids(gallery)
        rows = product_readers.candidate_gallery_rows(query_list, gallery_ids, queries, gallery)
        query_feats, gallery_feats = product_readers.read_product_features(features, len(query_list), gallery_ids.size)
        m = product_search_metrics(query_feats, gallery_feats, rows, [q.labels for q in query_list])
    if m.num_queries_without_positive:
        typer.echo(f"note: {m.num_queries_without_positive} queries have no fulfilling candidate "
                   "and are left out of the mean", err=True)
    record: dict[str, Any] = {"map": m.mean_average_precision}
    units = product_search_units(query_feats, gallery_feats, rows, [q.labels for q in query_list],
                                 ids=query_ids(query_list), variant="submission")
    units_file = _add_units(record, units, resampling, output)
    _report("product search", record, output, units, resampling)
    _track("product_search", record, output, {"queries": queries, "gallery": gallery, "features": features}, {},
           model, track, experiment, units_file, resampling, truth=("queries", "gallery"))


def _benchmark_spellings() -> None:
    """Every spelling of a benchmark scores its files too (``vsbench score disc`` is ``copy-detection``,
    ``patch_pairs`` is ``pairs``): one name per benchmark across commands; the aliases stay out of --help."""

    commands = {info.name: info.callback for info in score_app.registered_commands}
    for spec in builtin_specs():
        if spec.score_command in commands:
            for spelling in spec.spellings:
                if spelling not in commands:
                    score_app.command(spelling, hidden=True)(commands[spec.score_command])
                    commands[spelling] = commands[spec.score_command]


_benchmark_spellings()
