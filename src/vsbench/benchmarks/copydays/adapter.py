"""Copydays (``copydays``, CD10K with distractors): the layout and protocol of SSCD's ``copydays_eval.py``.

On disk (SSCD ``datasets/copydays.py``)::

    <root>/original/200000.jpg ...      157 originals
    <root>/strong/200001.jpg ...        229 strong attacks (print-and-scan, paint, crops...)
    <root>/jpegqual/<q>/200000.jpg ...  each original re-encoded at JPEG quality q in 3 5 8 10 15 20 30 50 75
    <root>/crops/<c>/200000.jpg ...     each original with c % of its surface cropped away, c in 10 15 ... 80

Only ``.jpg`` files count, sorted by name, as in SSCD. ``original`` and ``strong`` are required;
the other standard blocks are used when present (so a partial copy is usable), and any other
folder is ignored.

Protocol: the index holds the originals plus the distractors (an optional separate folder of
images, e.g. 10k YFCC100M images), every Copydays image (originals included) is a query, and each
query keeps its k = 100 nearest entries (L2 search after the codec, FAISS's default, as SSCD).
Ground truth from the file names: a query's positive is the original with its file name (SSCD maps
these blocks by position, which is the same thing on the real data, where every block repeats the
originals' names; a block whose names differ is mapped by position, as SSCD, when it has one file
per original); a ``strong`` query's positives are the originals whose name shares its first 4
characters (``2000`` for ``200001.jpg``). ``strong_map`` and ``overall_uap`` are the trapezoidal
scores of :mod:`vsbench.benchmarks.copydays.metrics`; records also carry each other block's mAP
(``map_original``, ``map_jpegqual_30``, ``map_crops_50``...). :func:`copydays_csv_rows` gives the rows
of SSCD's ``copydays_metrics.csv`` (``codec,strong_mAP,overall_uAP``).

``k`` is a loader option (default 100) rather than ``EvalSettings.k``, whose default is DISC's 10:
the two benchmarks fix different k, and a pipeline sets one EvalSettings for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vsbench.benchmarks.base import EvalResult, EvalSettings, SearchedBenchmark, Sheet, Units
from vsbench.benchmarks.copydays.failures import copydays_sheet
from vsbench.benchmarks.copydays.metrics import copydays_hits, copydays_metrics, trapezoid_ap_from_ranks
from vsbench.benchmarks.copydays.units import copydays_units
from vsbench.benchmarks.disc.adapter import aligned_features, list_images
from vsbench.benchmarks.ranked_failures import Pictures
from vsbench.benchmarks.ties import tie_fields
from vsbench.index.settings import NO_NORM_LABEL, parse_codecs
from vsbench.io.features import FeatureSet, ImageSet
from vsbench.io.storage import safe_join

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from vsbench.index.plan import SearchRequest, SearchResults

ORIGINAL = "original"
STRONG = "strong"
JPEG_QUALITIES = (3, 5, 8, 10, 15, 20, 30, 50, 75)
CROP_PERCENTS = (10, 15, 20, 30, 40, 50, 60, 70, 80)
BLOCKS = (ORIGINAL, STRONG, *(f"jpegqual/{q}" for q in JPEG_QUALITIES), *(f"crops/{c}" for c in CROP_PERCENTS))
STRONG_PREFIX = 4  # a strong attack shares this many leading file-name characters with its original
DEFAULT_K = 100

CSV_NAME = "copydays_metrics.csv"
CSV_FIELDS = {"codec": "codec", "strong_map": "strong_mAP", "overall_uap": "overall_uAP"}


@dataclass(frozen=True)
class CopydaysBenchmark(SearchedBenchmark):
    """Copydays queries (block by block, originals first), their positives, distractors and codec training set."""

    root: Path
    queries: ImageSet  # ids "<block>/<stem>", blocks in BLOCKS order
    blocks: tuple[str, ...]  # the block of every query
    positives: tuple[frozenset[int], ...]  # per query: index rows (= rows of the originals) that are copies
    num_originals: int
    distractors: ImageSet | None
    train: ImageSet | None
    k: int = DEFAULT_K
    name: str = "copydays"

    def image_sets(self) -> dict[str, ImageSet]:
        """``query`` (every Copydays image; the originals among them also fill the index),
        ``distractors`` and ``train`` when given."""
        sets = {"query": self.queries}
        if self.distractors is not None:
            sets["distractors"] = self.distractors
        if self.train is not None:
            sets["train"] = self.train
        return sets


    def search_requests(self, features: dict[str, FeatureSet], settings: EvalSettings) -> list[SearchRequest]:
        """One search, ``copydays``: every Copydays image against the originals and the distractors, by
        L2 after each codec (FAISS's default, as SSCD), ``k`` nearest, no score normalization."""
        from vsbench.index.plan import SearchRequest  # faiss: imported only when scoring

        queries = aligned_features(features, "query", self.queries).features
        index = queries[: self.num_originals]
        index_ids = self.queries.ids[: self.num_originals]
        if self.distractors is not None:
            index = np.concatenate([index, aligned_features(features, "distractors", self.distractors).features])
            index_ids += self.distractors.ids
        train = None if self.train is None else aligned_features(features, "train", self.train).features
        return [SearchRequest("copydays", queries, index, train, settings.codecs, "l2", self.k,
                              search_params=settings.search_params, reference_ids=index_ids)]

    def score(self, features: dict[str, FeatureSet], settings: EvalSettings,
              results: Mapping[str, SearchResults]) -> EvalResult:
        """The metrics of the search's result lists, however they were searched."""
        from vsbench.index.plan import results_for

        found = results_for(results, "copydays")
        blocks = np.asarray(self.blocks)
        num_positives = np.asarray([len(p) for p in self.positives])
        index_ids = np.asarray([*self.queries.ids[: self.num_originals],
                                *(self.distractors.ids if self.distractors is not None else ())], dtype=str)
        block_metrics = {f"map_{block.replace('/', '_')}": block for block in dict.fromkeys(self.blocks)
                         if block != STRONG}
        records = []
        units: list[Units | None] = []
        sources = [[str(index_ids[r]) for r in sorted(p)] for p in self.positives]  # each query's original(s)
        for codec in parse_codecs(settings.codecs):
            # FAISS's own result lists, as SSCD scores them: ties keep FAISS's order (merged reference
            # shards: the lower id first), and the pooled sort sees the float32 distances SSCD sorts.
            similarity, ids = found[(codec, NO_NORM_LABEL)]
            distances = np.where(ids >= 0, -similarity, np.float32(np.inf))
            hits = copydays_hits(ids, self.positives)
            metrics = copydays_metrics(hits, distances, num_positives, blocks == STRONG)
            record: dict[str, Any] = {"codec": codec, "strong_map": metrics.strong_map,
                                      "overall_uap": metrics.overall_uap, **tie_fields(metrics.ties)}
            aps = np.asarray([trapezoid_ap_from_ranks(np.flatnonzero(row), n) for row, n in zip(hits, num_positives)])
            for block in dict.fromkeys(self.blocks):
                if block != STRONG:  # its mAP is strong_map
                    record[f"map_{block.replace('/', '_')}"] = float(aps[blocks == block].mean())
            records.append(record)
            result_ids = np.where(ids >= 0, index_ids[np.clip(ids, 0, max(index_ids.size - 1, 0))], "")
            units.append(copydays_units(self.queries.ids, hits, distances, num_positives, self.blocks,
                                        strong_block=STRONG, block_metrics=block_metrics, result_ids=result_ids,
                                        benchmark=self.name, variant=codec,
                                        originals=sources))
        sets = {"query": (self.queries, self.root)}
        if self.distractors is not None and self.distractors.paths:  # the operator's folder (an option)
            sets["distractors"] = (self.distractors, Path(self.distractors.paths[0]).parent)
        pictures = Pictures(sets)
        query_row = {query: n for n, query in enumerate(self.queries.ids)}

        def originals(queries: Sequence[str]) -> dict[str, list[str]]:
            return {q: [str(index_ids[r]) for r in sorted(self.positives[query_row[q]])] for q in queries
                    if q in query_row}

        def failure_sheet(index: int, rows: int) -> Sheet | None:
            unit = units[index]
            return None if unit is None else copydays_sheet(unit, sets, rows=rows, truths=originals, pictures=pictures)

        return EvalResult(records=records, csv_name=CSV_NAME, csv_columns=tuple(CSV_FIELDS.values()),
                          csv_rows=copydays_csv_rows(records),
                          figures={"copydays_blocks.png": _blocks_figure(records)}, units=units,
                          failure_sheet=failure_sheet)


def load_copydays(
    root: Path,
    *,
    distractors: Path | str | None = None,
    codec_train: Path | str | None = None,
    k: int = DEFAULT_K,
) -> CopydaysBenchmark:
    """Read the Copydays blocks under ``root``, plus optional distractor and codec-training folders.

    ``distractors`` and ``codec_train`` are folders of images of their own (SSCD's
    ``--distractor_path`` and ``--codec_train_path``), not under ``root``; their files are listed
    as SSCD's ``ImageFolder`` does (any image extension, id = file stem). Ground truth comes from
    the file names; a query whose name matches no original is an error naming it.
    """
    root = Path(root)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    present = [b for b in BLOCKS if b in (ORIGINAL, STRONG) or safe_join(root, b).is_dir()]
    per_block = {b: list_images(safe_join(root, b), f"Copydays block {b!r}", extensions=(".jpg",)) for b in present}
    for required in (ORIGINAL, STRONG):
        if not per_block[required].ids:
            raise ValueError(f"no .jpg images in {safe_join(root, required)}")
    originals = per_block[ORIGINAL]
    ids: list[str] = []
    paths: list[Path] = []
    blocks: list[str] = []
    positives: list[frozenset[int]] = []
    for block, images in per_block.items():
        positives += (
            [strong_positives(path.name, [p.name for p in originals.paths], path) for path in images.paths]
            if block == STRONG else _one_to_one(block, images, originals.ids)
        )
        ids += [f"{block}/{stem}" for stem in images.ids]
        paths += images.paths
        blocks += [block] * len(images.ids)
    return CopydaysBenchmark(
        root=root, queries=ImageSet(tuple(ids), tuple(paths)), blocks=tuple(blocks), positives=tuple(positives),
        num_originals=len(originals.ids),
        distractors=None if distractors is None else list_images(Path(distractors), "distractors"),
        train=None if codec_train is None else list_images(Path(codec_train), "codec training images"),
        k=k,
    )


def strong_positives(name: str, original_names: Sequence[str], path: Path) -> frozenset[int]:
    """Rows of the originals sharing the first 4 file-name characters with a strong attack (SSCD's rule,
    ``bname[:4] == qname[:4]`` on file names, extension included: ``12.jpg`` has the prefix ``12.j``).

    A strong image no original matches is an error (SSCD divides by its zero positives).
    """
    rows = frozenset(n for n, o in enumerate(original_names) if o[:STRONG_PREFIX] == name[:STRONG_PREFIX])
    if not rows:
        raise ValueError(f"{path}: no original shares its first {STRONG_PREFIX} characters {name[:STRONG_PREFIX]!r}")
    return rows


def copydays_csv_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records -> rows of SSCD's ``copydays_metrics.csv`` (its column names)."""
    return [{column: record[key] for key, column in CSV_FIELDS.items()} for record in records]


def _one_to_one(block: str, images: ImageSet, original_stems: Sequence[str]) -> list[frozenset[int]]:
    """The original of each image of a non-strong block: the one with its file name, else by position.

    SSCD pairs the i-th file of a block with the i-th original, which on the real data is the
    original of the same name. Matching names first also serves partial blocks; a block whose
    names do not all match is paired by position only when it has exactly one file per original.
    """
    row_of = {stem: n for n, stem in enumerate(original_stems)}
    if all(stem in row_of for stem in images.ids):
        return [frozenset({row_of[stem]}) for stem in images.ids]
    if len(images.ids) == len(original_stems):
        return [frozenset({n}) for n in range(len(original_stems))]
    stem, path = next((s, p) for s, p in zip(images.ids, images.paths) if s not in row_of)
    raise ValueError(f"{path}: no original named {stem}.jpg, and block {block!r} has {len(images.ids)} images for "
                     f"{len(original_stems)} originals, so it cannot be paired by position either")


def _blocks_figure(records: Sequence[Mapping[str, Any]]) -> Figure:
    """mAP against JPEG quality and against crop size, one line per codec (the robustness curves)."""
    from vsbench.reporting.plots import plt  # pyplot with the Agg backend, set in that one place

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for axis, family, levels, xlabel in ((left, "jpegqual", JPEG_QUALITIES, "JPEG quality"),
                                         (right, "crops", CROP_PERCENTS, "surface cropped away (%)")):
        for record in records:
            present = [(level, record[f"map_{family}_{level}"]) for level in levels
                       if f"map_{family}_{level}" in record]
            if present:
                axis.plot(*zip(*present), marker="o", label=record["codec"])
        axis.set(xlabel=xlabel, ylabel="mAP", ylim=(0, 1.02), title=f"Copydays {family}")
        if axis.has_data():
            axis.legend(loc="lower right")
    fig.tight_layout()
    return fig
