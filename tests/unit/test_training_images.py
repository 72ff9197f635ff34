"""Training data: a corrupt, truncated or oversized image is found before training, listed, and left
out like a missing one; too many of them fail the run (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.unit.test_resize import bomb_jpeg
from vsbench.abid.data import UNREADABLE_NAME, check_unreadable, image_path, split_available
from vsbench.imaging.limits import TooManyFailures


def test_unreadable_images_are_listed_and_left_out_like_missing_ones(tmp_path: Path) -> None:
    for idx in range(4):
        Image.new("RGB", (32, 32), (idx * 40, 0, 0)).save(image_path(tmp_path, idx), quality=90)
    good = image_path(tmp_path, 1).read_bytes()
    image_path(tmp_path, 1).write_bytes(good[: len(good) // 2])  # truncated
    image_path(tmp_path, 2).write_bytes(bomb_jpeg(30000, 30000))  # a pixel bomb
    unreadable: list[dict] = []
    present, missing = split_available(tmp_path, [0, 1, 2, 3, 4], unreadable, threads=2)
    assert present == [0, 3] and missing == [1, 2, 4]  # 4 has no file at all
    reasons = {u["index"]: u["reason"] for u in unreadable}
    assert set(reasons) == {1, 2} and "truncated" in reasons[1].lower() and "89,478,485-pixel limit" in reasons[2]

    with pytest.raises(TooManyFailures, match=r"train counting: 2 of 4 images \(50\.0%\)"):
        check_unreadable("train counting", tmp_path, unreadable, 4, None, write=True)
    listing = json.loads((tmp_path / UNREADABLE_NAME).read_text())
    assert listing["checked"] == 4 and len(listing["unreadable"]) == 2
    check_unreadable("train counting", tmp_path, unreadable, 4, 0.5, write=False)  # at the threshold: goes on


def test_images_checked_earlier_in_the_run_are_not_decoded_again(tmp_path: Path, monkeypatch) -> None:
    """The siamese scorer's images are mostly training images the run has just decoded."""
    import vsbench.abid.data as data

    for idx in range(3):
        Image.new("RGB", (16, 16)).save(image_path(tmp_path, idx))
    decoded: list[str] = []
    real = data.image_problem
    monkeypatch.setattr(data, "image_problem", lambda path: decoded.append(path.name) or real(path))
    present, missing = split_available(tmp_path, [0, 1, 2, 3], checked={0, 1})
    assert present == [0, 1, 2] and missing == [3]
    assert decoded == [image_path(tmp_path, 2).name]
