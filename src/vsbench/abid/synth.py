"""A synthetic Amazon Bin Image Dataset in the real bucket's exact on-disk layout.

The real ABID is a 30 GB public bucket; the demo and the tests need something that every ABID
consumer (listing, id dedupe, metadata parsing, task-file generation, counting and verification
training) treats exactly like it, yet that builds in seconds and offline. So this module copies
the parts of the real data those consumers depend on:

* the layout ``bin-images/<key>.jpg`` + ``metadata/<key>.json``, with the bucket's quirks: keys
  spelled plainly (``523``) or zero-padded (``00523``), a few ids under both spellings with
  identical bytes, some images without metadata and some metadata without an image;
* the metadata schema, field order, ``indent=4`` formatting and its quirks: dict keys that are
  not the asin, entries missing fields, floats with the ugly precision of unit conversions;
* the statistics that make the tasks what they are: about 5 items a bin with a long tail, made of
  about two distinct asins in several units each, a few percent empty bins, and heavy-tailed
  asin repetition across bins (many asins seen once or twice, a few often) so that object
  verification has positives to find;
* images that make counting and verification learnable but not trivial: every product has a
  fixed appearance (shape, colours, texture, size from its physical dims) and every unit of
  quantity is drawn as its own instance, back to front, partly hidden by other items and by
  the semi-transparent elastic tapes across the bin front.

Generation is two-phase. :func:`plan_dataset` decides what every bin holds (cheap, no pixels),
which lets tests check the statistics of thousands of bins quickly; :func:`generate_abid` then
renders and writes each planned bin. Every random choice comes from its own stream keyed by
``(seed, stream, index)``, so a bin can be planned or rendered alone, in any process, in any
order, and the output is byte-identical for a seed whatever the number of workers.
"""

from __future__ import annotations

import colorsys
import io
import json
import math
import multiprocessing
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from vsbench.abid.ids import IMAGES_DIR, METADATA_DIR, parse_name
from vsbench.io.progress import progress_bar
from vsbench.io.storage import atomic_write_bytes

# Independent random streams, each seeded with (seed, stream, index): changing how one part is
# drawn never reshuffles another, and any single product or bin can be rebuilt on its own.
_CATALOG_STREAM = 1
_PLAN_STREAM = 2
_RENDER_STREAM = 3

# --- bin contents -------------------------------------------------------------------------------
# Tuned (see tests/unit/test_synth_abid.py) to the published ABID statistics: mean 5.1 items a
# bin, 90% of bins under 10 items, a few percent empty. The published repetition counts (459,476
# asins: 164,255 in one bin, 164,356 in two, 3,038 in ten) add up to about 1.1 M (bin, asin)
# appearances over 535,234 bins if the counts keep falling past ten as they do from two to ten:
# about two distinct asins a bin, so a bin's ~5 items are ~2.5 units of each asin on average.
# (An earlier version drew ~3.9 distinct asins of mostly single units; a shared asin was then a
# quarter of a bin and verification had almost nothing to see.)
EMPTY_FRACTION = 0.04
_DISTINCT_NB_N = 4  # distinct asins in a bin = 1 + NegBinomial(n, p) (mean 1 + 1.1), capped
_DISTINCT_NB_P = 4 / (4 + 1.1)
_MAX_DISTINCT = 12
_MAX_QUANTITY = 24  # items a bin at most ("a few up to ~20")
_UNIT_QUANTITIES = np.array([1, 2, 3, 4, 5, 6, 8, 10, 12])
_UNIT_QUANTITY_P = np.array([0.47, 0.20, 0.12, 0.08, 0.05, 0.035, 0.025, 0.015, 0.005])
# Asin popularity: Zipf-like p(rank) ~ (rank + offset)^-exponent over a catalog of about 0.7 asin
# slots per slot drawn; gives many asins seen once or twice and a few seen in dozens of bins.
_ZIPF_EXPONENT = 0.7
_ZIPF_OFFSET = 10.0
_CATALOG_PER_BIN = 1.4  # ~0.7 x the ~2 distinct asins an average bin holds
_MIN_CATALOG = 64

# --- bucket and metadata quirks -----------------------------------------------------------------
PADDED_FRACTION = 0.10  # ids stored as '%05d' (the dual-spelling ids included)
DUAL_FRACTION = 0.01  # ids stored under both spellings, identical bytes
IMAGE_ONLY_FRACTION = 0.02
METADATA_ONLY_FRACTION = 0.02
OTHER_KEY_FRACTION = 0.15  # BIN_FCSKU_DATA keys that are not the entry's asin
MISSING_FIELD_FRACTION = 0.03
_MISSING_FIELD_SETS: tuple[tuple[str, ...], ...] = (
    ("weight",),
    ("normalizedName",),
    ("height", "length", "width"),
    ("height", "length", "weight", "width"),
)
_ALNUM = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
_BOOK_FRACTION = 0.03  # products with a 10-digit ISBN as their asin

# --- rendering ----------------------------------------------------------------------------------
_WIDTH_RANGE = (430, 470)
_HEIGHT_RANGE = (350, 390)
_PX_PER_INCH = 22.0
_SPRITE_PX = (44, 260)  # smallest / largest side of a product's face at scale 1
_JPEG_QUALITY = 90
_GRAIN_SIGMA = 5.0  # sensor-like grain: realistic texture and a realistic 40-70 kB JPEG size

SHAPES = ("box", "rounded", "ellipse", "bottle", "bag")
_SHAPE_P = (0.40, 0.15, 0.12, 0.15, 0.18)
TEXTURES = ("solid", "stripes", "dots", "checker", "noise", "label")
_TEXTURE_P = (0.25, 0.15, 0.12, 0.10, 0.13, 0.25)
# A bag's outline before its product-specific squashing: corners and edge midpoints of its box.
_BAG_OUTLINE = (
    (0.0, 0.0), (0.5, 0.0), (1.0, 0.0), (1.0, 0.5), (1.0, 1.0), (0.5, 1.0), (0.0, 1.0), (0.0, 0.5)
)

_BRANDS = (
    "Kirkland Signature", "Northfield", "BrightNest", "Kelso", "Harbor & Pine", "Acme", "Vantora",
    "Sunny Days", "Blue Heron", "Trailmark", "PureLeaf", "Maple Row", "Orbitek", "Nimbus",
    "Cedar Lane", "Fleet", "Play-Doh", "HomeCraft", "Zestly", "Ironwood", "Little Sprout",
)
_ADJECTIVES = (
    "Premium", "Ultra Soft", "Heavy Duty", "Organic", "Classic", "Deluxe", "Compact", "Original",
    "Extra Strength", "Stainless Steel", "Waterproof", "Travel", "Kids'", "Men's", "Women's",
    "Unscented", "Sweet Shoppe", "Professional", "Reusable", "Non-Stick", "Wireless",
)
_NOUNS = (
    "Chunk Chicken Breast", "Saline Enema", "Ice Cream Sundae Cart Playset", "Phone Case",
    "Dish Soap", "Coffee Mug", "Screwdriver Set", "Hand Cream", "Toothbrush", "USB Cable",
    "Yoga Mat", "Water Bottle", "Dog Toy", "Vitamin D3 Softgels", "Cotton Socks", "Baby Wipes",
    "Glue Sticks", "Measuring Cups", "Shower Curtain Liner", "LED Flashlight", "Board Game",
    "Crew Neck T-Shirt", "Protein Bars", "Ballpoint Pens", "AA Batteries", "Lip Balm",
    "Spiral Notebook", "Cake Pan", "Phone Charger", "Shampoo", "Puzzle", "Kitchen Towels",
)
_BOOK_WORDS = (
    "Anatomy", "Garden", "River", "Physics", "Silence", "Kingdom", "Medicine", "Ocean", "Memory",
    "Cooking", "Design", "History", "Winter", "Algorithms", "Nursing", "Harvest", "Light",
)
_BOOK_SUFFIXES = ("Paperback", "Hardcover", "2nd Edition", "5th Edition", "A Novel", "Study Guide")
_IN_PER_CM = 0.393700787  # the conversion factor visible in the real metadata (e.g. 4.330708657)
_LB_PER_KG = 2.2046226218487757
_FLOAT_FUZZ = 0.99999999898  # the real data's 2.399999997552 == 2.4 * this


# ------------------------------------------------------------------------------------------------
# Data model
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Product:
    """One catalog entry: what the metadata says about it and how it always looks."""

    asin: str
    name: str
    normalized_name: str
    length_in: float
    width_in: float
    height_in: float
    weight_lb: float
    shape: str  # one of SHAPES
    texture: str  # one of TEXTURES
    base_color: tuple[int, int, int]
    secondary_color: tuple[int, int, int]
    size_px: tuple[int, int]  # (width, height) of the visible face at scale 1
    pattern_seed: int  # fixes the texture layout, so every instance shows the same pattern


@dataclass(frozen=True)
class BinItem:
    """One BIN_FCSKU_DATA entry: an asin (by catalog index) and how many units of it."""

    product: int
    key: str  # the entry's dict key: the asin, or another 10-char id as in the real data
    quantity: int
    missing: tuple[str, ...]  # metadata fields this entry lacks


@dataclass(frozen=True)
class BinPlan:
    """Everything decided about one bin before any pixel is drawn."""

    bin_id: int
    items: tuple[BinItem, ...]
    stems: tuple[str, ...]  # file name stems: ('523',), ('00523',) or ('523', '00523')
    has_image: bool
    has_metadata: bool

    @property
    def expected_quantity(self) -> int:
        return sum(item.quantity for item in self.items)


@dataclass(frozen=True)
class AbidSynthSummary:
    bins: int  # ids 1..bins were considered
    images: int  # distinct ids with an image written
    metadata: int  # distinct ids with a metadata file written
    image_only: int  # ids with an image but no metadata
    metadata_only: int  # ids with metadata but no image
    empty_bins: int  # EXPECTED_QUANTITY == 0 (among ids with metadata)
    padded_keys: int  # ids whose key is zero-padded ('%05d'), counting both-spellings ids too
    dual_keys: int  # ids stored under BOTH '523' and '00523' spellings (identical bytes)
    catalog_size: int  # products in the catalog
    distinct_asins_used: int  # asins in at least one written metadata file
    mean_quantity: float  # mean EXPECTED_QUANTITY over bins with metadata

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AbidPlan:
    """A whole planned dataset: the catalog and every bin's contents."""

    seed: int
    catalog: tuple[Product, ...]
    bins: tuple[BinPlan, ...]

    def summary(self) -> AbidSynthSummary:
        with_metadata = [b for b in self.bins if b.has_metadata]
        quantities = [b.expected_quantity for b in with_metadata]
        asins = {self.catalog[item.product].asin for b in with_metadata for item in b.items}
        return AbidSynthSummary(
            bins=len(self.bins),
            images=sum(b.has_image for b in self.bins),
            metadata=len(with_metadata),
            image_only=sum(b.has_image and not b.has_metadata for b in self.bins),
            metadata_only=sum(b.has_metadata and not b.has_image for b in self.bins),
            empty_bins=sum(q == 0 for q in quantities),
            padded_keys=sum(any(s != str(b.bin_id) for s in b.stems) for b in self.bins),
            dual_keys=sum(len(b.stems) == 2 for b in self.bins),
            catalog_size=len(self.catalog),
            distinct_asins_used=len(asins),
            mean_quantity=float(np.mean(quantities)) if quantities else 0.0,
        )

    def asin_bin_counts(self) -> Counter[str]:
        """How many bins (with metadata) hold each asin: the repetition ABID's stats describe."""
        return Counter(
            self.catalog[item.product].asin for b in self.bins if b.has_metadata for item in b.items
        )


# ------------------------------------------------------------------------------------------------
# Catalog
# ------------------------------------------------------------------------------------------------


def catalog_size_for(bins: int) -> int:
    """Catalog size for a dataset of ``bins`` bins: it grows with the dataset so that the asin
    repetition profile (share of asins seen once, twice, 5+ times) stays ABID-like at any size."""
    return max(_MIN_CATALOG, round(_CATALOG_PER_BIN * bins))


def make_catalog(size: int, seed: int) -> tuple[Product, ...]:
    """The first ``size`` products of the seed's catalog.

    Product ``i`` comes from its own stream, so a larger dataset extends the catalog of a smaller
    one instead of replacing it, and a product's appearance never depends on the dataset size.
    Index order is popularity order (index 0 is the most frequently stocked asin).
    """
    products: list[Product] = []
    seen: set[str] = set()
    for index in range(size):
        rng = np.random.default_rng([seed, _CATALOG_STREAM, index])
        product = _make_product(rng)
        while product.asin in seen:  # astronomically rare, but a duplicate asin would merge two products
            product = _make_product(rng)
        seen.add(product.asin)
        products.append(product)
    return tuple(products)


def _make_product(rng: np.random.Generator) -> Product:
    is_book = rng.random() < _BOOK_FRACTION
    asin = _isbn10(rng) if is_book else "B0" + "".join(rng.choice(_ALNUM, 8))
    name, normalized = _book_name(rng) if is_book else _product_name(rng)
    # Nice values first (what a person would measure), then written the way the real feed does.
    length = round(float(np.exp(rng.uniform(math.log(1.5), math.log(16.0)))), 1)
    if is_book:
        width, height = round(length * rng.uniform(0.6, 0.8), 1), round(rng.uniform(0.3, 2.0), 1)
    else:
        width = max(0.2, round(length * rng.uniform(0.25, 1.0), 1))
        height = max(0.2, round(length * rng.uniform(0.1, 0.9), 1))
    weight = max(0.05, round(length * width * height * rng.uniform(0.003, 0.02), 2))
    shape = "box" if is_book else str(rng.choice(SHAPES, p=_SHAPE_P))
    texture = "label" if is_book else str(rng.choice(TEXTURES, p=_TEXTURE_P))
    base = _random_color(rng)
    return Product(
        asin=asin,
        name=name,
        normalized_name=normalized,
        length_in=_ugly_inches(length, rng),
        width_in=_ugly_inches(width, rng),
        height_in=_ugly_inches(height, rng),
        weight_lb=_ugly_pounds(weight, rng),
        shape=shape,
        texture=texture,
        base_color=base,
        secondary_color=_contrasting_color(base, rng),
        size_px=_face_px(shape, length, width, height),
        pattern_seed=int(rng.integers(0, 2**63)),
    )


def _isbn10(rng: np.random.Generator) -> str:
    """A valid 10-digit ISBN (check digit 'X' avoided, like the digits-only example 0323185940)."""
    while True:
        digits = [int(d) for d in rng.integers(0, 10, 9)]
        check = (11 - sum((10 - i) * d for i, d in enumerate(digits)) % 11) % 11
        if check < 10:
            return "".join(map(str, digits)) + str(check)


def _product_name(rng: np.random.Generator) -> tuple[str, str]:
    """(name, normalizedName); the normalized form sometimes moves the pack size to the front,
    as in the real example "(Pack of 3) Fleet Saline Enema, 7.8 Ounce"."""
    base = f"{rng.choice(_BRANDS)} {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    if rng.random() < 0.5:
        base += f", {round(float(rng.uniform(0.5, 64.0)), 1)} Ounce"
    if rng.random() < 0.3:
        base += f", {int(rng.integers(2, 48))} Count"
    if rng.random() < 0.3:
        pack = f"(Pack of {int(rng.integers(2, 13))})"
        normalized = f"{pack} {base}" if rng.random() < 0.5 else f"{base} {pack}"
        return f"{base} {pack}", normalized
    return base, base


def _book_name(rng: np.random.Generator) -> tuple[str, str]:
    first, second = rng.choice(_BOOK_WORDS, 2, replace=False)
    name = f"The {first} of {second}: {rng.choice(_BOOK_SUFFIXES)}"
    return name, name


def _ugly_inches(value: float, rng: np.random.Generator) -> float:
    """An inch value written like the real feed: plain, fuzzed (2.399999997552) or from cm."""
    form = rng.random()
    if form < 0.45:
        return value * _FLOAT_FUZZ
    if form < 0.75:  # measured in whole centimetres, converted (11 cm -> 4.330708657)
        return max(1, round(value * 2.54)) * _IN_PER_CM
    return value


def _ugly_pounds(value: float, rng: np.random.Generator) -> float:
    """A weight written like the real feed: plain (5.7), float-error (1.9000000000000001 style)
    or converted from kilograms (1.4109440759087915 style)."""
    form = rng.random()
    if form < 0.4:
        return value
    if form < 0.7:
        tenths = max(1, round(value * 10))
        return (tenths - 1) * 0.1 + 0.1
    return round(value / _LB_PER_KG, 2) * _LB_PER_KG


def _face_px(shape: str, length: float, width: float, height: float) -> tuple[int, int]:
    """Pixel size of the face the camera sees: the two largest physical dims; bottles stand up."""
    big, small = sorted((length, width, height), reverse=True)[:2]
    lo, hi = _SPRITE_PX
    w, h = (int(np.clip(round(d * _PX_PER_INCH), lo, hi)) for d in (big, small))
    return (h, w) if shape == "bottle" else (w, h)


def _hsv(h: float, s: float, v: float) -> tuple[int, int, int]:
    r, g, b = colorsys.hsv_to_rgb(h % 1.0, s, v)
    return round(r * 255), round(g * 255), round(b * 255)


def _random_color(rng: np.random.Generator) -> tuple[int, int, int]:
    kind = rng.random()
    if kind < 0.12:  # white packaging
        return _hsv(rng.random(), rng.uniform(0.0, 0.08), rng.uniform(0.85, 0.97))
    if kind < 0.22:  # black packaging
        return _hsv(rng.random(), rng.uniform(0.0, 0.3), rng.uniform(0.08, 0.22))
    return _hsv(rng.random(), rng.uniform(0.35, 0.9), rng.uniform(0.4, 0.92))


def _contrasting_color(base: tuple[int, int, int], rng: np.random.Generator) -> tuple[int, int, int]:
    h, s, v = colorsys.rgb_to_hsv(*(c / 255 for c in base))
    kind = rng.random()
    if kind < 0.25:
        return _hsv(0, 0, 0.95) if v < 0.6 else _hsv(0, 0, 0.1)
    return _hsv(h + rng.uniform(0.25, 0.75), rng.uniform(0.4, 0.95), 1.0 - 0.6 * v + rng.uniform(0.0, 0.3))


# ------------------------------------------------------------------------------------------------
# Plan
# ------------------------------------------------------------------------------------------------


def plan_dataset(bins: int, seed: int = 0) -> AbidPlan:
    """Decide the contents, keys and files of bins ``1..bins`` without rendering anything."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    catalog = make_catalog(catalog_size_for(bins), seed)
    popularity = (np.arange(len(catalog)) + _ZIPF_OFFSET) ** -_ZIPF_EXPONENT
    cdf = np.cumsum(popularity / popularity.sum())
    planned = tuple(_plan_bin(bin_id, seed, catalog, cdf) for bin_id in range(1, bins + 1))
    return AbidPlan(seed=seed, catalog=catalog, bins=planned)


def _plan_bin(bin_id: int, seed: int, catalog: Sequence[Product], cdf: np.ndarray) -> BinPlan:
    rng = np.random.default_rng([seed, _PLAN_STREAM, bin_id])
    plain, padded = str(bin_id), f"{bin_id:05d}"
    spelling = rng.random()
    if plain == padded or spelling >= PADDED_FRACTION:  # ids >= 10000 have only one spelling
        stems: tuple[str, ...] = (plain,)
    elif spelling < DUAL_FRACTION:
        stems = (plain, padded)
    else:
        stems = (padded,)
    files = rng.random()
    has_image = files >= IMAGE_ONLY_FRACTION + METADATA_ONLY_FRACTION or files < IMAGE_ONLY_FRACTION
    has_metadata = files >= IMAGE_ONLY_FRACTION

    if rng.random() < EMPTY_FRACTION:
        distinct = 0
    else:
        distinct = min(_MAX_DISTINCT, 1 + int(rng.negative_binomial(_DISTINCT_NB_N, _DISTINCT_NB_P)))
    products = _draw_distinct(rng, cdf, distinct)
    quantities = [int(q) for q in rng.choice(_UNIT_QUANTITIES, size=distinct, p=_UNIT_QUANTITY_P)]
    while sum(quantities) > _MAX_QUANTITY:
        products.pop()
        quantities.pop()

    items: list[BinItem] = []
    used_keys: set[str] = set()
    for product, quantity in zip(products, quantities):
        key = catalog[product].asin
        if rng.random() < OTHER_KEY_FRACTION:
            key = "ZZ" + "".join(rng.choice(_ALNUM, 8))
        while key in used_keys:
            key = "ZZ" + "".join(rng.choice(_ALNUM, 8))
        used_keys.add(key)
        missing: tuple[str, ...] = ()
        if rng.random() < MISSING_FIELD_FRACTION:
            missing = _MISSING_FIELD_SETS[int(rng.integers(len(_MISSING_FIELD_SETS)))]
        items.append(BinItem(product=product, key=key, quantity=quantity, missing=missing))
    return BinPlan(
        bin_id=bin_id, items=tuple(items), stems=stems, has_image=has_image, has_metadata=has_metadata
    )


def _draw_distinct(rng: np.random.Generator, cdf: np.ndarray, count: int) -> list[int]:
    """``count`` distinct catalog indices drawn by popularity, in draw order."""
    chosen: list[int] = []
    while len(chosen) < count:
        for index in np.searchsorted(cdf, rng.random(count - len(chosen)) * cdf[-1], side="right"):
            index = min(int(index), len(cdf) - 1)
            if index not in chosen:
                chosen.append(index)
    return chosen


def bin_metadata(plan_bin: BinPlan, catalog: Sequence[Product]) -> dict[str, Any]:
    """The bin's metadata JSON object, in the real files' key order (entries sorted by key)."""
    entries: dict[str, Any] = {}
    for item in sorted(plan_bin.items, key=lambda it: it.key):
        product = catalog[item.product]
        entry = {
            "asin": product.asin,
            "height": {"unit": "IN", "value": product.height_in},
            "length": {"unit": "IN", "value": product.length_in},
            "name": product.name,
            "normalizedName": product.normalized_name,
            "quantity": item.quantity,
            "weight": {"unit": "pounds", "value": product.weight_lb},
            "width": {"unit": "IN", "value": product.width_in},
        }
        for field in item.missing:
            del entry[field]
        entries[item.key] = entry
    return {"BIN_FCSKU_DATA": entries, "EXPECTED_QUANTITY": plan_bin.expected_quantity}


# ------------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------------


def render_bin(plan_bin: BinPlan, catalog: Sequence[Product], seed: int) -> Image.Image:
    """Photograph a planned bin: cardboard interior, its items back to front, tapes on top.

    The background, item placement, tapes and lighting each draw from their own child stream of
    ``(seed, bin_id)``, so the same bin id rendered with different contents keeps the same
    background, tapes and lighting (the appearance test relies on it).
    """
    streams = np.random.SeedSequence([seed, _RENDER_STREAM, plan_bin.bin_id]).spawn(4)
    bg_rng, item_rng, tape_rng, light_rng = (np.random.default_rng(s) for s in streams)
    width = int(bg_rng.integers(_WIDTH_RANGE[0], _WIDTH_RANGE[1] + 1))
    height = int(bg_rng.integers(_HEIGHT_RANGE[0], _HEIGHT_RANGE[1] + 1))
    canvas, interior = _background(width, height, bg_rng)
    _draw_items(canvas, interior, [(catalog[i.product], i.quantity) for i in plan_bin.items], item_rng)
    _draw_tapes(canvas, tape_rng)
    return _light_and_grain(canvas, light_rng)


def _background(
    width: int, height: int, rng: np.random.Generator
) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """The empty bin: shaded, fibrous brown-grey cardboard walls seen from the open front.

    Returns the image and the back wall's box (left, top, right, bottom), where items sit.
    """
    wall = np.array([124.0, 104.0, 80.0]) * rng.uniform(0.7, 1.15) + rng.normal(0.0, 6.0, 3)
    left = int(width * rng.uniform(0.06, 0.13))
    right = width - int(width * rng.uniform(0.06, 0.13))
    top = int(height * rng.uniform(0.05, 0.12))
    bottom = height - int(height * rng.uniform(0.06, 0.12))

    # Region map: 0 back wall, 1 left wall, 2 right wall, 3 floor, 4 ceiling (perspective trapezoids).
    regions = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(regions)
    draw.polygon([(0, 0), (left, top), (left, bottom), (0, height)], fill=1)
    draw.polygon([(width, 0), (right, top), (right, bottom), (width, height)], fill=2)
    draw.polygon([(0, height), (left, bottom), (right, bottom), (width, height)], fill=3)
    draw.polygon([(0, 0), (left, top), (right, top), (width, 0)], fill=4)
    # The left wall catches the light, the right one is in shade, the floor is lit from above.
    side_gains = [rng.uniform(1.05, 1.25), rng.uniform(0.7, 0.9), rng.uniform(1.0, 1.2)]
    region_gain = np.array([1.0, *side_gains, 0.55], np.float32)
    gain = region_gain[np.asarray(regions)]

    # Low-frequency shading (blotches, uneven light), darker towards the top of the bin.
    blotches = Image.fromarray(rng.uniform(0.85, 1.12, (5, 6)).astype(np.float32), mode="F")
    gain *= np.asarray(blotches.resize((width, height), Image.Resampling.BILINEAR))
    gain *= np.linspace(0.72, 1.0, height, dtype=np.float32)[:, None]
    # Cardboard fibre: faint horizontal streaks plus weaker vertical ones.
    gain *= 1.0 + rng.normal(0.0, 0.035, (height, 1)).astype(np.float32)
    gain *= 1.0 + rng.normal(0.0, 0.015, (1, width)).astype(np.float32)

    pixels = gain[:, :, None] * wall.astype(np.float32)
    # Dark frame edges of the pod's front opening.
    edge = int(rng.integers(3, 9))
    pixels[:, :edge] *= 0.35
    pixels[:, width - edge :] *= 0.35
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    return image, (left, top, right, bottom)


def _draw_items(
    canvas: Image.Image,
    interior: tuple[int, int, int, int],
    contents: Sequence[tuple[Product, int]],
    rng: np.random.Generator,
) -> None:
    """Paste every unit as its own instance, back to front, so items occlude each other.

    Depth order is random but biased to put big items at the back (as stockers do), and crowded
    bins shrink all their items a little (a real bin of 20 items holds small ones): both keep
    enough of each instance visible for counting to stay learnable.
    """
    instances = [product for product, quantity in contents for _ in range(quantity)]
    if not instances:
        return
    left, top, right, bottom = interior
    areas = np.array([p.size_px[0] * p.size_px[1] for p in instances], float)
    crowding = float(np.clip(math.sqrt(0.9 * (right - left) * (bottom - top) / areas.sum()), 0.5, 1.0))
    for index in np.argsort(-areas * rng.uniform(0.4, 1.6, len(instances)), kind="stable"):
        sprite = _instance(_product_sprite(instances[index]), crowding, rng)
        w, h = sprite.size
        x = int(rng.uniform(left - 0.3 * w, right - 0.7 * w))
        # Items rest low in the bin: bottom edges cluster near the floor, some sit on others.
        y_bottom = bottom + 6 - (bottom - top) * rng.beta(1.2, 3.0)
        y = int(max(top - 0.2 * h, y_bottom - h))
        shadow = sprite.getchannel("A").point(lambda a: a * 0.4)
        canvas.paste((0, 0, 0), (x + 4, y + 5), shadow)
        canvas.paste(sprite, (x, y), sprite)


def _instance(sprite: Image.Image, crowding: float, rng: np.random.Generator) -> Image.Image:
    """One physical unit: the product's sprite with small scale, pose and brightness jitter."""
    scale = crowding * rng.uniform(0.9, 1.1)
    w, h = sprite.size
    out = sprite.resize((max(8, round(w * scale)), max(8, round(h * scale))), Image.Resampling.BILINEAR)
    angle = float(np.clip(rng.normal(0.0, 7.0), -18.0, 18.0))
    out = out.rotate(angle, resample=Image.Resampling.BILINEAR, expand=True)
    brightness = rng.uniform(0.88, 1.12)
    lut = [min(255, round(v * brightness)) for v in range(256)] * 3 + list(range(256))
    return out.point(lut)


@lru_cache(maxsize=1024)  # ~30 MB; popular products recur, so this saves ~1 ms a bin
def _product_sprite(product: Product) -> Image.Image:
    """The product's canonical RGBA look; a pure function of the product, hence cacheable."""
    w, h = product.size_px
    rng = np.random.default_rng(product.pattern_seed)
    face = Image.new("RGB", (w, h), product.base_color)
    draw = ImageDraw.Draw(face)
    _draw_texture(draw, product.texture, w, h, product.secondary_color, rng)
    _draw_emblem(draw, w, h, product.base_color, rng)

    # Shading: cylinders (bottles, round items, bags) fall off at both sides; boxes lit from the
    # upper left.
    xs = np.linspace(-1.0, 1.0, w, dtype=np.float32)
    ys = np.linspace(-1.0, 1.0, h, dtype=np.float32)
    if product.shape in ("ellipse", "bottle", "bag"):
        shade = (0.72 + 0.38 * np.sqrt(np.clip(1.0 - xs**2, 0.0, 1.0)))[None, :] * np.ones((h, 1), np.float32)
    else:
        shade = 1.06 - 0.09 * xs[None, :] - 0.07 * ys[:, None]
    pixels = np.asarray(face, dtype=np.float32) * shade[:, :, None]
    face = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")

    mask = Image.new("L", (w, h), 0)
    mask_draw, face_draw = ImageDraw.Draw(mask), ImageDraw.Draw(face)
    outline = tuple(int(c * 0.55) for c in product.base_color)
    if product.shape == "box":
        mask_draw.rectangle([0, 0, w - 1, h - 1], fill=255)
        lid = max(2, h // 9)  # the top face, seen slightly from above
        lit = tuple(min(255, int(c * 1.2) + 10) for c in product.base_color)
        face_draw.rectangle([0, 0, w - 1, lid], fill=lit)
        face_draw.rectangle([0, 0, w - 1, h - 1], outline=outline, width=2)
    elif product.shape == "rounded":
        radius = min(w, h) // 5
        mask_draw.rounded_rectangle([0, 0, w - 1, h - 1], radius=radius, fill=255)
        face_draw.rounded_rectangle([0, 0, w - 1, h - 1], radius=radius, outline=outline, width=2)
    elif product.shape == "ellipse":
        mask_draw.ellipse([0, 0, w - 1, h - 1], fill=255)
        face_draw.ellipse([0, 0, w - 1, h - 1], outline=outline, width=2)
    elif product.shape == "bottle":
        shoulder, neck = int(h * 0.3), int(h * 0.1)
        body = [0, shoulder, w - 1, h - 1]
        neck_box = [int(w * 0.33), neck, int(w * 0.67), shoulder + 4]
        cap_box = [int(w * 0.3), 0, int(w * 0.7), neck]
        for box in (body, neck_box, cap_box):
            mask_draw.rounded_rectangle(box, radius=max(1, (box[2] - box[0]) // 5), fill=255)
        face_draw.rectangle(cap_box, fill=product.secondary_color)
        face_draw.rounded_rectangle(body, radius=max(1, w // 5), outline=outline, width=2)
    else:  # bag: an irregular, fixed polygon
        pull = rng.uniform(0.0, 0.25, len(_BAG_OUTLINE))  # each outline point pulled towards the centre
        points = [
            ((fx + (0.5 - fx) * t) * (w - 1), (fy + (0.5 - fy) * t) * (h - 1))
            for (fx, fy), t in zip(_BAG_OUTLINE, pull)
        ]
        mask_draw.polygon(points, fill=255)
        face_draw.line(points + points[:1], fill=outline, width=2)
    face.putalpha(mask)
    return face


def _draw_emblem(
    draw: ImageDraw.ImageDraw, w: int, h: int, base: tuple[int, int, int], rng: np.random.Generator
) -> None:
    """The brand mark: a product-specific shape in a third colour at a product-specific place.

    Real packaging carries logos; the mark lets two products of the same colour and print differ.
    Drawn after the print from the same stream, so the print itself is unchanged by it."""
    accent = _contrasting_color(base, rng)
    radius = min(w, h) * rng.uniform(0.16, 0.3)
    cx, cy = w * rng.uniform(0.3, 0.7), h * rng.uniform(0.3, 0.7)
    corners = int(rng.integers(3, 9))  # 3..7: triangle to heptagon; 8: a disc
    rotation = rng.uniform(0.0, 2 * math.pi)
    if corners == 8:
        draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], fill=accent)
    else:
        angles = rotation + 2 * math.pi * np.arange(corners) / corners
        draw.polygon([(cx + radius * math.cos(a), cy + radius * math.sin(a)) for a in angles], fill=accent)
    inner = _contrasting_color(accent, rng)  # a dot of a fourth colour inside the mark
    r2 = radius * rng.uniform(0.25, 0.5)
    draw.ellipse([cx - r2, cy - r2, cx + r2, cy + r2], fill=inner)


def _draw_texture(
    draw: ImageDraw.ImageDraw,
    texture: str,
    w: int,
    h: int,
    color: tuple[int, int, int],
    rng: np.random.Generator,
) -> None:
    """The product's print. Always leaves the base colour dominant, so colour identifies it too."""
    if texture == "stripes":
        period = int(rng.integers(8, 22))
        band = max(2, int(period * rng.uniform(0.25, 0.45)))
        slant = int(rng.choice([0, h // 2, -(h // 2)]))
        for start in range(-h - period, w + h, period):
            corners = [(start, 0), (start + band, 0), (start + band + slant, h), (start + slant, h)]
            draw.polygon(corners, fill=color)
    elif texture == "dots":
        step = int(rng.integers(10, 24))
        radius = max(2, int(step * rng.uniform(0.15, 0.3)))
        for cy in range(step // 2, h, step):
            for cx in range(step // 2 + (cy // step % 2) * step // 2, w, step):
                draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], fill=color)
    elif texture == "checker":
        cell = int(rng.integers(8, 20))
        for row, y in enumerate(range(0, h, cell)):
            for col, x in enumerate(range(0, w, cell)):
                if (row + col) % 2:
                    draw.rectangle([x, y, x + cell - 1, y + cell - 1], fill=color)
    elif texture == "noise":
        for _ in range(int(rng.integers(4, 9))):
            cx, cy = rng.uniform(0, w), rng.uniform(0, h)
            rx, ry = rng.uniform(0.08, 0.25) * w, rng.uniform(0.08, 0.25) * h
            draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=color)
    elif texture == "label":
        x0, y0 = int(w * rng.uniform(0.08, 0.2)), int(h * rng.uniform(0.15, 0.35))
        x1, y1 = int(w * rng.uniform(0.8, 0.92)), int(h * rng.uniform(0.65, 0.85))
        draw.rectangle([x0, y0, x1, y1], fill=color)
        ink = (20, 20, 25) if sum(color) > 380 else (240, 240, 235)
        line = max(3, (y1 - y0) // 6)
        for y in range(y0 + line // 2, y1 - line, line):  # text-like bars of varying length
            length = int((x1 - x0 - 8) * rng.uniform(0.3, 0.95))
            draw.rectangle([x0 + 4, y, x0 + 4 + length, y + max(1, line // 2)], fill=ink)
    # "solid": the base colour alone.


def _draw_tapes(canvas: Image.Image, rng: np.random.Generator) -> None:
    """2-4 whitish, semi-transparent elastic tapes across the bin front, sagging slightly."""
    width, height = canvas.size
    alpha = Image.new("L", canvas.size, 0)
    draw = ImageDraw.Draw(alpha)
    count = int(rng.integers(2, 5))
    # One tape per horizontal band, so tapes rarely pile onto each other.
    centers = (0.18 + 0.72 * (np.arange(count) + rng.uniform(0.15, 0.85, count)) / count) * height
    for center in centers:
        thickness = rng.uniform(10, 24)
        sag, tilt = rng.uniform(0, 14), rng.uniform(-12, 12)
        xs = np.linspace(0, width, 7)
        mid = center + tilt * (xs / width - 0.5) + sag * np.sin(np.pi * xs / width)
        upper = list(zip(xs.tolist(), (mid - thickness / 2).tolist()))
        lower = list(zip(xs.tolist(), (mid + thickness / 2).tolist()))
        strength = int(rng.integers(120, 190))
        draw.polygon(upper + lower[::-1], fill=strength)
        draw.line(upper, fill=min(255, strength + 50), width=2)  # glossy edges catch the light
        draw.line(lower, fill=min(255, strength + 30), width=1)
    tint = tuple(int(v) for v in rng.integers(222, 246, 3))
    canvas.paste(tint, (0, 0), alpha)


def _light_and_grain(canvas: Image.Image, rng: np.random.Generator) -> Image.Image:
    """Per-photo exposure, white balance and vignetting, then sensor grain."""
    width, height = canvas.size
    gains = (rng.uniform(0.85, 1.12) * rng.normal(1.0, 0.04, 3)).astype(np.float32)
    vx = 1.0 - 0.18 * np.linspace(-1.0, 1.0, width, dtype=np.float32) ** 2
    vy = 1.0 - 0.14 * np.linspace(-1.0, 1.0, height, dtype=np.float32) ** 2
    pixels = np.asarray(canvas, dtype=np.float32) * (vy[:, None] * vx[None, :])[:, :, None] * gains
    pixels += rng.standard_normal((height, width, 1), dtype=np.float32) * _GRAIN_SIGMA
    pixels += rng.standard_normal((height, width, 3), dtype=np.float32) * (_GRAIN_SIGMA * 0.4)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def encode_jpeg(image: Image.Image) -> bytes:
    """JPEG bytes with fixed settings (libjpeg is deterministic for equal pixels and settings)."""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=_JPEG_QUALITY, subsampling="4:2:0")
    return buffer.getvalue()


# ------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------


def write_bin(out_dir: Path, plan_bin: BinPlan, catalog: Sequence[Product], seed: int) -> None:
    """Render and write one bin's files under every spelling of its id."""
    if plan_bin.has_image:
        jpeg = encode_jpeg(render_bin(plan_bin, catalog, seed))
        for stem in plan_bin.stems:
            atomic_write_bytes(out_dir / IMAGES_DIR / f"{stem}.jpg", jpeg)
    if plan_bin.has_metadata:
        text = json.dumps(bin_metadata(plan_bin, catalog), indent=4).encode("utf-8")
        for stem in plan_bin.stems:
            atomic_write_bytes(out_dir / METADATA_DIR / f"{stem}.json", text)


_worker_job: tuple[Path, tuple[Product, ...], int] | None = None


def _init_worker(out_dir: Path, catalog: tuple[Product, ...], seed: int) -> None:
    """Ship the catalog once per worker process instead of once per bin."""
    global _worker_job
    _worker_job = (out_dir, catalog, seed)


def _write_bin_in_worker(plan_bin: BinPlan) -> None:
    assert _worker_job is not None, "worker not initialised"
    out_dir, catalog, seed = _worker_job
    write_bin(out_dir, plan_bin, catalog, seed)


def _remove_stale(out_dir: Path, plan: AbidPlan) -> None:
    """Delete ABID-named files a previous run left that this dataset does not have, so that
    regenerating into the same folder with other parameters gives exactly this dataset."""
    wanted = {(IMAGES_DIR, f"{stem}.jpg") for b in plan.bins if b.has_image for stem in b.stems}
    wanted |= {(METADATA_DIR, f"{stem}.json") for b in plan.bins if b.has_metadata for stem in b.stems}
    for directory, kind in ((IMAGES_DIR, "image"), (METADATA_DIR, "metadata")):
        folder = out_dir / directory
        if folder.is_dir():
            for path in folder.iterdir():
                if parse_name(path.name, kind) is not None and (directory, path.name) not in wanted:
                    path.unlink()


def generate_abid(
    out_dir: Path, bins: int, seed: int = 0, *, workers: int = 1, progress: bool = True
) -> AbidSynthSummary:
    """Write a synthetic ABID for ids ``1..bins`` under ``out_dir`` and summarise it.

    ``out_dir`` then holds ``bin-images/<key>.jpg`` and ``metadata/<key>.json`` exactly as the
    public bucket would (ABID-named files from an earlier run that this dataset lacks are
    removed). The bytes depend only on ``bins`` and ``seed``, not on ``workers``.
    """
    out_dir = Path(out_dir)
    plan = plan_dataset(bins, seed)
    _remove_stale(out_dir, plan)
    with progress_bar(total=bins, desc="synthetic ABID", unit="bin", disable=not progress) as bar:
        if workers <= 1:
            for plan_bin in plan.bins:
                write_bin(out_dir, plan_bin, plan.catalog, seed)
                bar.update()
        else:
            # spawn, not fork: the caller may hold threads (torch, boto3) that fork would break.
            context = multiprocessing.get_context("spawn")
            job = (out_dir, plan.catalog, seed)
            with context.Pool(workers, initializer=_init_worker, initargs=job) as pool:
                for _ in pool.imap_unordered(_write_bin_in_worker, plan.bins, chunksize=8):
                    bar.update()
    return plan.summary()
