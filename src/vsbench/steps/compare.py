"""What changed between two runs, as a picture: ``vsbench compare --runs A B`` and the nightly check.

Why here: the sheet needs every family's verdict rule (beside its units: the benchmarks' and ABID's
``*_outcomes``) and its images (the benchmark's own files, loaded through the registry, and ABID's
bin images), so it sits above both; :mod:`vsbench.reporting.changes` draws the rows and
:mod:`vsbench.reporting.sheets` the files.

A run's unit files are read from MLflow (verified, :class:`~vsbench.reporting.significance.UnitsReader`);
the images from the run's data root: its ``vsbench.data.root`` tag (or its parent's), or the root the
caller gives (``--root``). Every image path must lie under that root
(:func:`~vsbench.reporting.sheets.image_in_root`); ids map to files only through the benchmark's own
lists (its adapter's image sets, pair files and query file), the one mapping its embed step used.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsbench.abid.units import abid_outcomes
from vsbench.benchmarks.copydays.units import copydays_outcomes
from vsbench.benchmarks.disc.units import copy_detection_outcomes
from vsbench.benchmarks.patch_pairs.units import patch_pair_outcomes
from vsbench.benchmarks.product_search.units import product_search_outcomes
from vsbench.benchmarks.vsd.units import vsd_outcomes
from vsbench.reporting.changes import Comparison, ImageLookup, NoImages, change_sheet
from vsbench.reporting.sheets import image_in_root, sheet_rows, write_sheet
from vsbench.stats.outcomes import Outcomes, Shown, correct_outcomes
from vsbench.stats.units import Units

FAILURES_DIR = "failures"  # the artifact folder of sheets on a run (issue 47)

# A unit file's rule, chosen by what it holds (the file scorers and plugins name their benchmark as
# they like; the columns say which family's units they are). First match wins.
RULES: tuple[tuple[str, frozenset[str], Callable[[Units], Outcomes]], ...] = (
    ("query", frozenset({"scores", "positive", "references", "n_positives", "correct_at_1"}), copy_detection_outcomes),
    ("query", frozenset({"distances", "hits", "n_positives"}), copydays_outcomes),
    ("seed", frozenset({"has_positive", "score", "label", "rank"}), vsd_outcomes),
    ("query", frozenset({"has_positive", "score", "label", "ap"}), product_search_outcomes),
    ("pair", frozenset({"distance", "label"}), patch_pair_outcomes),
    ("question", frozenset({"prediction", "truth"}), abid_outcomes),
)


def outcomes_of(units: Units) -> Outcomes | None:
    """The verdict per unit of a unit file by its family's rule; the generic ``correct`` column
    rule; None when no rule fits (the file is left out of the sheet, with a note)."""
    for kind, columns, rule in RULES:
        if units.kind == kind and columns <= set(units.columns):
            return rule(units)
    if "correct" in units.columns:
        return correct_outcomes(units)
    return None


# --- images ------------------------------------------------------------------------------------------


class BenchmarkImages:
    """A registered benchmark's images under ``root``: ids mapped to files through its adapter."""

    def __init__(self, root: Path, adapter: Any) -> None:
        self.root = Path(root)
        self.adapter = adapter
        self._paths: dict[str, Path] | None = None

    def _checked(self, image_id: str, path: Path | str | None) -> tuple[str, Path | None, str]:
        if path is None:
            return image_id, None, f"{image_id[:80]!r} is not in the benchmark's image lists"
        found, why = image_in_root(self.root, path)
        return image_id, found, why

    def _path(self, image_id: str) -> Path | None:
        if hasattr(self.adapter, "images_dir") and hasattr(self.adapter, "_needed"):  # VSD: ids are paths
            return Path(self.adapter.images_dir) / image_id  # (its image sets would write crops)
        if self._paths is None:
            self._paths = {}
            for images in self.adapter.image_sets().values():
                for known, path in zip(images.ids, images.paths):
                    self._paths.setdefault(str(known), Path(path))
        return self._paths.get(image_id)

    def unit(self, outcomes: Outcomes, row: int) -> list[tuple[str, Path | None, str]]:
        units = outcomes.units
        unit = str(units.ids[row])
        pairs = {**getattr(self.adapter, "positives", {}), **getattr(self.adapter, "negatives", {})}
        if units.kind == "pair" and pairs and "set" in units.columns and "line" in units.columns:
            found = pairs.get(str(units.columns["set"][row]))
            line = int(units.columns["line"][row])
            if found is None or not 1 <= line <= len(found.first):
                return [(unit, None, "pair not in the benchmark's pair files")]
            return [self._checked(p, self._path(p)) for p in (found.first[line - 1], found.second[line - 1])]
        queries = getattr(self.adapter, "queries", None)
        if isinstance(queries, list) and queries and hasattr(queries[0], "source_pid"):  # product search
            query = self._query(unit)
            if query is None:
                return [(unit, None, "query not in the queries file")]
            return [self._checked(query.source_pid, self._path(query.source_pid))]
        return [self._checked(unit, self._path(unit))]

    def _query(self, unit: str) -> Any:
        lines = getattr(self, "_lines", None)
        if lines is None:
            lines = self._lines = {str(q.line): q for q in self.adapter.queries}
        return lines.get(unit)

    def shown(self, outcomes: Outcomes, row: int, shown: Shown) -> tuple[Path | None, str]:
        image = shown.image
        if shown.kind == "candidate":
            query = self._query(str(outcomes.units.ids[row]))
            place = int(image)
            if query is None or not 0 <= place < len(query.candidate_pids):
                return None, "candidate not in the queries file"
            image = query.candidate_pids[place]
        return self._checked(image, self._path(image))[1:]


class AbidImages:
    """ABID's bin images: a question's id starts with its image's 0-based index (``523``,
    ``523:B00X``, ``523:B00X:3#2``); the photo is ``%05d.jpg`` of index + 1 under the root (the
    resized images folder) or its ``bin-images/``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def unit(self, outcomes: Outcomes, row: int) -> list[tuple[str, Path | None, str]]:
        from vsbench.abid.ids import IMAGES_DIR, local_name

        unit = str(outcomes.units.ids[row])
        head = unit.split("#", 1)[0].split(":", 1)[0]
        if not head.isdigit():
            return [(unit, None, "no image index in the question id")]
        name = local_name(int(head) + 1, "image")
        path = self.root / name
        if not path.exists() and (self.root / IMAGES_DIR / name).exists():
            path = self.root / IMAGES_DIR / name
        found, why = image_in_root(self.root, path)
        return [(unit, found, why)]

    def shown(self, outcomes: Outcomes, row: int, shown: Shown) -> tuple[Path | None, str]:
        return None, "ABID answers show no other image"


def images_for(units: Units, benchmark: str, root: str, options: Mapping[str, Any] | None = None,
               cache: dict[tuple[str, str, str], ImageLookup] | None = None) -> ImageLookup:
    """The image lookup for a run's units: ABID's bin images, a registered benchmark's adapter over
    ``root``, or :class:`NoImages` saying why there are none (no root, not a local folder, a
    benchmark the registry does not know, files that do not load)."""
    if not root:
        return NoImages("no data root recorded on the run (give --root)")
    if "://" in root or not Path(root).is_dir():
        return NoImages(f"data root {root[:200]!r} is not a local folder (give --root)")
    folder = Path(root).resolve()  # the adapter's paths absolute: checked against this root as they are
    key = (benchmark, str(folder), json.dumps(dict(options or {}), sort_keys=True))
    if cache is not None and key in cache:
        return cache[key]
    found: ImageLookup
    if units.kind == "question" and units.benchmark.startswith("abid"):
        found = AbidImages(folder)
    else:
        from vsbench.benchmarks.registry import load_benchmark

        try:
            found = BenchmarkImages(folder, load_benchmark(benchmark, folder, **dict(options or {})))
        except Exception as exc:  # noqa: BLE001 - an unknown name, a missing file, a plugin's error: no images
            found = NoImages(f"benchmark {benchmark!r} over {root[:200]}: {type(exc).__name__}: {str(exc)[:200]}")
    if cache is not None:
        cache[key] = found
    return found


# --- two runs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSide:
    """One run's unit files, benchmark, options and data root, as the sheet needs them."""

    run_id: str
    units: list[Units]
    benchmark: str
    options: dict[str, Any]
    root: str


def _distinct(by_metric: Mapping[str, Units], metrics: Sequence[str] | None) -> list[Units]:
    """The run's unit files, once each (a file names several metrics); patch pairs' grid files hold
    the same pairs as their pooled ``mean`` file, which alone is judged (the pooled operating point)."""
    seen: dict[int, Units] = {}
    for metric, units in by_metric.items():
        if metrics is None or metric in metrics:
            seen.setdefault(id(units), units)
    files = list(seen.values())
    pooled = [u for u in files if u.kind == "pair" and u.variant == "mean"]
    return pooled + [u for u in files if u.kind != "pair"] if pooled else files


def run_side(reader: Any, run_id: str, root: str | None = None, metrics: Sequence[str] | None = None) -> RunSide:
    """``run_id``'s unit files (itself, or an ABID parent's score step), its benchmark and data root."""
    from vsbench.tracking.evaluations import BENCHMARK_TAG
    from vsbench.tracking.provenance import DATA_ROOT_TAG, PARENT_TAG

    units_run = reader.units_run_id(run_id) or run_id
    run = reader.run(run_id)
    tags = run.data.tags
    recorded = tags.get(DATA_ROOT_TAG, "")
    if not recorded and tags.get(PARENT_TAG):
        recorded = reader.run(tags[PARENT_TAG]).data.tags.get(DATA_ROOT_TAG, "")
    units = _distinct(reader.units(units_run), metrics)
    benchmark = tags.get(BENCHMARK_TAG, "")
    options = run_options(run_id, run.data.params.get("benchmark_options"),
                          [benchmark] if benchmark else [u.benchmark for u in units])
    return RunSide(run_id, units, benchmark, options, root or recorded)


def run_options(run_id: str, value: Any, benchmarks: Sequence[str]) -> dict[str, Any]:
    """A run's ``benchmark_options`` param as the loader's keywords, through the command line's own
    check (issue 54): a JSON object (:func:`~vsbench.runspec.run.json_object`) whose names the
    registered loader of each of ``benchmarks`` takes (``check_options``). The param is data written
    by whoever can write the run and it becomes keyword arguments of a loader that reads files: a
    value of any other shape is one ValueError naming the run (the sheet is refused, said in one
    line), never ``{}`` in silence nor unknown keywords. A benchmark the registry does not know
    loads no images, so it has nothing to check against."""
    from vsbench.benchmarks.registry import get
    from vsbench.runspec.run import json_object

    where = f"run {run_id}: its benchmark_options param"
    try:
        options = json_object(str(value or "{}"), "benchmark_options")
        for name in dict.fromkeys(benchmarks):
            try:
                spec = get(name)
            except ValueError:
                continue
            spec.check_options(options)
    except ValueError as exc:
        raise ValueError(f"{where} {str(value)[:80]!r}: {exc}; no compare sheet of it (its images are loaded with "
                         "those options)") from None
    return options


def _key(units: Units) -> tuple[str, str, str, tuple[str, ...]]:
    return units.kind, units.benchmark, units.variant, tuple(sorted(units.metrics))


# One pooled ranking of queries' results: a true match's rank moves the metric (DISC's uAP and recall at
# p90, Copydays' overall uAP, VSD's ROC and PR AUC over its tagged pairs).
RANKING_STATISTICS = frozenset({"micro_ap", "copydays_uap", "tagged_roc_auc", "tagged_average_precision"})
# A ratio whose numerator is a per-query ranking value: its own AP (Copydays' strong and block mAPs,
# product search's mAP), its hits within k or reciprocal rank (VSD's HR@k, MRR@k).
RANKING_COLUMNS = frozenset({"ap", "strong_ap"})
RANKING_PREFIXES = ("hr_at_", "mrr_at_")


def ranking_metric(spec: Mapping[str, Any]) -> bool:
    """Whether a unit file's metric moves with the ranks of queries' true matches, not only with
    which is first: a pooled-ranking statistic, or a mean of per-query APs, hit rates or reciprocal
    ranks (an accuracy, a 0/1 column averaged, is not)."""
    if str(spec.get("statistic")) in RANKING_STATISTICS:
        return True
    num = str(spec.get("num", ""))  # a ratio's numerator column
    return num in RANKING_COLUMNS or num.startswith(RANKING_PREFIXES)


def by_rank(units: Units, metrics: Sequence[str] | None) -> bool:
    """Whether a comparison of ``units`` for ``metrics`` (None: every metric the file names) should list
    the units whose own AP or true match's rank moved (as the family's rule gives it), not those right
    at rank 1 in one run only: when one of those metrics is a :func:`ranking_metric` (issue 55 item 8)."""
    asked = units.metrics if metrics is None else {m: units.metrics[m] for m in metrics if m in units.metrics}
    return any(ranking_metric(spec) for spec in asked.values())


def _judged(units: Units, run_id: str) -> Outcomes | None:
    """:func:`outcomes_of`, a rule's refusal naming the run it came from."""
    try:
        return outcomes_of(units)
    except ValueError as exc:
        raise ValueError(f"run {run_id}: {exc}") from None


def comparisons(first: RunSide, second: RunSide, cache: dict | None = None, name: str = "",
                metrics: Sequence[str] | None = None) -> tuple[list[Comparison], list[str]]:
    """The unit files of two runs paired (same kind, benchmark, variant and metrics; or the only
    file of each) and judged (by rank where :func:`by_rank` says so); plus one note per file left out."""
    cache = {} if cache is None else cache
    notes: list[str] = []
    pairs: list[tuple[Units, Units]] = []
    if len(first.units) == 1 and len(second.units) == 1:
        pairs = [(first.units[0], second.units[0])]
    else:
        others = {_key(u): u for u in second.units}
        pairs = [(u, others[_key(u)]) for u in first.units if _key(u) in others]
    if not pairs:
        notes.append(f"{name or first.run_id}: no unit files both runs hold: nothing to compare")
    out: list[Comparison] = []
    for a, b in pairs:
        label = name or " · ".join(p for p in (a.benchmark, a.variant) if p)
        try:
            judged_a, judged_b = _judged(a, first.run_id), _judged(b, second.run_id)
        except ValueError as exc:  # a unit file no rule can read (a NaN score): this pair left out, said
            notes.append(f"{label}: {exc}: not compared")
            continue
        if judged_a is None or judged_b is None:
            notes.append(f"{label}: no rule says which {a.kind} units are right: not compared")
            continue
        out.append(Comparison(label, judged_a, judged_b,
                              images_for(a, first.benchmark or a.benchmark, first.root, first.options, cache),
                              images_for(b, second.benchmark or b.benchmark, second.root, second.options, cache),
                              by_rank(a, metrics)))
    return out, notes


def write_compare_sheet(found: Sequence[Comparison], folder: Path, stem: str, *, labels: tuple[str, str],
                        notes: Sequence[str] = (), rows: int | None = None, title: str = "",
                        runs: tuple[str, str] = ("", "")) -> dict[str, Any] | None:
    """``<folder>/<stem>.png`` and ``.html``: the changed units of ``found``; returns what
    :func:`~vsbench.reporting.sheets.write_sheet` returns plus the counts, or None when sheets are
    off (``VSBENCH_FAILURE_ROWS=0``)."""
    rows = sheet_rows(rows)
    if rows == 0:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    sheet, counts = change_sheet(found, rows, labels, title, runs)
    if notes:
        from dataclasses import replace

        sheet = replace(sheet, notes=(*sheet.notes, *notes))
    written = write_sheet(sheet, folder, stem)
    return {**written, "counts": counts}


def compare_runs_sheet(reader: Any, first_run_id: str, second_run_id: str, folder: Path, *,
                       root: str | None = None, metrics: Sequence[str] | None = None,
                       labels: tuple[str, str] | None = None) -> dict[str, Any] | None:
    """``vsbench compare --runs FIRST SECOND``'s sheet in ``folder`` (stem ``compare-<first8>-<second8>``),
    the runs named by ``labels`` (default :func:`run_labels`) and their ids. Raises LookupError saying
    why when the runs hold no unit files that can be compared."""
    first = run_side(reader, first_run_id, root, metrics)
    second = run_side(reader, second_run_id, root, metrics)
    found, notes = comparisons(first, second, metrics=metrics)
    if not found:
        raise LookupError("; ".join(notes) or "no unit files to compare")
    return write_compare_sheet(found, folder, f"compare-{first_run_id[:8]}-{second_run_id[:8]}",
                               labels=labels or run_labels(reader, first_run_id, second_run_id), notes=notes,
                               runs=(first_run_id, second_run_id))


def run_labels(reader: Any, first_run_id: str, second_run_id: str) -> tuple[str, str]:
    """What a compare sheet calls two runs: an evaluation by its model and variant as MLflow names them
    (``resnet34-random · Flat · none``), another run by its name; two that read alike (one model on two
    nights) gain their run ids' first 8 characters. Not "first" and "second" (issue 57)."""
    from vsbench.reporting.runs import display_name, evaluation_record
    from vsbench.tracking.evaluations import EVALUATION_STEP
    from vsbench.tracking.provenance import STEP_TAG

    def label(run_id: str) -> str:
        run = reader.run(run_id)
        if run.data.tags.get(STEP_TAG) == EVALUATION_STEP:
            return display_name(evaluation_record(run).model)
        return run.info.run_name or run_id[:8]

    first, second = label(first_run_id), label(second_run_id)
    if first == second:
        first, second = f"{first} ({first_run_id[:8]})", f"{second} ({second_run_id[:8]})"
    return first, second


def night_compare_sheet(client: Any, night_run_id: str, baseline_run_id: str) -> dict[str, Any] | None:
    """A night against its baseline: each evaluation of both nights (the same ``vsbench.series``) and
    the nights' ABID scores, in one sheet logged to the night's run as ``failures/compare-<baseline>.png``
    and ``.html``. Never raises (one line on stderr: a picture must not decide or fail the check)."""
    try:
        return _night_sheet(client, night_run_id, baseline_run_id)
    except Exception as exc:  # noqa: BLE001 - the check's outcome stands without its picture
        print(f"vsbench: compare sheet of {night_run_id} against {baseline_run_id} not made: "
              f"{type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
        return None


def _night_sheet(client: Any, night_run_id: str, baseline_run_id: str) -> dict[str, Any] | None:
    from vsbench.reporting.significance import UnitsReader
    from vsbench.tracking.evaluations import SERIES_TAG, evaluation_children

    if sheet_rows() == 0:
        return None
    reader = UnitsReader(client)
    night, baseline = reader.run(night_run_id), reader.run(baseline_run_id)
    before = {r.data.tags.get(SERIES_TAG): r for r in
              evaluation_children(client, baseline_run_id, baseline.info.experiment_id)}
    found: list[Comparison] = []
    notes: list[str] = []
    cache: dict = {}
    for run in evaluation_children(client, night_run_id, night.info.experiment_id):
        series = run.data.tags.get(SERIES_TAG)
        if series not in before or not run.data.tags.get("vsbench.units"):
            continue
        for r in (run, before[series]):
            reader.remember(r)
        made, said = comparisons(run_side(reader, before[series].info.run_id), run_side(reader, run.info.run_id),
                                 cache, name=run.info.run_name or series)
        found += made
        notes += said
    if reader.units_run_id(night_run_id) and reader.units_run_id(baseline_run_id):  # ABID's score step
        made, said = comparisons(run_side(reader, baseline_run_id), run_side(reader, night_run_id), cache)
        found += made
        notes += said
    if not found:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        written = write_compare_sheet(found, Path(tmp), f"compare-{baseline_run_id}", labels=("baseline", "tonight"),
                                      notes=notes, runs=(baseline_run_id, night_run_id))
        if written is None:
            return None
        for entry in written["files"].values():
            client.log_artifact(night_run_id, entry["path"], FAILURES_DIR)
            entry["artifact"] = f"{FAILURES_DIR}/{Path(entry['path']).name}"
    return written
