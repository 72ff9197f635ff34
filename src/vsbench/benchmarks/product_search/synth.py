"""Generated language-assisted product search data in the 2022 challenge's layout (``product_search``).

The real data are Amazon product images behind URLs and annotations under a non-commercial
licence; the demo and the tests need the same files, built in a second:

* a gallery of products, each a garment with three attributes (colour, pattern, shape): every
  combination once, plus a few second images of a combination; ``gallery.csv`` (``ASIN,Image ID``)
  and ``images/<Image ID>.jpg`` as the download tool names them;
* ``queries.jsonl``: a source product and three feedbacks that describe the wanted product
  ("with a red color", "with a dots pattern", "as a dress"), which differs from the source in one
  to three attributes; about ten annotated candidates, ``label`` 1 for the products with all the
  wanted attributes, 0 for near misses (two of three) and other products;
* two feature submissions, ``features_valid.npz`` (random unit rows: a well-formed submission that
  scores at chance) and ``features_good.npz`` (attribute one-hots: every fulfilling candidate has
  cosine 1 and every other at most 2/3, so the mAP is exactly 1.0).

Every random choice comes from a stream seeded with ``(seed, stream, index)``: byte-identical
output for a seed.
"""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.benchmarks.product_search.readers import FEATURE_DIM
from vsbench.benchmarks.vsd.synth import COLORS, garment_image, jpeg_bytes, studio_background
from vsbench.io.storage import atomic_write_bytes, atomic_write_text

_GALLERY_STREAM = 1
_QUERY_STREAM = 2
_FEATURE_STREAM = 3

SHAPES = {"shirt": "top", "dress": "dress", "pants": "trousers"}  # attribute -> garment drawn
PATTERNS = ("plain", "stripes", "dots")
ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-"
ASIN_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
CANDIDATES = 10
NEAR_MISSES = 4
SIZE = 64
VALID_SUBMISSION = "features_valid.npz"  # file names under the root: the adapter's submission option
GOOD_SUBMISSION = "features_good.npz"

Attributes = tuple[str, str, str]  # colour, pattern, shape


def _rng(seed: int, stream: int, *index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *index])


def _code(rng: np.random.Generator, alphabet: str, length: int) -> str:
    return "".join(alphabet[i] for i in rng.integers(len(alphabet), size=length))


def feedbacks(wanted: Attributes) -> tuple[str, str, str]:
    """The three feedbacks that describe the wanted product, one attribute each."""
    color, pattern, shape = wanted
    texture = "with no pattern" if pattern == "plain" else f"with a {pattern} pattern"
    return f"with a {color} color", texture, f"as a {shape}"


def one_hot(attributes: Attributes) -> np.ndarray:
    """128-d unit vector with one 1/sqrt(3) per attribute value: cosine = shared attributes / 3."""
    vector = np.zeros(FEATURE_DIM, dtype=np.float64)
    offsets = (0, len(COLORS), len(COLORS) + len(PATTERNS))
    for offset, values, value in zip(offsets, (tuple(COLORS), PATTERNS, tuple(SHAPES)), attributes):
        vector[offset + values.index(value)] = 1.0 / np.sqrt(3.0)
    return vector


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def generate_product_search(out: Path, *, queries: int = 12, extra_images: int = 10, seed: int = 0) -> dict[str, Any]:
    """A small product-search set under ``out`` (see the module docstring).

    Returns counts and the submissions' names relative to ``out`` (what ``submission=`` takes).
    """
    if queries < 1 or extra_images < 0:
        raise ValueError("queries must be >= 1 and extra_images >= 0")
    out = Path(out)
    combos: list[Attributes] = list(itertools.product(COLORS, PATTERNS, SHAPES))
    picker = _rng(seed, _GALLERY_STREAM, 0)
    gallery: list[Attributes] = combos + [combos[int(i)] for i in picker.integers(len(combos), size=extra_images)]
    image_ids: list[str] = []
    asins: dict[Attributes, str] = {}
    for n, attributes in enumerate(gallery):
        rng = _rng(seed, _GALLERY_STREAM, n + 1)
        image_id = _code(rng, ID_ALPHABET, 11)
        while image_id in image_ids:
            image_id = _code(rng, ID_ALPHABET, 11)
        image_ids.append(image_id)
        asins.setdefault(attributes, "B0" + _code(rng, ASIN_ALPHABET, 8))  # one product, maybe several images
        color, pattern, shape = attributes
        margin = int(rng.integers(4, 12))
        image = garment_image(SHAPES[shape], COLORS[color], pattern, (margin, margin, SIZE - margin, SIZE - margin),
                              studio_background(rng, SIZE), rng)
        atomic_write_bytes(out / "images" / f"{image_id}.jpg", jpeg_bytes(image))
    atomic_write_text(out / "gallery.csv", "ASIN,Image ID\n" + "".join(
        f"{asins[attributes]},{image_id}\n" for attributes, image_id in zip(gallery, image_ids)))

    lines: list[str] = []
    wanted_list: list[Attributes] = []
    for q in range(queries):
        rng = _rng(seed, _QUERY_STREAM, q)
        wanted = gallery[int(rng.integers(len(gallery)))]
        changed = rng.choice(3, size=int(rng.integers(1, 4)), replace=False)
        source_attributes = list(wanted)
        for axis in changed.tolist():
            options = [v for v in (tuple(COLORS), PATTERNS, tuple(SHAPES))[axis] if v != wanted[axis]]
            source_attributes[axis] = options[int(rng.integers(len(options)))]
        sources = [n for n, a in enumerate(gallery) if a == tuple(source_attributes)]
        source = sources[int(rng.integers(len(sources)))]
        positives = [n for n, a in enumerate(gallery) if a == wanted]
        near = [n for n, a in enumerate(gallery) if n != source and sum(x == y for x, y in zip(a, wanted)) == 2]
        near = [near[int(i)] for i in rng.choice(len(near), size=min(NEAR_MISSES, len(near)), replace=False)]
        rest = [n for n in range(len(gallery)) if n != source and n not in positives and n not in near]
        fill = CANDIDATES - len(positives) - len(near)
        others = [rest[int(i)] for i in rng.choice(len(rest), size=max(fill, 0), replace=False)]
        chosen = [(n, 1) for n in positives] + [(n, 0) for n in near + others]
        chosen = [chosen[int(i)] for i in rng.permutation(len(chosen))]
        first, second, third = feedbacks(wanted)
        lines.append(json.dumps({"index": q + 1, "source_pid": image_ids[source], "feedback1": first,
                                 "feedback2": second, "feedback3": third,
                                 "candidates": [{"candidate_pid": image_ids[n], "label": label} for n, label in chosen]}))
        wanted_list.append(wanted)
    atomic_write_text(out / "queries.jsonl", "".join(line + "\n" for line in lines))

    noise = _rng(seed, _FEATURE_STREAM, 0)
    random_query = noise.normal(size=(queries, FEATURE_DIM))
    random_gallery = noise.normal(size=(len(gallery), FEATURE_DIM))
    atomic_write_bytes(out / VALID_SUBMISSION, _npz(
        query_feature=(random_query / np.linalg.norm(random_query, axis=1, keepdims=True)).astype(np.float32),
        gallery_feature=(random_gallery / np.linalg.norm(random_gallery, axis=1, keepdims=True)).astype(np.float32)))
    atomic_write_bytes(out / GOOD_SUBMISSION, _npz(
        query_feature=np.stack([one_hot(w) for w in wanted_list]).astype(np.float32),
        gallery_feature=np.stack([one_hot(a) for a in gallery]).astype(np.float32)))
    return {"root": str(out), "queries": queries, "gallery": len(gallery), "products": len(asins),
            "submissions": {"valid": VALID_SUBMISSION, "good": GOOD_SUBMISSION}}
