"""A JPEG whose scan ends early but which is closed by an end-of-image marker (issue 28, item 10).

Pillow decodes such a file without a word and fills the missing rows with grey (a 49 KB file
declaring 9000x9000 came out 99% grey); libjpeg-turbo only warns. Every path that decodes images
refuses it with its reason: the resize step in its three decode modes (and its manifest), the
embedding loader (both decoders) and the training's decode-once check. Good files are unchanged.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vsbench.abid.data import image_problem
from vsbench.abid.resize import MANIFEST_NAME, resize_abid, resize_image_bytes
from vsbench.imaging import jpeg
from vsbench.models.registry import Preprocessing
from vsbench.retrieval.embed import load_image, load_image_pillow

MODES = ("full", "draft", "fast")
EOI = b"\xff\xd9"


def _photo(width: int, height: int, *, progressive: bool = False) -> bytes:
    """A real-sized, photo-like JPEG (gradients and noise) at quality 90."""
    rng = np.random.default_rng(width + height)
    x, y = np.linspace(0, 255, width), np.linspace(0, 255, height)
    pixels = np.stack([np.add.outer(y * 0.6, x * 0.4), np.add.outer(y * 0.2, x * 0.8),
                       np.add.outer(y * 0.9, x * 0.1)], axis=-1) % 256
    pixels = (pixels + rng.integers(0, 40, pixels.shape)).clip(0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90, progressive=progressive)
    return buffer.getvalue()


def _scan_start(data: bytes) -> int:
    """The first byte after the start-of-scan header."""
    sos = data.index(b"\xff\xda")
    return sos + 2 + ((data[sos + 2] << 8) | data[sos + 3])


PHOTOS = {"1000x800": _photo(1000, 800), "3000x2000": _photo(3000, 2000),
          "1000x800 progressive": _photo(1000, 800, progressive=True)}
OFFSETS = ("after the header", 0.10, 0.50, 0.90, 0.99)


def _cut(data: bytes, where: str | float) -> bytes:
    """The photo's data up to ``where``, then an end-of-image marker: a valid header, a short scan."""
    end = _scan_start(data) + 16 if where == "after the header" else int(len(data) * float(where))
    return data[:end] + EOI


CASES = [(photo, where) for photo in PHOTOS for where in OFFSETS]


@pytest.mark.parametrize(("photo", "where"), CASES)
@pytest.mark.parametrize("mode", MODES)
def test_resize_refuses_a_scan_that_ends_early_in_every_mode(photo: str, where: str | float, mode: str) -> None:
    with pytest.raises(ValueError, match="truncated JPEG data: the scan ends before the last row"):
        resize_image_bytes(_cut(PHOTOS[photo], where), 224, decode=mode)


@pytest.mark.parametrize("photo", list(PHOTOS))
def test_whole_files_still_resize_to_the_same_bytes_as_before(photo: str) -> None:
    """check_complete runs after Pillow's decode and changes no pixel: the challenge's loop is kept."""
    data = PHOTOS[photo]
    expected = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("RGB").resize((224, 224), Image.Resampling.BILINEAR).save(
        expected, format="JPEG", quality=75)
    assert resize_image_bytes(data, 224, decode="full") == expected.getvalue()
    for mode in ("draft", "fast"):
        resize_image_bytes(data, 224, decode=mode)
    jpeg.check_complete(data)


def test_a_file_without_its_end_marker_keeps_pillows_reason() -> None:
    with pytest.raises(ValueError, match="corrupt or truncated JPEG: image file is truncated"):
        resize_image_bytes(PHOTOS["1000x800"][:-2], 224, decode="full")


def test_the_resize_step_lists_each_with_its_reason_and_counts_it(tmp_path: Path) -> None:
    images = tmp_path / "data" / "bin-images"
    images.mkdir(parents=True)
    (images / "1.jpg").write_bytes(PHOTOS["1000x800"])
    for number, where in enumerate(OFFSETS, start=2):
        (images / f"{number}.jpg").write_bytes(_cut(PHOTOS["1000x800"], where))
    for mode in MODES:
        out = tmp_path / mode
        summary = resize_abid(tmp_path / "data", out, decode=mode, workers=1, progress=False, max_failure_rate=1.0)
        assert (summary.inputs, summary.resized, summary.failed) == (6, 1, 5), mode
        reasons = {f["file"]: f["reason"] for f in json.loads((out / MANIFEST_NAME).read_text())["failures"]}
        assert sorted(reasons) == [f"bin-images/{n}.jpg" for n in range(2, 7)]
        assert all(reason.startswith("truncated JPEG data") for reason in reasons.values()), reasons
        assert sorted(p.name for p in out.glob("*.jpg")) == ["00001.jpg"]


@pytest.mark.parametrize("loader", [load_image, load_image_pillow])
@pytest.mark.parametrize("where", OFFSETS)
def test_embedding_refuses_it(tmp_path: Path, loader, where: str | float) -> None:
    path = tmp_path / "cut.jpg"
    path.write_bytes(_cut(PHOTOS["1000x800"], where))
    with pytest.raises(ValueError, match="truncated JPEG data"):
        loader(path, Preprocessing(224, 256, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
    whole = tmp_path / "whole.jpg"
    whole.write_bytes(PHOTOS["1000x800"])
    assert loader(whole, Preprocessing(224, 256, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))).shape == (224, 224, 3)


@pytest.mark.parametrize("where", OFFSETS)
def test_training_leaves_it_out_with_its_reason(tmp_path: Path, where: str | float) -> None:
    resized = io.BytesIO()
    Image.open(io.BytesIO(PHOTOS["1000x800"])).convert("RGB").resize((224, 224)).save(resized, format="JPEG")
    path = tmp_path / "00001.jpg"
    path.write_bytes(_cut(resized.getvalue(), where))
    assert "runcated" in image_problem(path)  # ours, or Pillow's own "Truncated File Read" where it sees it
    path.write_bytes(resized.getvalue())
    assert image_problem(path) == ""
