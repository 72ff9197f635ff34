"""colour_match: a benchmark small enough to read in one sitting, in vsbench's adapter protocol.

Native layout under ``root``::

    colours.csv          header "image,colour", then one line per image: its id and its colour group
    images/<id>.png      the images (solid colours: a group's images are shades of one colour)

Task: every image is a query; the others are the gallery. The gallery is ranked by the L2 distance
between descriptors (ties: file order), and a hit is an image of the query's colour group.

* ``top1_accuracy``: the fraction of queries whose nearest other image is a hit (higher is better);
* ``mean_rank``: the mean 1-based rank of each query's first hit (lower is better: 1.0 is perfect,
  which is why the spec lists it in ``lower_is_better``).

The adapter needs only ``image_sets()`` and ``evaluate()``: it ranks in numpy, so vsbench builds no
FAISS index for it (a benchmark that searches with FAISS adds ``search_requests()`` and ``score()``,
see ``vsbench.benchmarks.base``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vsbench.benchmarks.base import EvalResult, EvalSettings, FeatureSet, ImageSet  # what an adapter is
from vsbench.io.inputs import InputError, read_lines
from vsbench.io.storage import atomic_write_bytes, atomic_write_text, safe_join

NAME = "colour_match"
IMAGE_SET = "images"
HEADER = "image,colour"


def read_colours(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(image ids, their colour groups) from ``colours.csv``; every group needs two images at least
    (a query alone in its colour has no hit to rank). A malformed line is an error naming it."""
    lines = read_lines(path)
    if not lines or lines[0].strip() != HEADER:
        raise InputError(path, f"the first line must be {HEADER!r}", 1)
    ids: list[str] = []
    colours: list[str] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 2 or not all(fields):
            raise InputError(path, "expected 'image,colour'", number)
        if fields[0] in ids:
            raise InputError(path, f"image {fields[0]!r} is listed twice", number)
        ids.append(fields[0])
        colours.append(fields[1])
    lonely = sorted(colour for colour in set(colours) if colours.count(colour) < 2)
    if lonely:
        raise InputError(path, f"colour(s) {lonely} have a single image: nothing to find")
    return tuple(ids), tuple(colours)


def first_hit_ranks(features: np.ndarray, colours: tuple[str, ...]) -> np.ndarray:
    """For each row, the 1-based rank of the first other row of its colour when the other rows are
    sorted by L2 distance to it (float64; equal distances keep file order)."""
    values = features.astype(np.float64)
    distances = ((values[:, None, :] - values[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(distances, np.inf)  # a query is not in its own gallery: ranked last, never a hit
    order = np.argsort(distances, axis=1, kind="stable")[:, :-1]
    groups = np.asarray(colours)
    hits = groups[order] == groups[:, None]
    return hits.argmax(axis=1) + 1  # every row has a hit: read_colours checked each colour has two images


class ColourMatchBenchmark:
    """Adapter: one image set (``images``), and a scorer over its features."""

    name = NAME

    def __init__(self, root: Path, *, truth: str = "colours.csv", images: str = "images", ext: str = ".png",
                 per_query: bool = False) -> None:
        self.root = Path(root)
        self.per_query = per_query
        self.ids, self.colours = read_colours(self.root / truth)
        folder = self.root / images
        self._images = ImageSet(self.ids, tuple(safe_join(folder, image + ext) for image in self.ids))

    def image_sets(self) -> dict[str, ImageSet]:
        """What vsbench embeds (in shards, with any model) before it calls :meth:`evaluate`."""
        return {IMAGE_SET: self._images}

    def evaluate(self, features: dict[str, FeatureSet], settings: EvalSettings) -> EvalResult:
        """Top-1 accuracy and mean rank of the first hit; ``settings`` (FAISS codecs, k) do not apply."""
        chosen = features[IMAGE_SET].select(self.ids, IMAGE_SET)
        chosen.check_finite(IMAGE_SET)
        ranks = first_hit_ranks(chosen.features, self.colours)
        record = {"distance": "l2",  # a string field names the record's variant (an MLflow param); numbers are metrics
                  "top1_accuracy": float(np.mean(ranks == 1)), "mean_rank": float(np.mean(ranks))}
        if not self.per_query:  # the CSV is the records: one row per variant
            return EvalResult(records=[record], csv_name="colour_match_metrics.csv",
                              csv_columns=("distance", "top1_accuracy", "mean_rank"))
        rows = [{"image": image, "colour": colour, "first_hit_rank": int(rank)}
                for image, colour, rank in zip(self.ids, self.colours, ranks, strict=True)]
        return EvalResult(records=[record], csv_name="colour_match_ranks.csv",  # a row per query: long
                          csv_columns=("image", "colour", "first_hit_rank"), csv_rows=rows)


def load_colour_match(root: Path, **options: Any) -> ColourMatchBenchmark:
    """The loader the spec names. Options (``--benchmark-options``): ``truth`` ("colours.csv"),
    ``images`` (folder, "images"), ``ext`` (".png"), ``per_query`` (false: the CSV holds the
    metrics; true: each query's first-hit rank, a row per image)."""
    return ColourMatchBenchmark(Path(root), **options)


def _png(rgb: tuple[int, int, int], size: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def generate_colour_match(out: Path, *, seed: int = 0, colours: int = 6, per_colour: int = 3, jitter: int = 48,
                          size: int = 32) -> dict[str, Any]:
    """``colours`` random base colours, ``per_colour`` solid images of each, every image its base
    colour moved by up to ``jitter`` (of 255) per channel, so that some shades of two colours are
    closer than two shades of one. The same seed writes the same bytes."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 256, size=(colours, 3))
    lines = [HEADER]
    for colour, base in enumerate(bases):
        for shade in range(per_colour):
            image = f"c{colour:02d}_s{shade:02d}"
            rgb = np.clip(base + rng.integers(-jitter, jitter + 1, size=3), 0, 255)
            atomic_write_bytes(Path(out) / IMAGE_SET / f"{image}.png", _png(tuple(int(v) for v in rgb), size))
            lines.append(f"{image},c{colour:02d}")
    atomic_write_text(Path(out) / "colours.csv", "\n".join(lines) + "\n")
    return {"benchmark": NAME, "root": str(out), "images": colours * per_colour, "colours": colours, "seed": seed}
