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

Safety: the file is first opened lazily by Pillow (header only, ~0.04 ms; :func:`decode_plain_rgb`
skips that for JPEGs whose header only holds segments Pillow cannot refuse, see
:func:`plain_header`), so the checks the callers make today are made the same way: the format must be ``JPEG`` (an MPO is not), the mode
one that libjpeg-turbo turns into RGB as Pillow does (``RGB`` or ``L``; CMYK/YCCK and anything
odd go to Pillow) and the pixel count within :func:`vsbench.imaging.limits.max_image_pixels`,
checked on Pillow's header and again on simplejpeg's own reading of it, before anything is
decoded (an image over the cap raises :class:`~vsbench.imaging.limits.ImageTooLarge`). simplejpeg decodes with
``strict=True``: anything libjpeg-turbo only warns about (truncated data, corrupt entropy
data, extraneous bytes) is an error there, and any error means "not for the fast path". The
caller then runs its Pillow code unchanged, so every corrupt, truncated or unusual file gives
exactly the output, or the listed failure, it gave before.

Data that ends early is the exception: a JPEG whose scan stops before its last row and is then
closed by an end-of-image marker decodes in Pillow without a word (libjpeg-turbo only warns,
"premature end of data segment", and fills the missing rows with grey). :func:`check_complete` finds
that warning (or, with restart markers, "found marker 0xd9 instead of RSTn") with a strict decode at
1/8 scale (the entropy data is read whole, the IDCT mostly skipped, luma only: ~0.4 ms for an ABID-
sized photo, +20-25% on the resize step's full and draft modes, measured side by side; the fast
mode's own strict decode already vouches for its files) and refuses the file, in every decode mode
of the resize step, in embedding and before training. The rule: the decoder ran out of scan data
before the image's last row. Other warnings (extraneous bytes between segments) are no verdict; a
file that just stops, with no end-of-image marker, Pillow refuses already ("image file is
truncated").
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from vsbench.imaging.limits import ImageTooLarge, check_pixels

try:  # an optional speed-up: without simplejpeg everything takes the Pillow path
    import simplejpeg
except ImportError:  # pragma: no cover - simplejpeg is a dependency; kept importable without it
    simplejpeg = None

# Pillow modes of a JPEG that libjpeg-turbo converts to RGB exactly as Pillow does.
FAST_MODES = ("RGB", "L")
DRAFT_SCALES = (8, 4, 2, 1)


class TruncatedJpeg(ValueError):
    """JPEG data that ends before the image it declares: refused, never decoded into grey rows."""


def check_complete(data: bytes) -> None:
    """Raise :class:`TruncatedJpeg` when ``data`` is a JPEG whose scan ends before its last row.

    Call it after the pixel cap was checked (it decodes, at 1/8 scale) and after Pillow decoded the
    file without complaint: a file Pillow refuses keeps Pillow's reason. Without simplejpeg, or for
    data libjpeg-turbo cannot read a header from, nothing is checked here."""
    if simplejpeg is None or not data.startswith(b"\xff\xd8"):
        return
    try:
        height, width = simplejpeg.decode_jpeg_header(data)[:2]
        simplejpeg.decode_jpeg(data, colorspace="GRAY", strict=True,  # luma only: the scan is read whole anyway
                               min_width=max(1, math.ceil(width / 8)), min_height=max(1, math.ceil(height / 8)))
    except Exception as exc:  # noqa: BLE001 - only the one warning below is a verdict; the rest is Pillow's
        message = str(exc)
        if "premature end" in message.lower() or "found marker 0xd9" in message.lower():  # (EOI for a RST)
            raise TruncatedJpeg(f"truncated JPEG data: the scan ends before the last row of the {width}x{height} "
                                f"image it declares ({len(data):,} bytes; libjpeg-turbo: {message})") from None


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
    check_pixels(header.size)  # ImageTooLarge: a listed failure, never a decode
    return _decode_checked(data, header.size, target, rgbx)


def decode_plain_rgb(data: bytes, target: tuple[int, int] | None = None, *,
                     rgbx: bool = False) -> np.ndarray | None:
    """:func:`decode_rgb` without Pillow's header: for a JPEG whose header :func:`plain_header`
    reads, the same array; None for every other file (the caller then opens it with Pillow and
    goes on as before, so its output or its listed failure is unchanged).

    Why: ``Image.open`` costs ~0.04 ms a photo, 2-3% of the resize step's whole time per image.
    """
    if simplejpeg is None:
        return None
    size = plain_header(data)
    if size is None:
        return None
    try:
        check_pixels(size)
    except ImageTooLarge:
        return None  # the Pillow route refuses it, in its own words
    return _decode_checked(data, size, target, rgbx)


# The segments a plain JPEG's header holds, that Pillow's parser reads without any way to fail
# once libjpeg-turbo accepts the file: DHT, DRI and COM (which Pillow skips or stores), the
# baseline, extended and progressive Huffman SOFs, and APP0 and DQT as far as Pillow checks them
# (a JFIF APP0 needs 7 bytes, every quantization table must be whole: see plain_header). Anything
# else (EXIF and the other APPn that Pillow parses, MPO's APP2, arithmetic or lossless SOFs, junk
# or fill bytes between segments) sends the file to Pillow's header.
_PLAIN_SEGMENTS = frozenset({0xC4, 0xDD, 0xFE})
_PLAIN_FRAMES = frozenset({0xC0, 0xC1, 0xC2})
_SOS, _APP0, _DQT = 0xDA, 0xE0, 0xDB


def _pillow_reads_dqt(data: bytes, start: int, end: int) -> bool:
    """Whether Pillow's DQT parser accepts ``data[start:end]``: every table whole (65 bytes, or 129
    at 16-bit precision). libjpeg-turbo pads a short last table with 1s instead of failing, which
    would turn one of Pillow's listed failures into an output."""
    if end > len(data):
        return False
    while start < end:
        start += 65 if data[start] >> 4 == 0 else 129
    return start == end


def plain_header(data: bytes) -> tuple[int, int] | None:
    """(width, height) of an 8-bit grayscale or 3-component JPEG made of plain segments only
    (see ``_PLAIN_SEGMENTS``), walked from SOI to the start of scan; None for anything else.

    Pillow opens such a file as format ``JPEG`` in mode ``L`` or ``RGB`` (1 or 3 components,
    no MPF APP2, so never MPO), which is what :func:`decode_rgb` requires of Pillow's header.
    """
    if not data.startswith(b"\xff\xd8"):
        return None
    size = None
    offset = 2
    try:
        while True:
            if data[offset] != 0xFF:
                return None  # junk between segments: Pillow skips it, libjpeg warns; not plain
            marker = data[offset + 1]
            if marker == _SOS:
                return size
            length = (data[offset + 2] << 8) | data[offset + 3]
            if length < 2:
                return None
            if marker in _PLAIN_FRAMES:
                if size is not None or length < 8:
                    return None
                bits, height, width, components = (data[offset + 4], (data[offset + 5] << 8) | data[offset + 6],
                                                   (data[offset + 7] << 8) | data[offset + 8], data[offset + 9])
                if bits != 8 or components not in (1, 3) or not width or not height:
                    return None
                size = (width, height)
            elif marker == _APP0:
                if data.startswith(b"JFIF", offset + 4) and length < 2 + 7:
                    return None  # Pillow reads a JFIF version at bytes 5-6 and fails without it
            elif marker == _DQT:
                if not _pillow_reads_dqt(data, offset + 4, offset + 2 + length):
                    return None
            elif marker not in _PLAIN_SEGMENTS:
                return None
            offset += 2 + length
    except IndexError:
        return None  # ends before its scan: truncated


def _decode_checked(data: bytes, size: tuple[int, int], target: tuple[int, int] | None,
                    rgbx: bool) -> np.ndarray | None:
    """libjpeg-turbo's decode of ``data``, declared ``size`` (width, height) and within the pixel cap,
    at Pillow's draft scale for ``target``; None when libjpeg-turbo disagrees or complains."""
    width, height = size
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
