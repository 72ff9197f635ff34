"""`vsbench.reporting.sheets`' thumbnails, root check and file writer pinned value for value (issue
56: `make mutate` left the thumbnail's mode and reasons, the root check's refusals and the shared
thumbnail cache reached by no test that could fail).

Each test was seen failing with its mutant planted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from vsbench.reporting import sheets
from vsbench.reporting.sheets import Row, Sheet, Tile, image_in_root, thumbnail, write_sheet


def test_a_thumbnail_is_rgb_within_the_size_aspect_kept_with_no_reason(tmp_path: Path) -> None:
    for mode, name in (("L", "grey.png"), ("P", "palette.png"), ("RGBA", "alpha.png"), ("CMYK", "cmyk.jpg"),
                       ("RGB", "wide.jpg")):
        Image.new(mode, (300, 150)).save(tmp_path / name)
        picture, why = thumbnail(tmp_path / name, 64)
        assert why == "" and picture is not None, name
        assert picture.mode == "RGB" and picture.size == (64, 32), (name, picture.mode, picture.size)
    Image.new("RGB", (40, 90), "red").save(tmp_path / "tall.png")
    picture, why = thumbnail(tmp_path / "tall.png", 30)
    assert why == "" and picture.size == (13, 30) and picture.getpixel((6, 15)) == (255, 0, 0)
    small, _ = thumbnail(tmp_path / "tall.png")  # never enlarged
    assert small.size == (40, 90)


def test_a_thumbnail_that_cannot_be_made_names_the_error_in_120_characters(tmp_path: Path) -> None:
    broken = tmp_path / ("x" * 150 + ".jpg")
    broken.write_bytes(b"not a jpeg at all")
    picture, why = thumbnail(broken)
    assert picture is None
    with pytest.raises(Exception) as caught:
        Image.open(broken)
    message = str(caught.value)
    assert len(message) > 120 and why == f"{type(caught.value).__name__}: {message[:120]}"
    picture, why = thumbnail(tmp_path / "absent.jpg")
    assert picture is None and why.startswith("FileNotFoundError: ")


def test_the_root_check_refuses_in_words_naming_the_path_cut_to_200(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    far = "../" + "y" * 250 + ".jpg"
    path, why = image_in_root(root, far)
    assert path is None and why == f"{far[:200]!r} lies outside the benchmark's root {root.resolve()}: not shown"
    loop = "a" * 250
    (root / loop).symlink_to(root / "b")
    (root / "b").symlink_to(root / loop)
    with pytest.raises((OSError, RuntimeError)) as caught:
        (root / loop).resolve()
    assert image_in_root(root, loop) == (None, f"cannot resolve {loop[:200]!r} ({caught.value})")
    assert image_in_root(root, ".") == (root.resolve(), "")  # the root itself is under the root
    (root / "pics").mkdir()
    assert image_in_root(str(root), str(root / "pics" / "p.jpg")) == ((root / "pics" / "p.jpg").resolve(), "")
    assert image_in_root(root, Path("pics") / "p.jpg") == ((root / "pics" / "p.jpg").resolve(), "")
    beside = tmp_path / "data-other"
    beside.mkdir()
    path, why = image_in_root(root, beside / "p.jpg")  # a sibling whose name starts like the root's
    assert path is None and "outside the benchmark's root" in why


def _sheet(root: Path) -> Sheet:
    Image.new("RGB", (200, 100), "blue").save(root / "0.png")
    path, why = image_in_root(root, "0.png")
    return Sheet("t", (Row("r", (Tile(path, ("0",), "query", why),)),), total=1)


def test_the_thumbnail_cache_is_shared_only_at_its_own_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sheet = _sheet(tmp_path)
    made: list[int] = []
    real = sheets.thumbnail

    def counted(path: Path, size: int = sheets.THUMB):
        made.append(size)
        return real(path, size)

    monkeypatch.setattr(sheets, "thumbnail", counted)
    shared = sheets.thumbnails(48)
    first = write_sheet(sheet, tmp_path / "one", "s", size=48, thumbs=shared)
    write_sheet(sheet, tmp_path / "two", "s", size=48, thumbs=shared)
    assert made == [48]  # one picture for both files of both sheets
    other = write_sheet(sheet, tmp_path / "three", "s", size=96, thumbs=shared)
    assert made == [48, 96]  # a cache of another size is not used
    assert first["files"]["png"]["sha256"] != other["files"]["png"]["sha256"]
    with Image.open(tmp_path / "three" / "s.png") as big, Image.open(tmp_path / "one" / "s.png") as small:
        assert big.size[1] > small.size[1]
    write_sheet(sheet, tmp_path / "four", "s", size=48)
    assert made == [48, 96, 48]  # no cache given: its own


def test_write_sheet_says_what_it_wrote(tmp_path: Path) -> None:
    import hashlib

    sheet = _sheet(tmp_path)
    written = write_sheet(sheet, tmp_path / "out", "stem")
    for suffix in ("png", "html"):
        data = (tmp_path / "out" / f"stem.{suffix}").read_bytes()
        assert written["files"][suffix] == {"path": str(tmp_path / "out" / f"stem.{suffix}"),
                                            "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert written["rows"] == {"png": 1, "html": 1} and written["total"] == 1 and written["title"] == "t"
    assert sorted(os.listdir(tmp_path / "out")) == ["stem.html", "stem.png"]
