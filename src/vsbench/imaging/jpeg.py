"""One fast JPEG decoder for the resize step and for embedding, with Pillow as the safety net.

Why: decoding is most of the cost of turning a bin photo into a 224x224 input. Pillow decodes
with libjpeg(-turbo) too, but simplejpeg (libjpeg-turbo's TurboJPEG API, statically linked in its
wheel) decodes straight into a NumPy array with less overhead: about 0.85 ms instead of 1.2 ms
for an ABID-sized (430x354) photo on one core, measured in bench/resize.py.

Its pixels are Pillow's pixels. Both run libjpeg-turbo with the same settings (accurate integer
IDCT, "fancy" chroma upsampling; Pillow's ``draft`` keeps those too, it only sets the DCT scale),
and libjpeg-turbo converts YCbCr and grayscale to RGB the same way Pillow's ``convert("RGB")``
does, so :func:`decode_rgb` returns exactly ``Image.open(f).draft("RGB", target).convert("RGB")``,
pixel for pixel (tests/unit/test_jpeg_decode.py checks it across subsamplings, progressive,
restart markers, grayscale and DCT scales 1/1 to 1/8). That is why the embedding cache key does
not name the decoder: the network sees the same input either way.

DCT scaling is restricted to what Pillow's draft mode picks, 1/2, 1/4 or 1/8 and only when the
photo is at least that many times the target on both sides. libjpeg-turbo can also scale by
other M/8, but that changes the pixels (and for ABID-sized photos it was not even faster).

Safety: the file is first opened lazily by Pillow (header only, ~0.03 ms), so the checks the
callers make today are made the same way: the format must be ``JPEG`` (an MPO is not), the mode
one that libjpeg-turbo turns into RGB as Pillow does (``RGB`` or ``L``; CMYK/YCCK and anything
odd go to Pillow) and the pixel count within :func:`vsbench.imaging.limits.max_image_pixels`,
checked on Pillow's header and again on simplejpeg's own reading of it, before anything is
decoded (an image over the cap raises :class:`~vsbench.imaging.limits.ImageTooLarge`). simplejpeg decodes with
``strict=True``: anything libjpeg-turbo only warns about (truncated data, corrupt entropy
data, extraneous bytes) is an error there, and any error means "not for the fast path". The
caller then runs its Pillow code unchanged, so every corrupt, truncated or unusual file gives
exactly the output, or the listed failure, it gave before.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from vsbench.imaging.limits import check_pixels

try:  # an optional speed-up: without simplejpeg everything takes the Pillow path
    import simplejpeg
except ImportError:  # pragma: no cover - simplejpeg is a dependency; kept importable without it
    simplejpeg = None

# Pillow modes of a JPEG that libjpeg-turbo converts to RGB exactly as Pillow does.
FAST_MODES = ("RGB", "L")
DRAFT_SCALES = (8, 4, 2, 1)


def available() -> bool:
    """Whether the fast decoder is installed."""
    return simplejpeg is not None


def draft_scale(size: tuple[int, int], target: tuple[int, int] | None) -> int:
    """The DCT scale denominator Pillow's ``draft`` picks for ``size`` and ``target``: the
    largest of 8, 4, 2, 1 that is at most ``min(width // target_width, height // target_height)``."""
    if not target:
        return 1
    room = min(size[0] // target[0], size[1] // target[1])
    return next((s for s in DRAFT_SCALES if room >= s), 1)


def decode_rgb(data: bytes, header: Image.Image, target: tuple[int, int] | None = None, *,
               rgbx: bool = False) -> np.ndarray | None:
    """``data``'s pixels as a uint8 (H, W, 3) RGB array, or None when the caller must use Pillow.

    ``rgbx``: (H, W, 4) instead, the same RGB and a fourth channel of 255 (libjpeg-turbo writes
    it at no extra cost; torch's resize kernel works on 4 channels internally and Pillow stores
    RGB as RGBX, so the resize step saves two repackings).

    ``header`` is ``data`` opened by Pillow and not yet loaded (``Image.open`` reads the header
    only). With ``target`` (width, height) the JPEG is decoded at the DCT scale Pillow's
    ``draft("RGB", target)`` would use; the result then equals
    ``header.draft("RGB", target); header.convert("RGB")`` pixel for pixel, and without it
    ``header.convert("RGB")``. None means: not a plain JPEG this decoder reproduces exactly,
    or libjpeg-turbo found anything wrong in it.
    """
    if simplejpeg is None or header.format != "JPEG" or header.mode not in FAST_MODES:
        return None
    width, height = header.size
    check_pixels((width, height))  # ImageTooLarge: a listed failure, never a decode
    try:  # simplejpeg reads its own header: the size it would decode must be the one just checked
        declared = simplejpeg.decode_jpeg_header(data)[:2]
    except Exception:  # noqa: BLE001 - a header libjpeg-turbo cannot read goes to Pillow
        return None
    if tuple(declared) != (height, width):
        check_pixels((declared[1], declared[0]))
        return None
    scale = draft_scale((width, height), target)
    if scale > 1 and max(width, height) < 8:
        return None  # too small to be sure which M/8 libjpeg-turbo would pick (see below)
    expected = (math.ceil(height / scale), math.ceil(width / scale))
    colorspace, channels = ("RGBX", 4) if rgbx else ("RGB", 3)
    try:
        if scale == 1:
            pixels = simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True)
        else:
            # The smallest M/8 that reaches these sizes on both sides is exactly 1/scale (M = 8/scale):
            # (M - 1)/8 falls short by at least max(width, height)/8 >= 1 pixel on the longer side.
            pixels = simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True,
                                            min_width=expected[1], min_height=expected[0])
    except Exception:  # noqa: BLE001 - any complaint from libjpeg-turbo sends the file to Pillow
        return None
    if pixels.shape != (*expected, channels) or pixels.dtype != np.uint8:
        return None
    return pixels
