"""Generated Copydays data: the blocks with the real naming scheme (``200000.jpg`` an original,
``200001.jpg`` its first strong attack: the 4-character prefix is what ties them), plus distractor
and codec-training folders, drawn with DISC's procedural images and edits (same seeded streams).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from vsbench.benchmarks.copydays.adapter import CROP_PERCENTS, JPEG_QUALITIES, ORIGINAL, STRONG
from vsbench.benchmarks.disc.synth import (
    DISTRACTOR_STREAM,
    REFERENCE_STREAM,
    STRONG_STREAM,
    TRAIN_STREAM,
    edited_copy,
    jpeg_bytes,
    procedural_image,
    save_jpeg,
    stream_rng,
)
from vsbench.io.storage import atomic_write_bytes

MAX_ORIGINALS = 1000  # Copydays names are "2" + 3 digits + 2 digits: at most 1000 originals


def copydays_original_name(number: int) -> str:
    """Copydays names: ``2`` + 3-digit image number + ``00`` for the original (``200000``)."""
    return f"2{number:03d}00"


def generate_copydays(out: Path, *, originals: int = 10, distractors: int = 20, train: int = 40,
                      jpeg_qualities: Sequence[int] = JPEG_QUALITIES, crop_percents: Sequence[int] = CROP_PERCENTS,
                      seed: int = 0) -> dict[str, Any]:
    """A small Copydays-layout set: ``out/copydays`` (the blocks), ``out/distractors``, ``out/codec_train``.

    Each original gets 1 or 2 strong attacks (229 / 157 ~ 1.46 on the real set) named
    ``2NNN01.jpg``, ``2NNN02.jpg``: 3-4 edits each, heavier than the DISC copies. ``jpegqual/<q>``
    re-encodes every original at quality q, ``crops/<c>`` keeps the centre with c % of the surface
    cut away. The returned dict's ``root`` and ``benchmark_options`` (``distractors``, ``codec_train``)
    are the arguments of the ``copydays`` loader.
    """
    if not 1 <= originals <= MAX_ORIGINALS or distractors < 0 or train < 0:
        raise ValueError(f"originals must be in 1..{MAX_ORIGINALS}; distractors and train >= 0")
    if any(q not in JPEG_QUALITIES for q in jpeg_qualities) or any(c not in CROP_PERCENTS for c in crop_percents):
        raise ValueError(f"JPEG qualities must be among {JPEG_QUALITIES} and crops among {CROP_PERCENTS} "
                         "(the adapter reads only the standard blocks)")
    out = Path(out)
    root = out / "copydays"
    strong = 0
    for number in range(originals):
        name = copydays_original_name(number)
        rng = stream_rng(seed, REFERENCE_STREAM, number)
        original = procedural_image(rng, (int(rng.integers(224, 321)), int(rng.integers(224, 321))))
        save_jpeg(root / ORIGINAL / f"{name}.jpg", original)
        attacks = stream_rng(seed, STRONG_STREAM, number)
        for attack in range(1, 2 + int(attacks.random() < 0.46)):
            image, _ = edited_copy(original, attacks, edits=(3, 4))
            save_jpeg(root / STRONG / f"{name[:4]}{attack:02d}.jpg", image)
            strong += 1
        for quality in jpeg_qualities:
            atomic_write_bytes(root / "jpegqual" / str(quality) / f"{name}.jpg", jpeg_bytes(original, quality))
        for percent in crop_percents:
            save_jpeg(root / "crops" / str(percent) / f"{name}.jpg", _central_crop(original, percent))
    for n in range(distractors):
        save_jpeg(out / "distractors" / f"{n:06d}.jpg", procedural_image(stream_rng(seed, DISTRACTOR_STREAM, n)))
    for n in range(train):
        save_jpeg(out / "codec_train" / f"{n:06d}.jpg", procedural_image(stream_rng(seed, TRAIN_STREAM, n)))
    return {
        "root": str(root),
        "distractors": str(out / "distractors") if distractors else None,
        "codec_train": str(out / "codec_train") if train else None,
        "benchmark_options": {key: value for key, value in (("distractors", str(out / "distractors")),
                                                            ("codec_train", str(out / "codec_train")))
                              if (distractors if key == "distractors" else train)},
        "originals": originals,
        "strong": strong,
        "queries": originals * (1 + len(jpeg_qualities) + len(crop_percents)) + strong,
        "distractor_images": distractors,
        "train_images": train,
    }


def _central_crop(image: Image.Image, percent: int) -> Image.Image:
    """The centre of the image with ``percent`` % of its surface cut away (same aspect ratio)."""
    keep = math.sqrt(1 - percent / 100)
    width, height = max(1, round(image.width * keep)), max(1, round(image.height * keep))
    left, top = (image.width - width) // 2, (image.height - height) // 2
    return image.crop((left, top, left + width, top + height))
