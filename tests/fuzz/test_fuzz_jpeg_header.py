"""Fuzz: the resize step's header-free JPEG path never takes a file Pillow's header would not.

``jpeg.decode_plain_rgb`` skips ``Image.open`` for JPEGs made of plain segments. Its promise:
whenever it returns pixels, Pillow's route (``Image.open``, then ``jpeg.decode_rgb``) returns the
same pixels; anything else is left to that route. Here the header bytes of real JPEGs (baseline,
progressive, grayscale, with restart markers) are flipped, cut, duplicated and spliced, and the
promise is checked on each result, at full scale and at a draft scale.
"""

from __future__ import annotations

import io

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from vsbench.imaging import jpeg

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _jpeg(mode: str, size: tuple[int, int], **options) -> bytes:
    rng = np.random.default_rng(sum(size))
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="JPEG", **options)
    return buffer.getvalue()


SEEDS = [
    _jpeg("RGB", (64, 48), quality=90),
    _jpeg("RGB", (80, 60), quality=75, progressive=True),
    _jpeg("L", (40, 40), quality=85),
    _jpeg("RGB", (72, 56), quality=90, subsampling=0, restart_marker_blocks=2),
    _jpeg("RGB", (600, 500), quality=80),  # draft scale 2 for a 224 target
]


def _scan_start(data: bytes) -> int:
    return data.index(b"\xff\xda") + 2


@st.composite
def mutated_headers(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    header_end = _scan_start(bytes(data)) + 12
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "duplicate"]))
        at = draw(st.integers(0, min(header_end, len(data)) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x08, 0x0C, 0x10, 0x43, 0xC0, 0xC2, 0xC4, 0xDA,
                                             0xDB, 0xDD, 0xE0, 0xE1, 0xE2, 0xEE, 0xFE, 0xFF]))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 8))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            length = draw(st.integers(2, 24))
            data[at:at] = data[at:at + length]
    return bytes(data)


def _pillow_route(data: bytes, target: tuple[int, int] | None) -> np.ndarray | None:
    try:
        with Image.open(io.BytesIO(data)) as header:
            return jpeg.decode_rgb(data, header, target, rgbx=True)
    except Exception:  # noqa: BLE001 - any refusal by Pillow's header
        return None


@FUZZ
@given(data=mutated_headers(), target=st.sampled_from([None, (224, 224), (16, 16)]))
def test_header_free_pixels_are_always_pillows_routes_pixels(data: bytes, target: tuple[int, int] | None) -> None:
    plain = jpeg.decode_plain_rgb(data, target, rgbx=True)
    if plain is not None:
        through_pillow = _pillow_route(data, target)
        assert through_pillow is not None, "the header-free path took a file Pillow's route leaves"
        np.testing.assert_array_equal(plain, through_pillow)


def test_the_seeds_take_the_header_free_path() -> None:
    """Otherwise the fuzz above would check nothing."""
    for seed in SEEDS:
        assert jpeg.plain_header(seed) is not None
        np.testing.assert_array_equal(jpeg.decode_plain_rgb(seed, (224, 224)), _pillow_route(seed, (224, 224))[..., :3])


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), cut=st.floats(0.0, 0.995), closed=st.booleans())
def test_a_scan_cut_anywhere_is_refused_by_every_decode_mode(seed: int, cut: float, closed: bool) -> None:
    """Issue 28, item 10: data cut anywhere inside the scan, closed by an end-of-image marker or not,
    never resizes into an image (Pillow would fill the missing rows with grey)."""
    from vsbench.abid.resize import resize_image_bytes

    data = SEEDS[seed]
    sos = data.index(b"\xff\xda")
    start = sos + 2 + ((data[sos + 2] << 8) | data[sos + 3])
    end = start + int((len(data) - 2 - start) * cut)
    if end >= len(data) - 2:
        return
    if closed and any(data[m] == 0xFF and data[m + 1] not in (0x00, 0xFF, *range(0xD0, 0xD8))
                      for m in (end - 1, end)):
        # A progressive file cut at the marker between two of its scans (or after the marker's 0xFF,
        # a legal fill byte) and closed there is a complete JPEG by the standard (fewer scans,
        # coarser detail): libjpeg-turbo and Pillow take it, and so does vsbench.
        return
    damaged = data[:end] + (b"\xff\xd9" if closed else b"")
    for mode in ("full", "draft", "fast"):
        try:
            resize_image_bytes(damaged, 32, decode=mode)
        except ValueError:
            continue
        raise AssertionError(f"{mode}: a scan cut at byte {end} of {len(data)} was resized")
