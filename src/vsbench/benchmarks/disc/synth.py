"""Generated copy-detection data in the DISC2021 on-disk layout (Copydays' generator draws on it too).

The real sets (DISC2021: 1M references, 50k queries; Copydays + 10k YFCC distractors) are large
downloads behind licence clicks; the demo, the tests and offline runs need sets that the ``disc``
and ``copydays`` adapters read exactly like the real ones, built in seconds:

* :func:`generate_disc`: procedural images (gradients, shapes, noise), each reference distinct;
  queries are edited copies of references (crop, rescale, rotation by 90 degrees, flip, colour
  jitter, greyscale, JPEG re-encoding, blur, text and emoji-like overlays) or images with no copy
  in the references; the training images are disjoint from both.
* :func:`generate_skimage_copydetect`: the same DISC layout from the *real photographs* that ship
  with scikit-image, so a model's numbers mean something about photos without any download.

Every random choice comes from a stream seeded with ``(seed, stream, index)``: the output is
byte-identical for a seed (same Pillow and numpy), and changing how one part is drawn never
reshuffles another. Each DISC-layout generator also writes ``query_transforms.csv`` (query id,
source image, edits applied) next to the layout, for looking at failures; the adapters ignore it.
:func:`generate_skimage_copydetect` also writes ``query_groups.csv`` (query id, the photo a query
without a copy was cropped from), which the ``disc`` adapter reads so that a bootstrap draws the
crops of one photo together, as it draws the copies of one reference (issue 55).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont, ImageOps

from vsbench.benchmarks.disc.adapter import GROUND_TRUTH_CSV, QUERY_DIR, QUERY_GROUPS_CSV, REFERENCE_DIR, TRAIN_DIR
from vsbench.io.storage import atomic_write_bytes, atomic_write_text

# Independent random streams (see the module docstring).
REFERENCE_STREAM = 1
QUERY_STREAM = 2
NEGATIVE_STREAM = 3
TRAIN_STREAM = 4
ORDER_STREAM = 5
STRONG_STREAM = 6
DISTRACTOR_STREAM = 7

SAVE_QUALITY = 90  # JPEG quality of every written image (an edit may re-encode lower first)
TRANSFORMS_CSV = "query_transforms.csv"

Transform = Callable[[Image.Image, np.random.Generator], Image.Image]


def stream_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, index])


# ------------------------------------------------------------------------------ procedural images


def procedural_image(rng: np.random.Generator, size: tuple[int, int] | None = None) -> Image.Image:
    """A distinct synthetic scene: a two-colour gradient, blotchy low-frequency colour, 4-9 shapes, grain."""
    width, height = size or (int(rng.integers(160, 257)), int(rng.integers(160, 257)))
    start, end = rng.integers(0, 256, size=(2, 3)).astype(np.float64)
    angle = rng.uniform(0, 2 * math.pi)
    y, x = np.mgrid[0:height, 0:width]
    t = x * math.cos(angle) + y * math.sin(angle)
    t = (t - t.min()) / max(float(np.ptp(t)), 1.0)
    pixels = start + (end - start) * t[..., None]
    blotches = rng.normal(0, 40, size=(4, 4, 3)).clip(-127, 127) + 128
    blotches = Image.fromarray(blotches.astype(np.uint8)).resize((width, height), Image.Resampling.BICUBIC)
    pixels = 0.7 * pixels + 0.3 * np.asarray(blotches, dtype=np.float64)
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(4, 10))):
        _random_shape(draw, rng, width, height)
    grain = rng.normal(0, 6, size=(height, width, 3))
    return Image.fromarray((np.asarray(image, dtype=np.float64) + grain).clip(0, 255).astype(np.uint8))


def _random_shape(draw: ImageDraw.ImageDraw, rng: np.random.Generator, width: int, height: int) -> None:
    colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
    x0, x1 = sorted(int(v) for v in rng.integers(0, width, size=2))
    y0, y1 = sorted(int(v) for v in rng.integers(0, height, size=2))
    box = (x0, y0, max(x1, x0 + 8), max(y1, y0 + 8))
    kind = int(rng.integers(0, 4))
    if kind == 0:
        draw.ellipse(box, fill=colour)
    elif kind == 1:
        draw.rectangle(box, fill=colour)
    elif kind == 2:
        points = [(int(rng.integers(0, width)), int(rng.integers(0, height))) for _ in range(int(rng.integers(3, 7)))]
        draw.polygon(points, fill=colour)
    else:
        draw.line(box, fill=colour, width=int(rng.integers(2, 9)))


# ------------------------------------------------------------------------------------ the edits


def _crop(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """Keep 50-90 % of each side at a random place: the copy still shows most of the scene."""
    width, height = image.size
    keep_w, keep_h = (max(16, int(side * rng.uniform(0.5, 0.9))) for side in (width, height))
    left, top = int(rng.integers(0, width - keep_w + 1)), int(rng.integers(0, height - keep_h + 1))
    return image.crop((left, top, left + keep_w, top + keep_h))


def _rescale(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    factor = rng.uniform(0.4, 1.6)
    return image.resize((max(32, round(image.width * factor)), max(32, round(image.height * factor))),
                        Image.Resampling.BILINEAR)


def _rotate90(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    turns = (Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_180, Image.Transpose.ROTATE_270)
    return image.transpose(turns[int(rng.integers(0, 3))])


def _flip(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


def _colour_jitter(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    for enhancer in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
        image = enhancer(image).enhance(rng.uniform(0.6, 1.4))
    return image


def _greyscale(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    return ImageOps.grayscale(image).convert("RGB")


def _jpeg(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    return Image.open(io.BytesIO(jpeg_bytes(image, int(rng.integers(8, 41))))).convert("RGB")


def _blur(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    return image.filter(ImageFilter.GaussianBlur(radius=rng.uniform(1.0, 3.0)))


def _text(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A caption in a random colour with a dark outline, as meme-style edits add."""
    image = image.copy()
    size = max(10, image.height // int(rng.integers(6, 10)))
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
    words = [("".join(rng.choice(letters, size=int(rng.integers(3, 8))))) for _ in range(int(rng.integers(1, 3)))]
    colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
    position = (int(rng.integers(0, max(1, image.width // 2))), int(rng.integers(0, max(1, image.height - size))))
    ImageDraw.Draw(image).text(position, " ".join(words), font=ImageFont.load_default(size=size), fill=colour,
                               stroke_width=max(1, size // 12), stroke_fill=(0, 0, 0))
    return image


def _emoji(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """1-3 smiley faces (disc, eyes, mouth) pasted over the picture, as DISC's emoji overlays."""
    image = image.copy()
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(1, 4))):
        radius = max(6, int(min(image.size) * rng.uniform(0.08, 0.18)))
        cx, cy = int(rng.integers(radius, image.width - radius + 1)), int(rng.integers(radius, image.height - radius + 1))
        face = tuple(int(c) for c in rng.integers(150, 256, size=3))
        draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=face, outline=(0, 0, 0))
        eye = max(1, radius // 6)
        for ex in (cx - radius // 3, cx + radius // 3):
            draw.ellipse((ex - eye, cy - radius // 3 - eye, ex + eye, cy - radius // 3 + eye), fill=(0, 0, 0))
        draw.arc((cx - radius // 2, cy - radius // 4, cx + radius // 2, cy + radius // 2), 20, 160, fill=(0, 0, 0),
                 width=max(1, radius // 8))
    return image


EDITS: dict[str, Transform] = {
    "crop": _crop,
    "rescale": _rescale,
    "rotate90": _rotate90,
    "flip": _flip,
    "colour": _colour_jitter,
    "grey": _greyscale,
    "jpeg": _jpeg,
    "blur": _blur,
    "text": _text,
    "emoji": _emoji,
}


def edited_copy(image: Image.Image, rng: np.random.Generator,
                edits: tuple[int, int] = (1, 3)) -> tuple[Image.Image, list[str]]:
    """A copy with ``edits[0]..edits[1]`` distinct random edits, in random order; returns the edit names too."""
    names = list(rng.choice(list(EDITS), size=int(rng.integers(edits[0], edits[1] + 1)), replace=False))
    for name in names:
        image = EDITS[name](image, rng)
    return image, [str(n) for n in names]


def jpeg_bytes(image: Image.Image, quality: int) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def save_jpeg(path: Path, image: Image.Image, quality: int = SAVE_QUALITY) -> None:
    atomic_write_bytes(path, jpeg_bytes(image, quality))


# ------------------------------------------------------------------------------------ DISC layout


# A query to write: (image, index of the reference it copies or None, source description, edits applied).
Query = tuple[Image.Image, int | None, str, str]


def _write_disc(out: Path, references: Sequence[Image.Image], queries: Sequence[Query], train: Sequence[Image.Image],
                seed: int, groups: dict[int, str] | None = None) -> dict[str, Any]:
    """Write a DISC layout: shuffled ids (id order reveals nothing), ground truth, transforms log;
    ``groups`` (a query's place in ``queries`` -> the source it was drawn from): ``query_groups.csv``."""
    order = stream_rng(seed, ORDER_STREAM, 0)
    reference_ids = [f"R{n:06d}" for n in order.permutation(len(references))]
    query_slots = order.permutation(len(queries))
    for reference_id, image in zip(reference_ids, references):
        save_jpeg(out / REFERENCE_DIR / f"{reference_id}.jpg", image)
    for n, image in enumerate(train):
        save_jpeg(out / TRAIN_DIR / f"T{n:06d}.jpg", image)
    rows: list[tuple[str, str]] = []
    log: list[tuple[str, str, str]] = []
    grouped: list[tuple[str, str]] = []
    for n, (slot, (image, source, description, edits)) in enumerate(zip(query_slots, queries)):
        query_id = f"Q{slot:05d}"
        save_jpeg(out / QUERY_DIR / f"{query_id}.jpg", image)
        rows.append((query_id, "" if source is None else reference_ids[source]))
        log.append((query_id, description, edits))
        if groups and n in groups:
            grouped.append((query_id, groups[n]))
    atomic_write_text(out / GROUND_TRUTH_CSV, _csv([("query_id", "reference_id"), *sorted(rows)]))
    atomic_write_text(out / TRANSFORMS_CSV, _csv([("query_id", "source", "edits"), *sorted(log)]))
    if grouped:
        atomic_write_text(out / QUERY_GROUPS_CSV, _csv([("query_id", "group"), *sorted(grouped)]))
    return {
        "root": str(out),
        "references": len(references),
        "queries": len(queries),
        "train": len(train),
        "copies": sum(1 for _, source, _, _ in queries if source is not None),
        "ground_truth": str(out / GROUND_TRUTH_CSV),
    }


def _csv(rows: Sequence[Sequence[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def generate_disc(out: Path, *, references: int = 40, queries: int = 30, train: int = 30, copy_fraction: float = 0.6,
                  seed: int = 0) -> dict[str, Any]:
    """A small synthetic DISC2021-layout set under ``out`` (see :mod:`vsbench.benchmarks.disc.adapter`).

    ``round(queries * copy_fraction)`` queries are edited copies of distinct references (of
    references drawn again once all are used); the others are edited images that are not in the
    references (empty reference in the ground truth). Training images are drawn from their own
    stream, so none is a reference or a query. Returns counts and paths.
    """
    if min(references, queries, train) < 1 or not 0 <= copy_fraction <= 1:
        raise ValueError("references, queries and train must be >= 1 and copy_fraction in [0, 1]")
    out = Path(out)
    reference_images = [procedural_image(stream_rng(seed, REFERENCE_STREAM, n)) for n in range(references)]
    copies = round(queries * copy_fraction)
    picker = stream_rng(seed, ORDER_STREAM, 1)
    sources = [int(s) for _ in range(-(-copies // references)) for s in picker.permutation(references)][:copies]
    query_items: list[Query] = []
    for n in range(queries):
        rng = stream_rng(seed, QUERY_STREAM, n)
        if n < copies:
            source = sources[n]
            image, edits = edited_copy(reference_images[source], rng)
            query_items.append((image, source, f"reference {source}", "+".join(edits)))
        else:
            image, edits = edited_copy(procedural_image(stream_rng(seed, NEGATIVE_STREAM, n)), rng)
            query_items.append((image, None, "not in the references", "+".join(edits)))
    train_images = [procedural_image(stream_rng(seed, TRAIN_STREAM, n)) for n in range(train)]
    return _write_disc(out, reference_images, query_items, train_images, seed)


# ------------------------------------------------------------------------ scikit-image photographs

# The photographs shipped inside scikit-image (no download), split once and for all so that a set's
# meaning does not depend on the seed: only the edits do.
SKIMAGE_REFERENCES = ("astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "motorcycle", "retina")
SKIMAGE_DISTRACTORS = ("hubble_deep_field", "immunohistochemistry", "moon", "clock")  # tiled into references
SKIMAGE_NEGATIVES = ("brick", "page", "cell")  # edited crops become queries without a copy
SKIMAGE_TRAIN = ("grass", "gravel", "text", "microaneurysms")  # random crops: the training set
COPIES_PER_REFERENCE = 5
NEGATIVES_PER_PHOTO = 6
TILE_GRID = (3, 2)  # columns, rows of non-overlapping distractor tiles per photo
TRAIN_PER_PHOTO = 30
MAX_SIDE = 384  # photos are downscaled to this longer side: small files, fast embedding


def skimage_photo(name: str) -> Image.Image:
    """One scikit-image photograph as an RGB image, longer side at most ``MAX_SIDE``."""
    try:
        from skimage import data
    except ImportError as exc:
        raise ImportError("generate_skimage_copydetect needs scikit-image: pip install scikit-image") from exc
    pixels = data.stereo_motorcycle()[0] if name == "motorcycle" else getattr(data, name)()
    image = Image.fromarray(np.asarray(pixels, dtype=np.uint8)).convert("RGB")
    scale = MAX_SIDE / max(image.size)
    if scale < 1:
        image = image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.LANCZOS)
    return image


def generate_skimage_copydetect(out: Path, seed: int = 0) -> dict[str, Any]:
    """A real-photo copy-detection set in the DISC layout from scikit-image's photographs (~210 images).

    References: the 8 photos of ``SKIMAGE_REFERENCES`` whole, plus non-overlapping tiles of the 4
    ``SKIMAGE_DISTRACTORS`` photos (hard distractors: real texture and colour statistics). Queries:
    5 edited copies of every reference photo, plus edited crops of the ``SKIMAGE_NEGATIVES`` photos,
    which appear nowhere in the references (no copy). Training: random crops and flips of the
    ``SKIMAGE_TRAIN`` photos, disjoint from all the others (for PCA codecs and score normalization).
    """
    import skimage

    out = Path(out)
    photos = {name: skimage_photo(name)
              for name in (*SKIMAGE_REFERENCES, *SKIMAGE_DISTRACTORS, *SKIMAGE_NEGATIVES, *SKIMAGE_TRAIN)}
    references = [photos[name] for name in SKIMAGE_REFERENCES]
    references += [tile for name in SKIMAGE_DISTRACTORS for tile in _tiles(photos[name], *TILE_GRID)]
    queries: list[Query] = []
    for n, (number, name) in enumerate((i, p) for i, p in enumerate(SKIMAGE_REFERENCES)
                                       for _ in range(COPIES_PER_REFERENCE)):
        image, edits = edited_copy(photos[name], stream_rng(seed, QUERY_STREAM, n))
        queries.append((image, number, name, "+".join(edits)))
    groups: dict[int, str] = {}  # the crops of one photo were drawn together: one group (issue 55)
    for n, name in enumerate(p for p in SKIMAGE_NEGATIVES for _ in range(NEGATIVES_PER_PHOTO)):
        rng = stream_rng(seed, NEGATIVE_STREAM, n)
        image, edits = edited_copy(_crop(photos[name], rng), rng)
        groups[len(queries)] = f"photo:{name}"
        queries.append((image, None, f"{name} (not in the references)", "+".join(["crop", *edits])))
    train = [_train_crop(photos[name], stream_rng(seed, TRAIN_STREAM, n))
             for n, name in enumerate(p for p in SKIMAGE_TRAIN for _ in range(TRAIN_PER_PHOTO))]
    summary = _write_disc(out, references, queries, train, seed, groups)
    summary["scikit_image"] = skimage.__version__
    return summary


def _tiles(image: Image.Image, columns: int, rows: int) -> list[Image.Image]:
    width, height = image.width // columns, image.height // rows
    return [image.crop((c * width, r * height, (c + 1) * width, (r + 1) * height))
            for r in range(rows) for c in range(columns)]


def _train_crop(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    crop = _crop(image, rng)
    return _flip(crop, rng) if rng.random() < 0.5 else crop
