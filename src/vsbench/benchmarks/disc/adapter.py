"""DISC2021 copy detection (``disc``): the layout SSCD's ``disc.py`` reads, the metrics ``disc_eval.py`` writes.

On disk (SSCD ``DISCEvalDataset``; each folder name is a loader option, relative to the root)::

    <root>/val_query/Q00000.jpg ...              queries, id = file stem
    <root>/val_ref/R000000.jpg ...               references
    <root>/training/T000000.jpg ...              training images (codecs and score normalization)
    <root>/val_groundtruth_matches.csv           query_id,reference_id (empty reference: no copy)
    <root>/query_groups.csv                      optional, vsbench's own: query_id,group (below)

A folder holds its images directly (no recursion), with the extensions torchvision's
``is_image_file`` accepts, sorted by name, as SSCD's ``get_image_paths`` does. isc2021's id lists
(``list_files/subset_1_queries``: one id a line) can restrict a folder to a subset.

``evaluate`` follows ``disc_eval.py``: for every codec, without and with score normalization,
k nearest references per query (k = 10 in SSCD) are scored with uAP, accuracy at 1 and recall at
precision 0.9. Records use MLflow-safe keys; :func:`disc_csv_rows` turns them into the rows of
SSCD's ``disc_metrics.csv`` (``codec,score_norm,uAP,accuracy-at-1,recall-at-p90``, with
``None`` for no normalization), in SSCD's row order: every codec without normalization first.

**Groups of queries** (issue 55): a bootstrap draws the queries that copy one reference together
(:func:`~vsbench.benchmarks.disc.units.copy_groups`), but queries *without* a copy can share a
source too: skimage-copydetect's 18 no-copy queries are 6 edited crops of each of 3 photos. The
ground truth cannot say so, so a generator writes ``query_groups.csv`` (``query_id,group``: the
photo a query was drawn from), and the queries it names with one group are drawn together
(:func:`with_query_groups`). DISC2021 and Copydays have no such file; a file that names an unknown
query, repeats one or holds an empty group is refused in one line naming its line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vsbench.benchmarks.base import EvalResult, EvalSettings, SearchedBenchmark, Sheet, Units
from vsbench.benchmarks.disc.failures import copy_detection_sheet
from vsbench.benchmarks.disc.metrics import copy_detection_metrics
from vsbench.benchmarks.disc.readers import read_copy_detection_ground_truth
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.benchmarks.ranked_failures import Pictures
from vsbench.benchmarks.ties import tie_fields
from vsbench.index.settings import parse_score_norms
from vsbench.io.features import FeatureError, FeatureSet, ImageSet
from vsbench.io.ids import Ids
from vsbench.io.inputs import InputError, iter_lines, quote
from vsbench.io.storage import safe_join
from vsbench.stats.units import groups_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from vsbench.index.plan import SearchRequest, SearchResults

logger = logging.getLogger(__name__)

QUERY_DIR = "val_query"
REFERENCE_DIR = "val_ref"
TRAIN_DIR = "training"
GROUND_TRUTH_CSV = "val_groundtruth_matches.csv"
QUERY_GROUPS_CSV = "query_groups.csv"  # optional: query_id,group (module docstring)
MAX_GROUP = 200  # characters of a group's name
# torchvision.datasets.folder.IMG_EXTENSIONS, compared in lower case like is_image_file.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

CSV_NAME = "disc_metrics.csv"
# record key -> disc_metrics.csv column, in the CSV's column order.
CSV_FIELDS = {
    "codec": "codec",
    "score_norm": "score_norm",
    "uap": "uAP",
    "accuracy_at_1": "accuracy-at-1",
    "recall_at_p90": "recall-at-p90",
}
NO_NORM = "none"  # = index.search.NO_NORM_LABEL (not imported: faiss loads only to score); SSCD's CSV: "None"
_PR_POINTS = 2000  # a precision-recall curve is drawn through at most this many points


def list_images(folder: Path, what: str, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> ImageSet:
    """The image files directly in ``folder``, sorted by name; id = file stem.

    Two files with the same stem (``Q1.jpg`` and ``Q1.png``) would be one id for two images, so
    that is an error naming both.
    """
    if not folder.is_dir():
        raise FileNotFoundError(f"{what}: no folder {folder}")
    wanted = tuple(e.lower() for e in extensions)
    with os.scandir(folder) as entries:  # scandir's is_file needs no stat per file: DISC has 1M references
        names = sorted(e.name for e in entries if e.name.lower().endswith(wanted) and e.is_file())
    by_stem: dict[str, str] = {}
    for name in names:
        stem = Path(name).stem
        if stem in by_stem:
            raise ValueError(f"{what}: {by_stem[stem]} and {name} in {folder} share the id {stem!r}")
        by_stem[stem] = name
    return ImageSet(tuple(by_stem), tuple(safe_join(folder, n) for n in by_stem.values()))


def restrict_to_list(images: ImageSet, list_file: Path, folder: Path) -> ImageSet:
    """The images an isc2021-style list names (one id, or file name relative to ``folder``, a line).

    Entries are dataset text, so each goes through ``safe_join`` first: ``../x`` or ``/x`` raise
    :class:`~vsbench.io.storage.UnsafePathError`. An entry naming no image in the folder is an
    error with its line.
    """
    path_of = dict(zip(images.ids, images.paths))
    line_of: dict[str, int] = {}  # id -> line, in list order
    for number, line in iter_lines(list_file):
        entry = line.strip()
        if not entry:
            continue
        target = safe_join(folder, entry)
        image_id = target.stem if target.suffix.lower() in IMAGE_EXTENSIONS else target.name
        if target.parent != folder or image_id not in path_of:
            raise InputError(list_file, f"{quote(entry)} is not an image in {folder}", number)
        if image_id in line_of:
            raise InputError(list_file, f"id {quote(image_id)} repeats line {line_of[image_id]}", number)
        line_of[image_id] = number
    return ImageSet(tuple(line_of), tuple(path_of[i] for i in line_of))


@dataclass(frozen=True)
class DiscBenchmark(SearchedBenchmark):
    """A loaded DISC-layout dataset: its image sets and ground truth, checked against each other."""

    root: Path
    queries: ImageSet
    references: ImageSet
    train: ImageSet | None
    gt_query: Ids | np.ndarray  # positive pairs only, as read from the ground-truth CSV (Ids: codes, compact)
    gt_reference: Ids | np.ndarray
    ground_truth_path: Path
    name: str = "disc"
    query_groups: tuple[tuple[str, str], ...] = ()  # (query id, group) from query_groups.csv

    def image_sets(self) -> dict[str, ImageSet]:
        sets = {"query": self.queries, "reference": self.references}
        if self.train is not None:
            sets["train"] = self.train
        return sets


    def search_requests(self, features: dict[str, FeatureSet], settings: EvalSettings) -> list[SearchRequest]:
        """SSCD's searches: ``l2`` (L2 distances, no score normalization) and, with score
        normalization, ``ip`` (inner products on SSCD's augmented vectors).

        SSCD's ``disc_eval`` searches its unnormalized rows with ``METRIC_L2`` whatever the descriptors,
        and its normalized rows by inner product on augmented vectors. On unit-norm descriptors the two
        rank alike, but SSCD's own unit-norm test is loose (mean ``|norm - 1| < 0.01``) and rankings do
        differ inside that tolerance, so each row gets exactly the search SSCD gives it.
        """
        from vsbench.index.plan import SearchRequest

        queries = aligned_features(features, "query", self.queries)
        references = aligned_features(features, "reference", self.references)
        train = aligned_features(features, "train", self.train).features if self.train is not None else None
        if train is None and parse_score_norms(settings.score_norm):
            raise ValueError(f"score normalization {settings.score_norm!r} needs the training images; "
                             "load the dataset with a train_dir or evaluate with score_norm=''")
        common = {"queries": queries.features, "references": references.features, "train": train,
                  "codecs": settings.codecs, "k": settings.k, "reference_ids": self.references.ids,
                  "search_params": settings.search_params}
        requests = [SearchRequest("l2", metric="l2", **common)]
        if parse_score_norms(settings.score_norm):
            requests.append(SearchRequest("ip", metric="ip", score_norm=settings.score_norm, unnormalized=False,
                                          **common))
        return requests

    def score(self, features: dict[str, FeatureSet], settings: EvalSettings,
              results: Mapping[str, SearchResults]) -> EvalResult:
        """The metrics of the searches' results (however they were searched: one process or shards)."""
        from vsbench.index.plan import as_candidates

        runs = [run for name in ("l2", "ip") if name in results  # SSCD's row order: unnormalized first
                for run in as_candidates(results[name], settings.global_cap)]
        query_ids, reference_ids = np.asarray(self.queries.ids), np.asarray(self.references.ids)
        gt_keys = self._ground_truth_keys()
        records: list[dict[str, Any]] = []
        units: list[Units | None] = []
        curves: dict[str, list[tuple[str, float, np.ndarray, np.ndarray]]] = {}
        for codec, score_norm, found in runs:
            predictions = (query_ids[found.query], reference_ids[found.reference], found.score,
                           self.gt_query, self.gt_reference)
            metrics = copy_detection_metrics(*predictions)
            units.append(with_query_groups(copy_detection_units(*predictions, queries=self.queries.ids,
                                                                benchmark=self.name, variant=f"{codec} {score_norm}"),
                                           self.query_groups))
            records.append({"codec": codec, "score_norm": score_norm, "uap": metrics.uap,
                            "accuracy_at_1": metrics.accuracy_at_1, "recall_at_p90": metrics.recall_at_p90,
                            **tie_fields(metrics.ties)})
            is_tp = np.isin(found.query * len(reference_ids) + found.reference, gt_keys)
            precision, recall = precision_recall_curve(found.score, is_tp, len(self.gt_query))
            curves.setdefault(codec, []).append((score_norm, metrics.uap, precision, recall))
        figures = {f"disc_pr_{_slug(codec)}.png": _pr_figure(codec, variants) for codec, variants in curves.items()}
        pictures = Pictures({"query": (self.queries, self.root), "reference": (self.references, self.root)})

        def failure_sheet(index: int, rows: int) -> Sheet | None:
            unit = units[index]
            return None if unit is None else copy_detection_sheet(unit, pictures.sets, rows=rows, k=settings.k,
                                                                  truths=self.copies_of, pictures=pictures)

        return EvalResult(records=records, csv_name=CSV_NAME, csv_columns=tuple(CSV_FIELDS.values()),
                          csv_rows=disc_csv_rows(records), figures=figures, units=units, failure_sheet=failure_sheet)

    def copies_of(self, queries: Sequence[str]) -> dict[str, list[str]]:
        """Each of a few ``queries``' ground-truth references (a failure sheet shows the copies never
        retrieved): looked up in the ground truth's codes, no text made per row."""
        query_ids, reference_ids = as_ids(self.gt_query), as_ids(self.gt_reference)
        found: dict[str, list[str]] = {}
        for query in queries:
            code = query_ids.value_index(query)
            if code is not None:
                rows = np.flatnonzero(query_ids.codes == code)
                found[query] = [ref for ref in (str(v) for v in reference_ids[rows].tolist()) if ref]
        return found

    def _ground_truth_keys(self) -> np.ndarray:
        """Each findable positive pair as ``query_row * n_references + reference_row`` (rows of the image
        sets); pairs naming an image outside the sets cannot be predicted and have no key."""
        query_row = _rows_of(as_ids(self.gt_query), self.queries.ids)
        reference_row = _rows_of(as_ids(self.gt_reference), self.references.ids)
        found = (query_row >= 0) & (reference_row >= 0)
        return query_row[found] * len(self.references.ids) + reference_row[found]


def as_ids(values: Ids | np.ndarray) -> Ids:
    """A ground-truth column as :class:`Ids` (the reader gives them; tests may give arrays)."""
    return values if isinstance(values, Ids) else Ids.from_strings(np.asarray(values).tolist())


def _rows_of(ids: Ids, image_ids: Sequence[str]) -> np.ndarray:
    """Each row's image row in ``image_ids`` (-1 for none), looked up once per distinct id."""
    row_of = {image_id: n for n, image_id in enumerate(image_ids)}
    rows = np.full(len(ids.values), -1, dtype=np.int64)
    for start, values in ids.batches():
        rows[start:start + len(values)] = [row_of.get(v, -1) for v in values]
    return rows[ids.codes]


def load_disc(
    root: Path,
    *,
    query_dir: str = QUERY_DIR,
    reference_dir: str = REFERENCE_DIR,
    train_dir: str | None = TRAIN_DIR,
    ground_truth: str = GROUND_TRUTH_CSV,
    query_list: str | None = None,
    reference_list: str | None = None,
    train_list: str | None = None,
) -> DiscBenchmark:
    """Read a DISC-layout dataset under ``root``; every option is a path relative to ``root``.

    ``train_dir=None`` leaves the training images out (then no PCA codec and no score
    normalization). ``*_list`` restrict a folder to the ids an isc2021-style list file names; the
    ground truth then keeps the rows of the listed queries (isc2021's subsets are evaluated so).
    A ground-truth id that names no image (of the folder, or of the list) is kept, as SSCD keeps it:
    a positive that can never be retrieved. A warning names its CSV line.
    """
    root = Path(root)

    def image_set(folder_name: str, list_name: str | None, what: str, option: str) -> tuple[ImageSet, ImageSet]:
        """(every image of the folder, the images to use); a list file that is not there is named as
        the benchmark option that names it (``option``), not only as a path."""
        folder = safe_join(root, folder_name)
        images = list_images(folder, what)
        if list_name is None:
            return images, images
        list_file = safe_join(root, list_name)
        if not list_file.exists():
            raise InputError(list_file, f"no such file: the benchmark option {option} (--benchmark-options) "
                                        f"names it, relative to the data folder {root}; give a list file there (one "
                                        f"id a line), or leave {option} out")
        return images, restrict_to_list(images, list_file, folder)

    all_queries, queries = image_set(query_dir, query_list, "queries", "query_list")
    _, references = image_set(reference_dir, reference_list, "references", "reference_list")
    train = None if train_dir is None else image_set(train_dir, train_list, "training images", "train_list")[1]
    gt_path = safe_join(root, ground_truth)
    truth = read_copy_detection_ground_truth(gt_path)
    # Rows of queries left out by the query list go; queries with no image at all stay, as in SSCD.
    kept = truth.query_ids.isin(queries.ids) | ~truth.query_ids.isin(all_queries.ids)
    gt_query, gt_reference = truth.query_ids[kept], truth.reference_ids[kept]
    listed = " listed in " + reference_list if reference_list else ""
    for note in (*truth.notes, _unknown_note(gt_path, 0, gt_query, all_queries, f"a query image in {query_dir}"),
                 _unknown_note(gt_path, 1, gt_reference, references, f"a reference image in {reference_dir}{listed}")):
        if note:
            logger.warning(note)
    if not gt_query.isin(queries.ids).any():
        raise InputError(gt_path, f"none of the {len(queries.ids)} queries has a copy: nothing to score")
    groups_path = safe_join(root, QUERY_GROUPS_CSV)
    groups = read_query_groups(groups_path, all_queries.ids) if groups_path.is_file() else ()
    return DiscBenchmark(root=root, queries=queries, references=references, train=train, gt_query=gt_query,
                         gt_reference=gt_reference, ground_truth_path=gt_path, query_groups=groups)


def read_query_groups(path: Path, queries: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``query_groups.csv``'s (query id, group) rows (module docstring), checked: the header
    ``query_id,group``, two fields a line, a query of the folder listed at most once, a group of 1 to
    :data:`MAX_GROUP` characters; anything else is an :class:`InputError` naming the line."""
    import csv

    known = set(queries)
    seen: dict[str, int] = {}
    rows: list[tuple[str, str]] = []
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        fields = next(csv.reader([line]))
        if number == 1:
            if fields != ["query_id", "group"]:
                raise InputError(path, "the header must be query_id,group", number)
            continue
        if len(fields) != 2:
            raise InputError(path, f"expected two fields (query_id,group), found {len(fields)}", number)
        query, group = fields[0].strip(), fields[1].strip()
        if query not in known:
            raise InputError(path, f"{quote(query)} is not a query image of this set; list only its queries", number)
        if not 0 < len(group) <= MAX_GROUP:
            raise InputError(path, f"the group of {quote(query)} must be 1 to {MAX_GROUP} characters", number)
        if query in seen:
            raise InputError(path, f"query {quote(query)} is listed twice (line {seen[query]} too): one group a query",
                             number)
        seen[query] = number
        rows.append((query, group))
    return tuple(rows)


def with_query_groups(units: Units | None, groups: Sequence[tuple[str, str]]) -> Units | None:
    """``units`` with the queries ``groups`` names with one group drawn together, beside the groups
    the ground truth already makes (units linked through either are one group: the connected
    components, as :func:`~vsbench.stats.units.groups_of` makes them). Unchanged without groups."""
    if units is None or not groups:
        return units
    ids = np.asarray(units.ids, dtype=str)
    row_of = {text: row for row, text in enumerate(ids.tolist())}
    listed = [(row_of[query], f"group:{group}") for query, group in groups if query in row_of]
    if not listed:
        return units
    current = np.char.add("unit:", ids) if units.clusters is None else np.asarray(units.clusters, dtype=str)
    rows = np.concatenate([np.arange(ids.size), np.asarray([r for r, _ in listed], dtype=np.int64)])
    sources = np.concatenate([current, np.asarray([g for _, g in listed], dtype=str)])
    return replace(units, clusters=groups_of(ids.size, rows, sources, unit_ids=ids))


def disc_csv_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records -> rows of SSCD's ``disc_metrics.csv`` (its column names; ``None`` for no normalization)."""
    rows = []
    for record in records:
        row = {column: record[key] for key, column in CSV_FIELDS.items()}
        if row["score_norm"] == NO_NORM:
            row["score_norm"] = "None"
        rows.append(row)
    return rows


def precision_recall_curve(scores: np.ndarray, is_tp: np.ndarray, num_ground_truth: int) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """Precision and recall after each prediction, scores descending, negatives first on ties (as uAP)."""
    scores = np.asarray(scores, dtype=np.float64)
    is_tp = np.asarray(is_tp, dtype=bool)
    order = np.lexsort((is_tp, -scores))  # last key first: score descending, then False (negative) first
    true_positives = np.cumsum(is_tp[order])
    precision = true_positives / np.arange(1, scores.size + 1)
    return precision, true_positives / num_ground_truth


def _unknown_note(path: Path, column: int, listed: Ids, images: ImageSet, what: str) -> str | None:
    """A one-line warning when ground-truth ids in ``column`` name no image of ``images``.

    SSCD keeps such pairs: they count in ``N_gt`` and are never retrieved, so recall cannot reach 1.
    vsbench scores them the same way and says so, naming the first line.
    """
    known = set(images.ids)
    unknown = {i for i in listed.used().to_pylist() if i not in known}
    if not unknown:
        return None
    first = next((number for number, line in iter_lines(path)
                  if len(fields := line.strip().split(",")) > column and fields[column] in unknown), None)
    return (f"{path}:{first}: {len(unknown)} id(s) in column {column + 1} are not {what} (e.g. {quote(sorted(unknown)[0])}); "
            "SSCD counts their pairs as positives never retrieved, which caps recall, and so does this score; "
            "remove those lines (or add the images) to score only what can be found")


def aligned_features(features: Mapping[str, FeatureSet], name: str, images: ImageSet) -> FeatureSet:
    """The features of one image set, in the image set's row order, checked finite (rows read in
    place from the embed step's files stay there, each checked as it is read: see FeatureSet.select).

    Row order is what lets search results (row indices) be read back as image ids.
    """
    if name not in features:
        raise FeatureError(f"no features for the {name!r} image set (got {sorted(features)})")
    selected = features[name].select(images.ids, source=f"{name} features", keep_mapped=True)
    selected.check_finite(f"{name} features")
    return selected


def _slug(codec: str) -> str:
    """``PCAW512,L2norm,Flat`` -> ``PCAW512_L2norm_Flat``: a file-name-safe codec name."""
    return "".join(c if c.isalnum() else "_" for c in codec)


def _pr_figure(codec: str, variants: Sequence[tuple[str, float, np.ndarray, np.ndarray]]) -> Figure:
    """Precision against recall for one codec, one line per score-normalization variant."""
    from vsbench.reporting.plots import plt  # pyplot with the Agg backend, set in that one place

    fig, axis = plt.subplots(figsize=(5, 4))
    for score_norm, uap, precision, recall in variants:
        step = max(1, precision.size // _PR_POINTS)
        label = f"{'no norm' if score_norm == NO_NORM else score_norm} (uAP {uap:.3f})"
        axis.plot(recall[::step], precision[::step], label=label)
    axis.axhline(0.9, color="grey", linestyle=":", linewidth=1)
    axis.set(xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02), title=f"DISC {codec}")
    axis.legend(loc="lower left")
    fig.tight_layout()
    return fig
