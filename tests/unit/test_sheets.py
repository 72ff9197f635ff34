"""The failure-sheet renderer (issue 47): bounded, escaped, never reading outside a benchmark's root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from vsbench.reporting import sheets
from vsbench.reporting.sheets import Row, Sheet, Tile, image_in_root, render_html, render_png, write_sheet


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    (folder / "images").mkdir(parents=True)
    for n, colour in enumerate(("red", "green", "blue")):
        Image.new("RGB", (640, 480), colour).save(folder / "images" / f"{n}.jpg")
    (folder / "images" / "broken.jpg").write_bytes(b"not a jpeg")
    return folder


def _tile(root: Path, name: str, mark: str = "", caption: tuple[str, ...] = ()) -> Tile:
    path, why = image_in_root(root, f"images/{name}")
    return Tile(path, caption or (name,), mark, why)


def test_a_path_outside_the_root_is_refused_and_named(root: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.jpg").write_bytes(b"x")
    os.symlink(tmp_path / "secret.jpg", root / "images" / "link.jpg")
    for name in ("../secret.jpg", str(tmp_path / "secret.jpg"), "images/link.jpg", "images/../../secret.jpg"):
        path, why = image_in_root(root, name)
        assert path is None and "outside the benchmark's root" in why, name
    path, why = image_in_root(root, "images/0.jpg")
    assert path == (root / "images" / "0.jpg").resolve() and why == ""


def test_ids_are_escaped_in_the_page(root: Path) -> None:
    evil = '<script>alert("x")</script>'
    sheet = Sheet(f"failures of {evil}", (Row(f"query {evil}", (_tile(root, "0.jpg", "query", (evil, "0.5")),)),),
                  total=1, notes=(evil,))
    page, shown = render_html(sheet)
    assert shown == 1 and "<script>" not in page and "&lt;script&gt;" in page


def test_an_unreadable_or_refused_image_becomes_a_tile_saying_why(root: Path) -> None:
    sheet = Sheet("t", (Row("r", (_tile(root, "broken.jpg"), Tile(None, ("gone",), "false", "outside the root"))),),
                  total=1)
    page, _ = render_html(sheet)
    assert "UnidentifiedImageError" in page and "outside the root" in page
    png, rows = render_png(sheet)
    assert rows == 1 and png.startswith(b"\x89PNG")


def test_thumbnails_are_bounded_and_each_image_read_once(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Path] = []
    real = sheets.thumbnail

    def counting(path: Path, size: int = sheets.THUMB):
        opened.append(path)
        picture, why = real(path, size)
        assert picture is None or max(picture.size) <= size
        return picture, why

    monkeypatch.setattr(sheets, "thumbnail", counting)
    rows = tuple(Row(f"q{n}", (_tile(root, "0.jpg", "query"), _tile(root, "1.jpg", "true"))) for n in range(5))
    render_html(Sheet("t", rows, total=5))
    assert sorted(p.name for p in opened) == ["0.jpg", "1.jpg"]


def test_sizes_stay_under_the_caps_with_ten_thousand_failures(root: Path, tmp_path: Path) -> None:
    tiles = tuple(_tile(root, f"{n % 3}.jpg", "false", (f"R{n}", "0.99")) for n in range(20))
    rows = tuple(Row(f"query Q{n}: true match not in the top 10", tiles) for n in range(10_000))
    sheet = Sheet("10,000 failures", rows, total=10_000)
    written = write_sheet(sheet, tmp_path / "out", "failures")
    assert written["files"]["html"]["bytes"] <= sheets.MAX_HTML_BYTES + 4096
    assert written["rows"]["png"] == sheets.MAX_PNG_ROWS
    page = Path(written["files"]["html"]["path"]).read_text()
    assert f"{written['rows']['html']:,} of 10,000 failures shown" in page
    assert page.count("<figure") <= written["rows"]["html"] * sheets.MAX_TILES
    with Image.open(written["files"]["png"]["path"]) as png:
        assert png.height < 60 * (sheets.THUMB + 80)


def test_rows_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sheets.SHEET_ROWS_ENV, raising=False)
    assert sheets.sheet_rows() == sheets.DEFAULT_ROWS
    monkeypatch.setenv(sheets.SHEET_ROWS_ENV, "0")
    assert sheets.sheet_rows() == 0
    monkeypatch.setenv(sheets.SHEET_ROWS_ENV, "many")
    with pytest.raises(ValueError, match="VSBENCH_FAILURE_ROWS"):
        sheets.sheet_rows()


def test_every_text_a_sheet_prints_is_escaped_refusal_reasons_included(root: Path) -> None:
    """A missing tile's reason quotes the dataset's own path: it reaches the page escaped, like ids,
    captions, titles, notes and the legend (issue 56: ``_e(why)`` -> ``why`` passed every test)."""
    evil = '../<img src=x onerror=alert(1)>.jpg'
    sheet = Sheet(f"t {evil}", (Row(f"r {evil}", (Tile(None, (evil,), evil, f"{evil} lies outside the root"),)),),
                  total=1, notes=(evil,), legend={evil: evil})
    page, _ = render_html(sheet)
    assert "<img src=x" not in page and "onerror=alert(1)>" not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 6  # title, row, caption, reason, note, legend


def test_a_huge_rows_setting_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sheets.SHEET_ROWS_ENV, "100000")
    assert sheets.sheet_rows() == sheets.MAX_ROWS < 100_000
    assert sheets.sheet_rows(10**9) == sheets.MAX_ROWS
    assert sheets.sheet_rows(7) == 7


def test_the_png_is_narrow_enough_for_mlflow_to_draw_unscaled_and_keeps_the_missed_match(root: Path) -> None:
    """MLflow's Artifacts tab draws an image at most ~880 px wide: a 12-tile PNG (1614 px) was shrunk to
    that and its captions could not be read (issue 57). The PNG draws six tiles a row, the last one the
    true match ranked past them; the HTML page keeps all twelve; a long title wraps, not cut."""
    results = tuple(_tile(root, f"{n % 3}.jpg", "false", (f"result {n}",)) for n in range(10))
    tiles = (_tile(root, "0.jpg", "query", ("the query",)), *results, _tile(root, "1.jpg", "true", ("the copy",)))
    title = "disc · efficientnet_lite0-checkpoint_sscd · PCAW64,L2norm,Flat · 1.00[0,2]: worst queries " * 2
    sheet = Sheet(title.strip(), (Row("query q: copy not in the top 10", tiles),), total=1)
    png, _ = render_png(sheet)
    from io import BytesIO

    with Image.open(BytesIO(png)) as picture:
        assert picture.width <= 880, picture.width
    shown = sheets.png_tiles(sheet.rows[0])
    assert len(shown) == sheets.MAX_PNG_TILES and shown[-1].caption == ("the copy",)
    assert [t.caption[0] for t in shown[1:-1]] == [f"result {n}" for n in range(4)]
    page, _ = render_html(sheet)
    assert page.count("<figure") == 12
    assert sheets._title_lines(title)[-1].endswith("worst queries")  # every word of the title drawn


def test_a_missing_tiles_reason_is_cut_into_lines_of_the_width_asked() -> None:
    """The PNG draws why a tile has no picture in lines of 20 characters, at most four: every
    character kept, in order, an empty reason one empty line (make mutate's sheets survivors in
    ``_wrap``: the reason dropped, slices from the wrong end or start, a wrong step; each planted,
    seen failing, reverted)."""
    why = "cannot be read: FileNotFoundError x"
    assert sheets._wrap(why, 20) == ["cannot be read: File", "NotFoundError x"]
    assert sheets._wrap("abcdefghij", 4) == ["abcd", "efgh", "ij"] and sheets._wrap("abcd", 4) == ["abcd"]
    assert sheets._wrap("", 20) == [""]


def test_a_sheet_that_cannot_be_made_says_why_in_300_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One warning line naming what and why, the error's text cut at 300 characters (make mutate's
    sheets survivor ``[:301]``; planted, seen failing, reverted), and no files."""
    def make() -> Sheet:
        raise ValueError("y" * 299 + "z" + "w" * 100)

    assert sheets.write_failure_sheet(make, tmp_path, "s", "disc Flat") is None
    err = capsys.readouterr().err
    assert err == (f"vsbench: disc Flat: no failure sheet (ValueError: {'y' * 299}z; "
                   f"{sheets.SHEET_ROWS_ENV}=0 turns them off)\n")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_rows_setting_is_one_line_naming_the_variable_and_the_fix(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """What ``VSBENCH_FAILURE_ROWS`` gets when it is not a count: the value quoted (at most 50
    characters), the fix; a negative count refused in words; for a score step one warning line on
    stderr and no sheets (make mutate's sheets survivors: ``[:51]``, ``ValueError(None)``, and
    ``failure_rows``' line dropped, sent to stdout or answering 1; each planted, seen failing, reverted)."""
    monkeypatch.setenv(sheets.SHEET_ROWS_ENV, "x" * 49 + "yz")
    with pytest.raises(ValueError) as caught:
        sheets.sheet_rows()
    assert str(caught.value) == (f"VSBENCH_FAILURE_ROWS={'x' * 49 + 'y'!r} is not a number of rows (0 turns the "
                                 f"failure sheets off; default {sheets.DEFAULT_ROWS})")
    with pytest.raises(ValueError) as caught:
        sheets.sheet_rows(-3)
    assert str(caught.value) == "VSBENCH_FAILURE_ROWS: -3 rows; give 0 (off) or more"
    monkeypatch.setenv(sheets.SHEET_ROWS_ENV, "-1")
    assert sheets.failure_rows() == 0
    said = capsys.readouterr()
    assert said.out == "" and said.err == "vsbench: VSBENCH_FAILURE_ROWS: -1 rows; give 0 (off) or more; no failure sheets\n"
