"""How large an image may be, and how many bad images a step may meet, before anything is decoded.

Why: a 30000x30000 JPEG is 10 MB on disk and 2.7 GB once decoded. Pillow guards against such
"decompression bombs" with a warning (over ``Image.MAX_IMAGE_PIXELS``) and an exception (over
twice that), but the exception is not an ``OSError``, so it escaped the resize step's per-image
handling and stopped the whole step; simplejpeg has no guard at all. Every image vsbench decodes
(resize, embed, training) is opened by :func:`open_image`, which refuses more than
:func:`max_image_pixels` pixels from the header alone, with one reason the step lists in its
manifest beside the corrupt and truncated files.

One bad image never stops a step; many do. :func:`check_failure_rate` is the one rule: a step whose
share of unreadable images passes :func:`max_failure_rate` (1% by default: beyond it the folder is
probably wrong or the download broken) fails after writing its manifest, and says how to go on.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import IO

from PIL import Image, UnidentifiedImageError

DEFAULT_MAX_IMAGE_PIXELS = 89_478_485  # Pillow's own default: ~0.25 GB of RGB once decoded
DEFAULT_MAX_FAILURE_RATE = 0.01
PIXELS_VARIABLE = "VSBENCH_MAX_IMAGE_PIXELS"
FAILURE_RATE_VARIABLE = "VSBENCH_MAX_FAILURE_RATE"


class ImageTooLarge(ValueError):
    """An image whose header declares more pixels than the cap (a ValueError: a listed per-image failure)."""


class TooManyFailures(RuntimeError):
    """A step met more unreadable items than its threshold allows; its manifest lists them."""

    one_line = True  # an expected failure: its message says all (the CLI prints no traceback)


def max_image_pixels() -> int:
    """The pixel cap: ``VSBENCH_MAX_IMAGE_PIXELS`` or :data:`DEFAULT_MAX_IMAGE_PIXELS`."""
    raw = os.environ.get(PIXELS_VARIABLE, "").strip().replace("_", "")
    if not raw:
        return DEFAULT_MAX_IMAGE_PIXELS
    try:
        value = int(float(raw))
    except ValueError:
        raise ValueError(f"{PIXELS_VARIABLE}={raw[:100]!r} is not a number of pixels") from None
    if value < 1:
        raise ValueError(f"{PIXELS_VARIABLE}={value} must be at least 1")
    return value


def max_failure_rate(value: float | None = None) -> float:
    """``value``, else ``VSBENCH_MAX_FAILURE_RATE``, else :data:`DEFAULT_MAX_FAILURE_RATE`; in [0, 1]."""
    if value is None:
        raw = os.environ.get(FAILURE_RATE_VARIABLE, "").strip()
        try:
            value = float(raw) if raw else DEFAULT_MAX_FAILURE_RATE
        except ValueError:
            raise ValueError(f"{FAILURE_RATE_VARIABLE}={raw[:100]!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"the maximum failure rate must be between 0 and 1, got {value}")
    return value


def check_pixels(size: tuple[int, int]) -> None:
    """ImageTooLarge when ``width * height`` passes the cap; the message states the cap and its variable."""
    width, height = size
    limit = max_image_pixels()
    if width * height > limit:
        raise ImageTooLarge(f"image too large: {width}x{height} = {width * height:,} pixels, over the "
                            f"{limit:,}-pixel limit (set {PIXELS_VARIABLE} to raise it)")


def open_image(source: str | Path | IO[bytes], name: str | Path | None = None) -> Image.Image:
    """``Image.open`` (header only, nothing decoded) that refuses an image over the pixel cap with
    :class:`ImageTooLarge` instead of Pillow's DecompressionBombError or warning.

    Pillow's own limit is set to the same cap, so its later checks (``draft``, plugins) agree.
    ``name``: the file a buffer ``source`` was read from, for Pillow's "cannot identify image file"
    (which would otherwise name the buffer object): the reason listed is the one opening the path gives.
    """
    limit = max_image_pixels()
    Image.MAX_IMAGE_PIXELS = limit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked below, with our message
        try:
            image = Image.open(source)
        except UnidentifiedImageError:
            if name is None:
                raise
            raise UnidentifiedImageError(f"cannot identify image file {str(name)!r}") from None
        except Image.DecompressionBombError as exc:  # over twice the cap: Pillow refuses before we see the size
            found = re.search(r"\((\d+) pixels\)", str(exc))
            pixels = f"{int(found.group(1)):,} pixels" if found else str(exc)
            raise ImageTooLarge(f"image too large: {pixels}, over the {limit:,}-pixel limit "
                                f"(set {PIXELS_VARIABLE} to raise it)") from None
    try:
        check_pixels(image.size)
    except ImageTooLarge:
        image.close()
        raise
    return image


def check_failure_rate(step: str, failed: int, total: int, limit: float | None, manifest: str | Path, *,
                       option: str = "") -> None:
    """TooManyFailures when ``failed / total`` passes the threshold; the message says where the
    failures are listed and how to accept them: ``option`` where the step's command has one
    (``--max-failure-rate``), else the variable alone (a command without the option is not told to use it)."""
    rate = max_failure_rate(limit)
    if total and failed / total > rate:
        accept = f"{option} (or {FAILURE_RATE_VARIABLE})" if option else FAILURE_RATE_VARIABLE
        raise TooManyFailures(
            f"{step}: {failed} of {total} images ({failed / total:.1%}) could not be used, over the "
            f"maximum failure rate of {rate:.1%}; the reasons are listed in {manifest}. Fix or remove those "
            f"files, or accept them with {accept} set higher")
