"""Generated VSD data (DeepFashion-style shop and consumer photos) in the layout ``vsd`` reads.

The real benchmark needs DeepFashion (a licence form and ~10 GB) plus the human tags; the demo and
the tests need the same files in seconds:

* products (``id_00000001``...) come in *similarity groups* of three that share a category (dress,
  top, trousers, skirt: the silhouette) and a colour, and differ in their pattern; the tags call
  two products of one group similar (1) and products of different groups not (0);
* every product has 1-3 shop photos (``phase`` ``train`` or ``test`` by product, plain studio
  background, the garment's pose jittered per view) and every second product one consumer photo
  (``phase`` ``search``: cluttered background, smaller garment, off centre); every image has its
  garment's ``bbox`` as ``[x, y, h, w]``, its ``category`` and its ``color``;
* ``gt_tagging/closed_catalog.json``: seeds are each product's first shop photo, candidates the
  first shop photos of its two group mates (1) and of three products of other groups (0);
  ``gt_tagging/in_the_wild.json``: the same with the consumer photos as seeds.

:func:`garment_image` is also what the product-search generator draws with. Every random choice
comes from a stream seeded with ``(seed, stream, index)``: byte-identical output for a seed.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from vsbench.benchmarks.vsd.adapter import DEFAULT_TAGS
from vsbench.io.storage import atomic_write_bytes, atomic_write_json

_PRODUCT_STREAM = 1
_VIEW_STREAM = 2
_CONSUMER_STREAM = 3
_TAG_STREAM = 4

CATEGORIES = ("dress", "top", "trousers", "skirt")
COLORS = {"red": (200, 40, 40), "blue": (40, 70, 190), "green": (40, 150, 70), "yellow": (230, 200, 50),
          "black": (30, 30, 30), "white": (235, 235, 235)}
PATTERNS = ("plain", "stripes", "dots", "checks")
GROUP_SIZE = 3
SIZE = 96
JPEG_QUALITY = 90


def _rng(seed: int, stream: int, *index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *index])


def _silhouette(category: str, box: tuple[int, int, int, int]) -> list[list[tuple[float, float]]]:
    """Polygons of a garment shape inside ``box`` (left, top, right, bottom)."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1

    def at(u: float, v: float) -> tuple[float, float]:
        return x1 + u * w, y1 + v * h

    if category == "dress":
        return [[at(0.35, 0), at(0.65, 0), at(0.7, 0.3), at(1, 1), at(0, 1), at(0.3, 0.3)]]
    if category == "top":
        return [[at(0.3, 0), at(0.7, 0), at(1, 0.15), at(1, 0.45), at(0.8, 0.45), at(0.8, 1), at(0.2, 1),
                 at(0.2, 0.45), at(0, 0.45), at(0, 0.15)]]
    if category == "trousers":
        return [[at(0.1, 0), at(0.9, 0), at(1, 1), at(0.6, 1), at(0.5, 0.3), at(0.4, 1), at(0, 1)]]
    if category == "skirt":
        return [[at(0.25, 0), at(0.75, 0), at(1, 1), at(0, 1)]]
    raise ValueError(f"unknown category {category!r}; choose from {CATEGORIES}")


def _pattern_fill(size: tuple[int, int], color: tuple[int, int, int], pattern: str,
                  rng: np.random.Generator) -> Image.Image:
    """The garment's cloth: its colour with a pattern in a darker or lighter shade."""
    width, height = size
    base = np.asarray(color, dtype=np.float64)
    accent = np.where(base > 128, base * 0.55, base + (255 - base) * 0.55)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    period = rng.uniform(6.0, 12.0)
    angle = rng.uniform(0, math.pi)
    u = x * math.cos(angle) + y * math.sin(angle)
    v = -x * math.sin(angle) + y * math.cos(angle)
    if pattern == "plain":
        mask = np.zeros_like(x, dtype=bool)
    elif pattern == "stripes":
        mask = (u % period) < period / 2.5
    elif pattern == "dots":
        mask = ((u % period) - period / 2) ** 2 + ((v % period) - period / 2) ** 2 < (period / 4) ** 2
    elif pattern == "checks":
        mask = ((u // (period / 2)) + (v // (period / 2))) % 2 == 0
    else:
        raise ValueError(f"unknown pattern {pattern!r}; choose from {PATTERNS}")
    pixels = np.where(mask[..., None], accent, base)
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def garment_image(category: str, color: tuple[int, int, int], pattern: str, box: tuple[int, int, int, int],
                  background: Image.Image, pattern_rng: np.random.Generator) -> Image.Image:
    """``background`` with the garment drawn in ``box``; ``pattern_rng`` fixes the cloth (same seed, same cloth)."""
    mask = Image.new("L", background.size, 0)
    draw = ImageDraw.Draw(mask)
    for polygon in _silhouette(category, box):
        draw.polygon(polygon, fill=255)
    image = background.copy()
    image.paste(_pattern_fill(background.size, color, pattern, pattern_rng), (0, 0), mask)
    return image


def studio_background(rng: np.random.Generator, size: int = SIZE) -> Image.Image:
    tone = int(rng.integers(200, 245))
    return Image.new("RGB", (size, size), (tone, tone, tone))


def cluttered_background(rng: np.random.Generator, size: int = SIZE) -> Image.Image:
    """A consumer photo's scene: a random wall colour with furniture-like blocks and sensor noise."""
    image = Image.new("RGB", (size, size), tuple(int(c) for c in rng.integers(60, 200, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 7))):
        x, y = rng.integers(0, size, 2)
        w, h = rng.integers(size // 8, size // 2, 2)
        draw.rectangle([int(x), int(y), int(x + w), int(y + h)], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    noise = rng.normal(0, 8, (size, size, 3))
    return Image.fromarray((np.asarray(image, dtype=np.float64) + noise).clip(0, 255).astype(np.uint8))


def jpeg_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def _garment_box(rng: np.random.Generator, scale: tuple[float, float], size: int = SIZE) -> tuple[int, int, int, int]:
    side = int(size * rng.uniform(*scale))
    x = int(rng.integers(0, size - side + 1))
    y = int(rng.integers(0, size - side + 1))
    return x, y, x + side, y + int(side * rng.uniform(0.9, 1.0))


def generate_vsd(out: Path, *, products: int = 24, seed: int = 0) -> dict[str, Any]:
    """``products`` products (a multiple of 3, at least 6) under ``out``; see the module docstring.

    Returns counts and paths.
    """
    if products < 2 * GROUP_SIZE or products % GROUP_SIZE:
        raise ValueError(f"products must be a multiple of {GROUP_SIZE}, at least {2 * GROUP_SIZE}")
    out = Path(out)
    groups = products // GROUP_SIZE
    entries: list[dict[str, Any]] = []
    first_shop: list[str] = []
    consumer: dict[int, str] = {}
    for p in range(products):
        group = p // GROUP_SIZE
        category = CATEGORIES[group % len(CATEGORIES)]
        color_name = list(COLORS)[(group // len(CATEGORIES) + group) % len(COLORS)]
        pattern = PATTERNS[p % GROUP_SIZE]
        product_id = f"id_{p + 1:08d}"
        rng = _rng(seed, _PRODUCT_STREAM, p)
        phase = "train" if rng.random() < 0.7 else "test"
        cloth_seed = int(rng.integers(2**31))
        folder = f"img/{category}/{product_id}"
        shots = [(f"{folder}/{v + 1:02d}_shop.jpg", phase, _rng(seed, _VIEW_STREAM, p, v), (0.6, 0.85), False)
                 for v in range(int(rng.integers(1, 4)))]
        if p % 2 == 0:
            shots.append((f"{folder}/01_consumer.jpg", "search", _rng(seed, _CONSUMER_STREAM, p), (0.4, 0.6), True))
        for path, shot_phase, view_rng, scale, cluttered in shots:
            box = _garment_box(view_rng, scale)
            background = cluttered_background(view_rng) if cluttered else studio_background(view_rng)
            image = garment_image(category, COLORS[color_name], pattern, box, background,
                                  np.random.default_rng(cloth_seed))
            atomic_write_bytes(out / path, jpeg_bytes(image))
            entries.append({"id": product_id, "path": path, "phase": shot_phase,
                            "bbox": [box[0], box[1], box[3] - box[1], box[2] - box[0]],
                            "category": category, "color": color_name})
        first_shop.append(shots[0][0])
        if p % 2 == 0:
            consumer[p] = shots[-1][0]
    atomic_write_json(out / "metadata.json", {"images": entries})

    def tags(seeds: dict[int, str]) -> list[dict[str, Any]]:
        rows = []
        for p, seed_path in seeds.items():
            group = p // GROUP_SIZE
            mates = [q for q in range(group * GROUP_SIZE, (group + 1) * GROUP_SIZE) if q != p]
            strangers = [q for q in range(products) if q // GROUP_SIZE != group]
            picked = _rng(seed, _TAG_STREAM, p).choice(len(strangers), size=min(3, len(strangers)), replace=False)
            rows += [{"key": [seed_path, first_shop[q]], "value": 1} for q in mates]
            rows += [{"key": [seed_path, first_shop[strangers[i]]], "value": 0} for i in sorted(picked.tolist())]
        return rows

    closed = tags(dict(enumerate(first_shop)))
    wild = tags(consumer)
    atomic_write_json(out / DEFAULT_TAGS["closed"], closed)
    atomic_write_json(out / DEFAULT_TAGS["wild"], wild)
    return {"root": str(out), "products": products, "groups": groups, "images": len(entries),
            "consumer_photos": len(consumer), "tags": {"closed": len(closed), "wild": len(wild)}}
