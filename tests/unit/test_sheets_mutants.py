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


# --- the PNG's layout: where each tile, frame, caption and line of text is drawn, in which colour ---

SIZE, PAD, TITLE_H = 32, 6, 18


def _png_pixels(sheet: Sheet, size: int = SIZE):
    import io

    import numpy as np

    png, rows = sheets.render_png(sheet, size)
    with Image.open(io.BytesIO(png)) as picture:
        assert picture.mode == "RGB"
        return np.asarray(picture), rows


def _colours(pixels, box) -> set[tuple[int, int, int]]:
    left, top, right, bottom = box
    return {tuple(int(v) for v in p) for p in pixels[top:bottom, left:right].reshape(-1, 3)}


def _ink_top(font, text: str) -> int:
    """The first row of ink of ``text`` drawn at (0, 0) in ``font``."""
    import numpy as np
    from PIL import ImageDraw

    canvas = Image.new("RGB", (60, 20), "white")
    ImageDraw.Draw(canvas).text((0, 0), text, fill="black", font=font)
    return int(np.flatnonzero((np.asarray(canvas) == 0).all(axis=2).any(axis=1))[0])


def test_the_png_draws_each_tile_framed_in_its_marks_colour_with_its_picture_centred(tmp_path: Path) -> None:
    colours = {"red": (250, 0, 0), "green": (0, 250, 0), "blue": (0, 0, 250)}
    for name, colour in colours.items():
        Image.new("RGB", (64, 32), colour).save(tmp_path / f"{name}.png")  # thumbnail 32 x 16: centred, 8 px above and below

    def tile(name: str | None, mark: str, caption: tuple[str, ...]) -> Tile:
        path, why = image_in_root(tmp_path, f"{name}.png") if name else (None, "gone")
        return Tile(path, caption, mark, why)

    rows = (Row("first row", (tile("red", "query", ("q1", "0.9")), tile("green", "true", ("t1", "0.8")),
                              tile(None, "false", ("f1", "0.7")))),
            Row("second row", (tile("blue", "", ("o1",)), tile("red", "unknown", ("u1",)))))
    sheet = Sheet("The title", rows, total=5)
    import numpy as np
    from PIL import ImageFont

    small = ImageFont.load_default_imagefont()
    pixels, drawn = _png_pixels(sheet)
    assert drawn == 2
    lines = 2  # the longest caption drawn
    header = 3 * TITLE_H + PAD  # title, summary, legend
    row_h = TITLE_H + SIZE + 13 * lines + 4 + PAD
    assert pixels.shape[0] == header + 2 * row_h + PAD
    assert PAD + 3 * (SIZE + PAD) <= pixels.shape[1] <= 640
    for n, row in enumerate(rows):
        top = header + n * row_h
        assert (0, 0, 0) in _colours(pixels, (PAD, top, PAD + 60, top + TITLE_H)), row.title  # the row's title
        for m, t in enumerate(row.tiles):
            left, y = PAD + m * (SIZE + PAD), top + TITLE_H
            mark = sheets.MARKS.get(t.mark, (150, 150, 150))  # a mark the sheet does not know: grey
            frame = [(left - 2, y - 2), (left - 2, y + SIZE + 1), (left + SIZE + 1, y - 2), (left + SIZE + 1, y + SIZE + 1),
                     (left - 1, y + 5), (left + SIZE, y + 5)]
            if t.image:  # the frame's third, inner ring shows where the picture leaves the tile white (a grey tile covers it)
                frame += [(left, y + 5), (left + SIZE - 1, y + 5), (left + 5, y)]
            assert {tuple(int(v) for v in pixels[b, a]) for a, b in frame} == {mark}, (n, m)  # 3 px wide
            outside = [(left - 3, y + 5), (left + SIZE + 2, y + 5), (left + 5, y - 3)]
            assert {tuple(int(v) for v in pixels[b, a]) for a, b in outside} == {(255, 255, 255)}, (n, m)
            assert tuple(pixels[y + SIZE // 2, left + SIZE // 2]) == (
                colours[t.image.stem] if t.image else (225, 225, 225)), (n, m)
            if t.image:  # the 32 x 16 picture centred: white above and below it
                # (the frame, 3 px wide, covers the tile's outermost pixel)
                assert _colours(pixels, (left + 1, y + 1, left + SIZE - 1, y + 8)) == {(255, 255, 255)}
                assert _colours(pixels, (left + 1, y + 8, left + SIZE - 1, y + 24)) == {colours[t.image.stem]}
                assert _colours(pixels, (left + 1, y + 24, left + SIZE - 1, y + SIZE - 1)) == {(255, 255, 255)}
            else:  # the grey tile, its reason drawn in dark grey at its top left
                assert (225, 225, 225) in _colours(pixels, (left, y, left + SIZE, y + SIZE))
                assert (90, 90, 90) in _colours(pixels, (left + 4, y + 4, left + SIZE, y + 17))
            first = _colours(pixels, (left, y + SIZE + 3, left + SIZE, y + SIZE + 3 + 13))
            assert mark in first and (0, 0, 0) not in first, (n, m)  # the caption's first line in the mark's colour
            if len(t.caption) > 1:
                second = _colours(pixels, (left, y + SIZE + 16, left + SIZE, y + SIZE + 29))
                assert (0, 0, 0) in second and mark not in second, (n, m)
                # the second line's ink starts where the bitmap font puts it, 13 px under the first's
                ink = np.flatnonzero((pixels[y + SIZE + 16:y + SIZE + 29, left:left + SIZE] == 0).all(axis=2).any(axis=1))
                assert ink[0] == _ink_top(small, t.caption[1]), (n, m)
        beyond = PAD + len(row.tiles) * (SIZE + PAD)
        assert _colours(pixels, (beyond, top + TITLE_H - 2, beyond + SIZE, top + TITLE_H + SIZE + 2)) == {(255, 255, 255)}
    assert (0, 0, 0) in _colours(pixels, (PAD, PAD, PAD + 80, PAD + TITLE_H))  # the title in black
    summary = _colours(pixels, (PAD, PAD + TITLE_H, 300, PAD + 2 * TITLE_H))
    assert (80, 80, 80) in summary and min(summary) == (80, 80, 80)  # the summary in grey, nothing darker
    legend = _colours(pixels, (PAD, PAD + 2 * TITLE_H, 300, PAD + 3 * TITLE_H))
    assert (80, 80, 80) in legend and min(legend) == (80, 80, 80)


def test_captions_lines_and_the_legend_take_room_only_when_drawn(tmp_path: Path) -> None:
    Image.new("RGB", (32, 32), "red").save(tmp_path / "r.png")
    path, _ = image_in_root(tmp_path, "r.png")
    for captions, legend, header_lines in ((("a", "b", "c", "d"), None, 3), ((), {}, 2), (("a",), {"true": ""}, 2)):
        kwargs = {} if legend is None else {"legend": legend}
        sheet = Sheet("t", (Row("r", (Tile(path, captions, "query", ""),)),), total=1, **kwargs)
        pixels, _ = _png_pixels(sheet)
        lines = min(len(captions), 3)
        assert pixels.shape[0] == header_lines * TITLE_H + PAD + TITLE_H + SIZE + 13 * lines + 4 + PAD + PAD, captions
    empty, rows = _png_pixels(Sheet("nothing", (), total=0))
    assert rows == 0 and empty.shape[0] == 3 * TITLE_H + PAD + TITLE_H + SIZE + 4 + PAD + PAD


def test_the_png_is_as_wide_as_its_tiles_and_its_title_at_most_four_lines(tmp_path: Path) -> None:
    Image.new("RGB", (32, 32), "red").save(tmp_path / "r.png")
    path, _ = image_in_root(tmp_path, "r.png")
    tiles = tuple(Tile(path, ("c",), "false", "") for _ in range(6))
    wide, _ = _png_pixels(Sheet("t", (Row("r", tiles),), total=1, legend={}), size=128)
    assert wide.shape[1] == PAD + 6 * (128 + PAD)  # wider than any text: the tiles decide
    long_title = " ".join(["word"] * 120)  # 599 characters: cut at 400, seven lines of 90 would be drawn, four are
    assert len(sheets._title_lines(long_title)) == 4
    tall, _ = _png_pixels(Sheet(long_title, (Row("r", tiles[:1]),), total=1, legend={}))
    assert tall.shape[0] == (4 + 1) * TITLE_H + PAD + TITLE_H + SIZE + 13 + 4 + PAD + PAD


def test_a_failure_sheets_entry_names_both_files_its_rows_total_and_digests(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    sheet = _sheet(tmp_path)
    made: list[int] = []
    real = sheets.thumbnail
    monkeypatch.setattr(sheets, "thumbnail", lambda path, size=sheets.THUMB: (made.append(size), real(path, size))[1])
    shared = sheets.thumbnails(48)
    entry = sheets.write_failure_sheet(lambda: sheet, tmp_path / "out" / "failures", "disc.Flat", "disc Flat",
                                       base=tmp_path / "out", size=48, thumbs=shared)
    files = {kind: (tmp_path / "out" / "failures" / f"disc.Flat.{kind}").read_bytes() for kind in ("png", "html")}
    assert entry == {"png": "failures/disc.Flat.png", "html": "failures/disc.Flat.html", "rows": 1, "total": 1,
                     "sha256": {kind: hashlib.sha256(data).hexdigest() for kind, data in files.items()}}
    sheets.write_failure_sheet(lambda: sheet, tmp_path / "again", "s", "disc Flat", size=48, thumbs=shared)
    assert made == [48]  # the score's cache, passed on: one thumbnail for both sheets
    big = sheets.write_failure_sheet(lambda: sheet, tmp_path / "big", "s", "disc Flat", size=96)
    with Image.open(tmp_path / "big" / "s.png") as wide, Image.open(tmp_path / "out" / "failures" / "disc.Flat.png") as narrow:
        assert wide.size[1] - narrow.size[1] == 96 - 48  # the size asked, passed on
    assert big is not None and big["png"] == str(tmp_path / "big" / "s.png")  # no base: as written


# --- the HTML page word for word, the summary, the legend, the PNG's chunks (the third run's survivors) ---


def _page_sheet(tmp_path: Path, total: int = 3) -> Sheet:
    Image.new("RGB", (40, 20), "blue").save(tmp_path / "p.png")
    path, _ = image_in_root(tmp_path, "p.png")
    rows = (Row("row <1>", (Tile(path, ("a<b", "0.5", "x", "dropped"), "query", ""),
                            Tile(None, ("gone & lost",), "", "missing <file>"))),
            Row("row 2", (Tile(path, (), "true", ""), Tile(None, ("c",), "false", ""))))
    return Sheet("Title <t>", rows, total=total, notes=("note <1>", "note 2"))


def test_the_html_page_word_for_word(tmp_path: Path) -> None:
    import base64
    import io
    import re

    sheet = _page_sheet(tmp_path)
    page, shown = sheets.render_html(sheet, size=32)
    assert shown == 2
    images = re.findall(r'src="data:image/jpeg;base64,([^"]+)"', page)
    assert len(images) == 2 and images[0] == images[1]  # one picture, encoded once
    with Image.open(io.BytesIO(base64.b64decode(images[0]))) as thumb:
        assert thumb.format == "JPEG" and thumb.size == (32, 16)
    body = page.split("<body>\n", 1)[1].replace(images[0], "B64")
    assert body == (
        "<h1>Title &lt;t&gt;</h1>\n"
        '<p>2 of 3 failures shown, worst first. <span class="legend"><span class="query">query</span> '
        '<span class="true">true match</span> <span class="false">false match</span></span></p>\n'
        "<ul><li>note &lt;1&gt;</li><li>note 2</li></ul>\n"
        '<section><h2>row &lt;1&gt;</h2><div class="tiles">'
        '<figure class="query"><img src="data:image/jpeg;base64,B64" alt="a&lt;b"><figcaption>a&lt;b<br>0.5<br>x'
        "</figcaption></figure>"
        '<figure class="other"><div class="missing">missing &lt;file&gt;</div><figcaption>gone &amp; lost'
        "</figcaption></figure></div></section>\n"
        '<section><h2>row 2</h2><div class="tiles">'
        '<figure class="true"><img src="data:image/jpeg;base64,B64" alt=""><figcaption></figcaption></figure>'
        '<figure class="false"><div class="missing">no image</div><figcaption>c</figcaption></figure>'
        "</div></section>\n</body></html>\n")
    assert "<title>Title &lt;t&gt;</title>" in page and "figure { margin: 0; width: 38px; }" in page
    assert "width: 32px; height: 32px;" in page


def test_the_page_holds_rows_while_they_fit_and_always_one(tmp_path: Path) -> None:
    sheet = _page_sheet(tmp_path)
    page, _ = sheets.render_html(sheet, size=32)
    parts = [p for p in page.split("\n") if p.startswith("<section>")]
    both = sum(len(p) + 1 for p in parts)  # each section ends with its newline
    assert sheets.render_html(sheet, size=32, max_bytes=both)[1] == 2
    assert sheets.render_html(sheet, size=32, max_bytes=both - 1)[1] == 1
    assert sheets.render_html(sheet, size=32, max_bytes=1)[1] == 1  # the first row whatever its size


def test_the_summary_says_how_many_are_shown_and_worst_first_only_of_several() -> None:
    one = Sheet("t", (), total=1, what="errors")
    assert sheets._summary(one, 1) == "all 1 errors shown"
    assert sheets._summary(Sheet("t", (), total=2), 2) == "all 2 failures shown, worst first"
    assert sheets._summary(Sheet("t", (), total=2), 1) == "1 of 2 failures shown, worst first"
    assert sheets._summary(Sheet("t", (), total=12345), 24) == "24 of 12,345 failures shown, worst first"
    assert sheets._summary(Sheet("t", (), total=0), 0) == "all 0 failures shown"


def test_the_legend_names_each_frames_colour_and_what_it_marks() -> None:
    assert sheets._legend_text(Sheet("t", (), total=1)) == (
        "Frames: blue = query, green = true match, red = false match")
    assert sheets._legend_text(Sheet("t", (), total=1, legend={"true": "right", "false": "", "other": "x"})) == (
        "Frames: green = right")
    assert sheets._legend_text(Sheet("t", (), total=1, legend={})) == ""


def test_a_title_is_wrapped_at_90_characters_on_its_own_lines_cut_at_400() -> None:
    assert sheets._title_lines("") == [""]
    assert sheets._title_lines("a\n\nb") == ["a", "", "b"]
    words = " ".join(["abcdefghi"] * 20)  # 199 characters: lines of 89 (nine words)
    assert sheets._title_lines(words) == [" ".join(["abcdefghi"] * 9)] * 2 + [" ".join(["abcdefghi"] * 2)]
    assert sheets._title_lines("x" * 399 + "yz") == ["x" * 90] * 4  # cut at 400, then four lines
    assert sheets._title_lines("x" * 360 + "\n" + "y" * 10)[-1] == "x" * 90
    assert sheets._title_lines("z" * 399 + "\nw") == ["z" * 90] * 4


def test_the_png_tiles_keep_the_missed_true_match_only_when_none_is_shown() -> None:
    def row(*marks: str) -> Row:
        return Row("r", tuple(Tile(None, (str(n),), mark, "") for n, mark in enumerate(marks)))

    shown_true = row("query", "false", "true", "false", "false", "false", "false", "true")
    assert [t.caption[0] for t in sheets.png_tiles(shown_true)] == ["0", "1", "2", "3", "4", "5"]
    missed = row("query", "false", "false", "false", "false", "false", "false", "true")
    assert [t.caption[0] for t in sheets.png_tiles(missed)] == ["0", "1", "2", "3", "4", "7"]
    no_true = row("query", *["false"] * 7)
    assert [t.caption[0] for t in sheets.png_tiles(no_true)] == ["0", "1", "2", "3", "4", "5"]
    six = row("query", *["false"] * 5)
    assert len(sheets.png_tiles(six)) == 6


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    out, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, payload = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + payload), kind
        out.append((kind, payload))
        at += 12 + length
    return out


def test_the_png_is_three_standard_chunks_of_8_bit_rgb_without_interlace() -> None:
    import struct
    import zlib

    import numpy as np

    canvas = Image.new("L", (3, 2), 7)  # not RGB: written as RGB
    canvas.putpixel((2, 1), 200)
    chunks = _chunks(sheets.png_bytes(canvas))
    assert [kind for kind, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"] and chunks[2][1] == b""
    assert chunks[0][1] == struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0)
    assert chunks[1][1][:2] == b"\x78\x01"  # zlib's header: the fastest level (PNG_COMPRESS = 1), a speed choice
    raw = np.frombuffer(zlib.decompress(chunks[1][1]), dtype=np.uint8).reshape(2, 1 + 9)
    assert raw[:, 0].tolist() == [1, 1]  # the Sub filter on every row
    assert raw[1, 1:].tolist() == [7, 7, 7, 0, 0, 0, 193, 193, 193]  # each byte minus its left neighbour's
    with Image.open(__import__("io").BytesIO(sheets.png_bytes(canvas))) as back:
        assert back.mode == "RGB" and back.getpixel((2, 1)) == (200, 200, 200) and back.getpixel((0, 0)) == (7, 7, 7)


def _drawn(size: tuple[int, int], lines: list[tuple[tuple[int, int], str, object]], font, background) -> object:
    """What drawing these lines gives: the expected pixels of a region, drawn here on their own."""
    import numpy as np
    from PIL import ImageDraw

    canvas = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(canvas)
    for where, text, colour in lines:
        draw.text(where, text, fill=colour, font=font)
    return np.asarray(canvas)


def test_a_grey_tile_covers_the_frames_inner_ring_and_says_why_in_four_lines_of_20(tmp_path: Path) -> None:
    import numpy as np
    from PIL import ImageFont

    size = 64
    why = "".join(chr(ord("a") + n % 26) for n in range(100))  # five lines of 20: four drawn
    sheet = Sheet("t", (Row("r", (Tile(None, ("c",), "false", why),)),), total=1, legend={})
    pixels, _ = _png_pixels(sheet, size)
    header = 2 * TITLE_H + PAD
    left, y = PAD, header + TITLE_H
    red = sheets.MARKS["false"]
    assert tuple(pixels[y + size // 2, left + size - 1]) == (225, 225, 225)  # the fill over the inner ring
    assert tuple(pixels[y + size - 1, left + 40]) == (225, 225, 225)
    assert tuple(pixels[y + size, left + 40]) == red and tuple(pixels[y + size + 1, left + 40]) == red
    assert tuple(pixels[y + size + 2, left + 40]) == (255, 255, 255)  # the frame ends there
    small = ImageFont.load_default_imagefont()
    lines = [((4, 4 + 13 * k), why[20 * k:20 * k + 20], (90, 90, 90)) for k in range(4)]
    expected = _drawn((size, size), lines, small, (225, 225, 225))
    assert np.array_equal(pixels[y:y + size - 1, left + 1:left + size - 1], expected[:size - 1, 1:size - 1])


def test_a_picture_narrower_than_the_tile_is_centred_across_it(tmp_path: Path) -> None:
    Image.new("RGB", (16, 32), (0, 250, 0)).save(tmp_path / "tall.png")  # thumbnail 16 x 32
    path, _ = image_in_root(tmp_path, "tall.png")
    pixels, _ = _png_pixels(Sheet("t", (Row("r", (Tile(path, ("c",), "true", ""),)),), total=1, legend={}))
    y, left = 2 * TITLE_H + PAD + TITLE_H, PAD
    assert _colours(pixels, (left + 8, y + 1, left + 24, y + SIZE - 1)) == {(0, 250, 0)}
    assert _colours(pixels, (left + 1, y + 1, left + 8, y + SIZE - 1)) == {(255, 255, 255)}
    assert _colours(pixels, (left + 24, y + 1, left + SIZE - 1, y + SIZE - 1)) == {(255, 255, 255)}


def test_a_caption_line_is_cut_at_21_characters(tmp_path: Path) -> None:
    import numpy as np
    from PIL import ImageFont

    size = 160  # room for 30 characters: the cut is the code's, not the tile's
    caption = ("Q" * 30, "0123456789" * 3)
    sheet = Sheet("t", (Row("r", (Tile(None, caption, "query", "x"),)),), total=1, legend={})
    pixels, _ = _png_pixels(sheet, size)
    y, left = 2 * TITLE_H + PAD + TITLE_H, PAD
    small = ImageFont.load_default_imagefont()
    blue = sheets.MARKS["query"]
    expected = _drawn((size, 26), [((0, 0), "Q" * 21, blue), ((0, 13), "0123456789" * 2 + "0", (0, 0, 0))], small, "white")
    assert np.array_equal(pixels[y + size + 3:y + size + 29, left:left + size], expected)


def test_the_header_lines_say_what_is_shown_in_their_fonts_and_colours(tmp_path: Path) -> None:
    import numpy as np
    from PIL import ImageFont

    font, bold = sheets._font(ImageFont, 11), sheets._font(ImageFont, 13)
    tiles = tuple(Tile(None, (str(n),), "false", "x") for n in range(8))
    cut = Sheet("A title", (Row("r", tiles),), total=3)
    uncut = Sheet("A title", (Row("r", tiles[:6]),), total=1)
    summaries = {id(cut): "1 of 3 failures shown, worst first; up to 6 pictures a row (every one on the HTML page).",
                 id(uncut): "all 1 failures shown."}
    for sheet in (cut, uncut):
        pixels, _ = _png_pixels(sheet, 128)
        width = pixels.shape[1]
        lines = ((bold, "A title", "black"), (font, summaries[id(sheet)], (80, 80, 80)),
                 (font, "Frames: blue = query, green = true match, red = false match", (80, 80, 80)))
        for n, (f, text, colour) in enumerate(lines):
            expected = _drawn((width, TITLE_H), [((PAD, 0), text, colour)], f, "white")
            assert np.array_equal(pixels[PAD + n * TITLE_H:PAD + (n + 1) * TITLE_H], expected), text


def test_the_png_is_as_wide_as_its_longest_text_up_to_640(tmp_path: Path) -> None:
    from PIL import ImageFont

    font, bold = sheets._font(ImageFont, 11), sheets._font(ImageFont, 13)
    short = Sheet("T", (Row("a row title of some length", ()),), total=1, legend={})
    pixels, _ = _png_pixels(short, 16)
    assert pixels.shape[1] == 2 * PAD + int(max(font.getlength("a row title of some length"),
                                                font.getlength("all 1 failures shown."), bold.getlength("T")))
    long = Sheet("T", (Row("w" * 300, ()),), total=1, legend={})
    assert _png_pixels(long, 16)[0].shape[1] == 640
