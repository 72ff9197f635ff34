"""Language-assisted product search (seed 002; REFERENCE.md section 5), 2022 Amazon Alexa challenge.

Native layout under ``root`` (names configurable, see :func:`load_product_search`)::

    queries.jsonl     {"index", "source_pid", "feedback1..3", "candidates": [{"candidate_pid", "label"}]}
    gallery.csv       ASIN,Image ID
    images/<Image ID>.jpg   query source images and gallery images (the download tool's naming)

Each query's annotated candidates are ranked by cosine to the query feature; AP per query against
the fulfil labels, mAP over queries (:mod:`vsbench.benchmarks.product_search.metrics`). Two modes:

* **submission** (``submission`` option): score a participant's features file, ``query_feature``
  (N x 128) and ``gallery_feature`` (M x 128) in file order, validated by
  :func:`vsbench.benchmarks.product_search.readers.read_product_features` (128 columns, finite, L2-normalized rows,
  N and M matching the files; every error names the file). No image is embedded.
* **image only** (no submission): a vsbench image model embeds the query source images and the
  gallery images; a query's feature is its source image's feature. The real task conditions the
  query on the three text feedbacks, which an image model cannot read, so this is an image-only
  *baseline*: it measures how far visual similarity to the source product goes. Features keep
  the model's own dimension (the 128-d rule is the submission format's, not the task's), and
  only gallery images that some query lists as a candidate are embedded, since no other gallery
  image can change the score.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.benchmarks.base import EvalResult, EvalSettings, Sheet, Units, option_path
from vsbench.benchmarks.product_search.failures import product_search_sheet
from vsbench.benchmarks.product_search.metrics import ProductSearchMetrics, product_search_metrics
from vsbench.benchmarks.product_search.readers import (
    candidate_gallery_rows,
    read_gallery_image_ids,
    read_product_features,
    read_product_queries,
)
from vsbench.benchmarks.product_search.units import product_search_units, query_ids
from vsbench.io.features import FeatureSet, ImageSet
from vsbench.io.inputs import InputError
from vsbench.io.storage import safe_join

NAME = "product_search"
QUERY_SET = "query"
GALLERY_SET = "gallery"


def ap_histogram(metrics: ProductSearchMetrics) -> Any:
    """Distribution of the per-query APs behind the mAP (queries without a positive left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aps = metrics.per_query_ap[~np.isnan(metrics.per_query_ap)]
    fig, axis = plt.subplots(figsize=(5, 4))
    axis.hist(aps, bins=np.linspace(0.0, 1.0, 21), color="tab:blue", edgecolor="white")
    axis.axvline(metrics.mean_average_precision, color="tab:red", linestyle="--",
                 label=f"mAP {metrics.mean_average_precision:.3f}")
    axis.set(xlabel="average precision", ylabel="queries", xlim=(0, 1), title="Product search: AP per query")
    axis.legend()
    fig.tight_layout()
    return fig


class ProductSearchBenchmark:
    """Adapter: queries and gallery files; scores a features submission or image-model features."""

    name = NAME

    def __init__(self, root: Path, *, queries: str | Path = "queries.jsonl", gallery: str | Path = "gallery.csv",
                 images: str | Path = "images", image_ext: str = ".jpg",
                 submission: str | Path | None = None) -> None:
        self.root = Path(root)
        self.queries_path = option_path(self.root, queries)
        self.gallery_path = option_path(self.root, gallery)
        self.submission = None if submission is None else option_path(self.root, submission)
        self.queries = read_product_queries(self.queries_path)
        self.gallery_ids = read_gallery_image_ids(self.gallery_path)
        self.candidate_rows = candidate_gallery_rows(self.queries, self.gallery_ids, self.queries_path,
                                                     self.gallery_path)
        self.labels = [query.labels for query in self.queries]
        self._sets: dict[str, ImageSet] = {}
        self.images_dir = option_path(self.root, images)
        if self.submission is None:
            images_dir = self.images_dir
            for query in self.queries:
                if not query.source_pid:
                    raise InputError(self.queries_path, "missing 'source_pid' (the image-only mode embeds it)",
                                     query.line)
            sources = list(dict.fromkeys(query.source_pid for query in self.queries))
            used = np.zeros(self.gallery_ids.size, dtype=bool)
            for rows in self.candidate_rows:
                used[rows] = True
            gallery = self.gallery_ids[used].tolist()
            self._sets = {
                QUERY_SET: ImageSet(tuple(sources), tuple(safe_join(images_dir, s + image_ext) for s in sources)),
                GALLERY_SET: ImageSet(tuple(gallery), tuple(safe_join(images_dir, g + image_ext) for g in gallery)),
            }

    @property
    def mode(self) -> str:
        return "image_only" if self.submission is None else "submission"

    def image_sets(self) -> dict[str, ImageSet]:
        """Query source images and candidate gallery images; nothing in submission mode."""
        return dict(self._sets)

    def evaluate(self, features: dict[str, FeatureSet], settings: EvalSettings) -> EvalResult:
        """mAP (and counts) in one record, plus a histogram of the per-query APs.

        ``settings`` is unused: only each query's annotated candidates are ranked, no index search.
        """
        if self.submission is not None:
            query_feats, gallery_feats = read_product_features(self.submission, len(self.queries),
                                                               self.gallery_ids.size)
            rows = self.candidate_rows
        else:
            query_set, gallery_set = features[QUERY_SET], features[GALLERY_SET]
            query_set.check_finite(QUERY_SET)
            gallery_set.check_finite(GALLERY_SET)
            query_feats = query_set.select([q.source_pid for q in self.queries], QUERY_SET).features
            embedded = self._sets[GALLERY_SET].ids
            gallery_feats = gallery_set.select(embedded, GALLERY_SET).features
            position = {image_id: n for n, image_id in enumerate(embedded)}
            rows = [np.asarray([position[self.gallery_ids[r]] for r in q_rows], dtype=np.int64)
                    for q_rows in self.candidate_rows]
        metrics = product_search_metrics(query_feats, gallery_feats, rows, self.labels)
        record: dict[str, Any] = {"mode": self.mode, **metrics.as_dict()}
        units = product_search_units(query_feats, gallery_feats, rows, self.labels, ids=query_ids(self.queries),
                                     variant=self.mode)
        return EvalResult(records=[record], figures={"product_search_ap.png": ap_histogram(metrics)}, units=[units],
                          failure_sheet=None if self.submission is not None else self._failure_sheet(units))

    def _failure_sheet(self, units: Units) -> Callable[[int, int], Sheet | None]:
        """The image-only mode's sheet (a submission's features have no images to show)."""
        def failure_sheet(index: int, rows: int) -> Sheet | None:
            sets = {name: (images, self.images_dir) for name, images in self._sets.items()}
            return product_search_sheet(units, sets, rows=rows, query_images=[q.source_pid for q in self.queries],
                                        candidates=[self.gallery_ids[r].tolist() for r in self.candidate_rows])

        return failure_sheet




def load_product_search(root: Path, **options: Any) -> ProductSearchBenchmark:
    """Options: ``queries`` ("queries.jsonl"), ``gallery`` ("gallery.csv"), ``images`` ("images"),
    ``image_ext`` (".jpg"), ``submission`` (features file to score; image-only mode without it)."""
    return ProductSearchBenchmark(Path(root), **options)
