"""Generated patch pairs in the HPatches classification layout (seed 003), read by ``patch_pairs``.

HPatches itself is a 4 GB download of 65x65 greyscale patches cut from image sequences; the demo
and the tests need the same kind of data in the same files, built in a second:

* each *sequence* has its own background texture (a few sinusoids), shared by its patches: that is
  what makes same-sequence negatives harder than different-sequence ones, as in HPatches;
* each base patch adds its own blobs on top, and is rendered three times: ``ref``, an *easy*
  view (small rotation, scale and shift, light noise) and a *hard* view (larger jitter, more
  noise), by sampling the same continuous texture under the view's affine map;
* ``<split>_pos_easy.pairs`` pairs every ``ref`` with its easy view, ``<split>_pos_hard.pairs``
  with its hard view, ``<split>_neg_diffseq.pairs`` with the easy view of a patch from another
  sequence, ``<split>_neg_sameseq.pairs`` with another patch of its own sequence; lines are
  ``patch_a,patch_b,label`` in a shuffled order.

Every random choice comes from a stream seeded with ``(seed, stream, index)``, so the output is
byte-identical for a seed.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vsbench.benchmarks.patch_pairs.adapter import NEGATIVES, POSITIVES
from vsbench.io.storage import atomic_write_bytes, atomic_write_text

_SEQUENCE_STREAM = 1
_PATCH_STREAM = 2
_VIEW_STREAM = 3
_PAIRS_STREAM = 4

# (rotation degrees, relative scale, shift pixels, noise std) limits of each view.
_JITTER = {"e": (4.0, 0.03, 1.0, 3.0), "h": (15.0, 0.1, 2.5, 9.0)}


def _rng(seed: int, stream: int, *index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *index])


def patch_id(sequence: int, patch: int, view: str) -> str:
    """``seq01_p003_ref``: sequence, patch within it, and view (``ref``, ``e`` easy, ``h`` hard)."""
    return f"seq{sequence:02d}_p{patch:03d}_{view}"


def _render(sequence: np.ndarray, blobs: np.ndarray, size: int, view: tuple[float, float, float, float],
            rng: np.random.Generator) -> Image.Image:
    """Sample the patch's continuous texture on a grid moved by the view's rotation/scale/shift."""
    angle_limit, scale_limit, shift_limit, noise = view
    angle = math.radians(rng.uniform(-angle_limit, angle_limit))
    scale = 1.0 + rng.uniform(-scale_limit, scale_limit)
    shift = rng.uniform(-shift_limit, shift_limit, size=2)
    grid = (np.arange(size) - (size - 1) / 2.0) / size  # centred, in patch widths
    gy, gx = np.meshgrid(grid, grid, indexing="ij")
    cos, sin = math.cos(angle) * scale, math.sin(angle) * scale
    x = cos * gx - sin * gy + shift[0] / size
    y = sin * gx + cos * gy + shift[1] / size
    value = np.zeros_like(x)
    for fx, fy, phase, amplitude in sequence:
        value += amplitude * np.sin(2 * math.pi * (fx * x + fy * y) + phase)
    for cx, cy, sigma, amplitude in blobs:
        value += amplitude * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * sigma**2))
    pixels = 128.0 + 60.0 * value + rng.normal(0.0, noise, size=value.shape)
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def generate_patch_pairs(out: Path, *, patches: int = 40, sequences: int = 4, size: int = 32, split: str = "test",
                         seed: int = 0) -> dict[str, Any]:
    """``patches`` base patches over ``sequences`` sequences under ``out`` (see the module docstring).

    Writes ``patches/<id>.png`` (3 views a base patch) and the four ``<split>_*.pairs`` files, each
    with one pair per base patch. Returns counts and paths.
    """
    if sequences < 2 or patches < 2 * sequences or size < 8:
        raise ValueError("need sequences >= 2, patches >= 2 * sequences (a same-sequence negative) and size >= 8")
    out = Path(out)
    members: list[tuple[int, int]] = [(n % sequences, n // sequences) for n in range(patches)]
    textures = []
    for s in range(sequences):
        rng = _rng(seed, _SEQUENCE_STREAM, s)
        textures.append(np.column_stack([rng.uniform(0.5, 3.0, 3) * rng.choice([-1, 1], 3), rng.uniform(0.5, 3.0, 3),
                                         rng.uniform(0, 2 * math.pi, 3), rng.uniform(0.2, 0.45, 3)]))
    for n, (s, p) in enumerate(members):
        rng = _rng(seed, _PATCH_STREAM, n)
        blobs = np.column_stack([rng.uniform(-0.4, 0.4, (6, 2)), rng.uniform(0.06, 0.18, 6),
                                 rng.uniform(-1.2, 1.2, 6)])
        for v, (view, jitter) in enumerate((("ref", (0.0, 0.0, 0.0, 2.0)), *_JITTER.items())):
            image = _render(textures[s], blobs, size, jitter, _rng(seed, _VIEW_STREAM, n, v))
            atomic_write_bytes(out / "patches" / f"{patch_id(s, p, view)}.png", _png(image))
    pairs: dict[str, list[tuple[str, str, int]]] = {
        POSITIVES["easy"]: [(patch_id(s, p, "ref"), patch_id(s, p, "e"), 1) for s, p in members],
        POSITIVES["hard"]: [(patch_id(s, p, "ref"), patch_id(s, p, "h"), 1) for s, p in members],
        NEGATIVES["diffseq"]: [],
        NEGATIVES["sameseq"]: [],
    }
    rng = _rng(seed, _PAIRS_STREAM, 0)
    for s, p in members:
        others = [(s2, p2) for s2, p2 in members if s2 != s]
        same = [(s2, p2) for s2, p2 in members if s2 == s and p2 != p]
        s2, p2 = others[int(rng.integers(len(others)))]
        pairs[NEGATIVES["diffseq"]].append((patch_id(s, p, "ref"), patch_id(s2, p2, "e"), 0))
        s2, p2 = same[int(rng.integers(len(same)))]
        pairs[NEGATIVES["sameseq"]].append((patch_id(s, p, "ref"), patch_id(s2, p2, "e"), 0))
    files = {}
    for infix, lines in pairs.items():
        order = rng.permutation(len(lines))
        path = out / f"{split}_{infix}.pairs"
        atomic_write_text(path, "".join(f"{a},{b},{label}\n" for a, b, label in (lines[i] for i in order)))
        files[path.name] = len(lines)
    return {"root": str(out), "patches": 3 * patches, "base_patches": patches, "sequences": sequences,
            "pairs": files}
