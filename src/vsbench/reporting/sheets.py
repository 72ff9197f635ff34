"""Pictures of what a model got wrong: a sheet of rows of thumbnails, as a PNG and a self-contained HTML page.

Why: a benchmark number says how often a model is wrong, not how. A person evaluating an
image-matching model wants to look at the queries whose true match fell out of the top k, the
confident false matches, the bins whose count was off by three, and what changed between two runs
(issue 47). Both files go where people already look: the evaluation's MLflow run (its artifact view
shows a PNG and an HTML page) and the HTML report.

A :class:`Sheet` is rows of :class:`Tile` s (an image, caption lines, a mark: the query, a true or a
false match), built by each benchmark family from what its score step holds; this module only
draws it. The bounds are the renderer's, whatever the caller asks:

* thumbnails at most :data:`THUMB` pixels a side, decoded in draft mode (a 20 MP photo costs a
  fraction of a full decode) under the pixel cap of :mod:`vsbench.imaging.limits`;
* at most :data:`MAX_TILES` tiles a row (:data:`MAX_PNG_TILES` in the PNG, so that MLflow draws it
  unscaled) and :data:`MAX_ROWS` rows; the HTML page at most
  :data:`MAX_HTML_BYTES` and the PNG at most :data:`MAX_PNG_ROWS` rows (a PNG taller than a screen
  few times over is not read): rows past a cap are left out and the sheet says how many it shows;
* every id and caption is escaped in the HTML (ids come from datasets), and an image path must lie
  under its benchmark's root (:func:`image_in_root`): a path that leaves it is refused and named, never
  read.

An image that cannot be read (missing, refused, not an image) becomes a grey tile saying why, so a
row is never lost for one bad file.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

THUMB = 128  # pixels, the longer side of a thumbnail
MAX_TILES = 12  # tiles a row: the query and its top k (k above 11 is cut)
# Tiles a row of the PNG: MLflow's artifact view draws an image at most ~880 px wide, and a 12-tile
# sheet (1614 px) shrunk to that made its captions unreadable (issue 57); six tiles are 810 px, drawn
# as they are. The HTML page keeps every tile.
MAX_PNG_TILES = 6
MAX_ROWS = 200  # rows a sheet keeps, whatever a caller asks
MAX_PNG_ROWS = 12  # rows the PNG draws: the overview MLflow shows; the HTML page holds every row (bench/failure_sheets.py)
MAX_HTML_BYTES = 8 * 2**20  # the HTML page's size cap (thumbnails are ~3-6 kB each as JPEG)
CAPTION_LINES = 3
PNG_COMPRESS = 1  # zlib level: a sheet is mostly photos, which level 6 shrinks ~10% more at twice the time
MARKS = {"query": (40, 90, 200), "true": (30, 150, 60), "false": (200, 40, 40), "": (150, 150, 150)}
MARK_WORDS = {"query": "query", "true": "true match", "false": "false match", "": ""}
SHEET_ROWS_ENV = "VSBENCH_FAILURE_ROWS"
DEFAULT_ROWS = 24


@dataclass(frozen=True)
class Tile:
    """One thumbnail: ``image`` (a path already checked to lie under its root, or None when there is
    none to show), the caption's lines (id, score, rank) and its ``mark`` (a key of :data:`MARKS`).
    ``missing`` says why there is no picture (shown in place of it)."""

    image: Path | None
    caption: tuple[str, ...] = ()
    mark: str = ""
    missing: str = ""


@dataclass(frozen=True)
class Row:
    """A row of the sheet: its title (what went wrong, in words) and its tiles, left to right."""

    title: str
    tiles: tuple[Tile, ...]


@dataclass(frozen=True)
class Sheet:
    """A titled list of rows, worst first. ``total`` is how many rows there were to show (the
    sheet says "N of total shown"); ``notes`` are one-line remarks (e.g. paths refused)."""

    title: str
    rows: tuple[Row, ...]
    total: int
    what: str = "failures"  # the rows' noun in the summary line
    notes: tuple[str, ...] = ()
    legend: dict[str, str] = field(default_factory=lambda: dict(MARK_WORDS))


def sheet_rows(rows: int | None = None) -> int:
    """How many rows a failure sheet shows: ``rows``, else ``VSBENCH_FAILURE_ROWS``, else 24; 0 turns the
    sheets off. Raises ValueError naming the variable for a value that is not a count."""
    if rows is None:
        raw = os.environ.get(SHEET_ROWS_ENV, "").strip()
        if not raw:
            return DEFAULT_ROWS
        try:
            rows = int(raw)
        except ValueError:
            raise ValueError(f"{SHEET_ROWS_ENV}={raw[:50]!r} is not a number of rows (0 turns the failure "
                             f"sheets off; default {DEFAULT_ROWS})") from None
    if rows < 0:
        raise ValueError(f"{SHEET_ROWS_ENV}: {rows} rows; give 0 (off) or more")
    return min(rows, MAX_ROWS)


def image_in_root(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> tuple[Path | None, str]:
    """``(path resolved, "")`` when ``path`` (relative to ``root``, or absolute) lies under ``root``
    once symlinks are resolved; else ``(None, why)``. Dataset files name their images: a name like
    ``../../etc/passwd`` or a symlink out of the dataset must not be read into a picture."""
    base = Path(root).resolve()
    candidate = Path(path) if os.path.isabs(path) else base / path
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:
        return None, f"cannot resolve {str(path)[:200]!r} ({exc})"
    if resolved != base and base not in resolved.parents:
        return None, f"{str(path)[:200]!r} lies outside the benchmark's root {base}: not shown"
    return resolved, ""


# --- thumbnails ------------------------------------------------------------------------------------


def thumbnail(path: Path, size: int = THUMB) -> tuple[Any | None, str]:
    """(an RGB Pillow image at most ``size`` a side, "") or (None, why it cannot be shown)."""
    from PIL import Image

    from vsbench.imaging.limits import open_image

    try:
        with open_image(path) as image:
            image.draft("RGB", (size, size))
            picture = image.convert("RGB")
            picture.thumbnail((size, size), Image.Resampling.BILINEAR)
            return picture, ""
    except Exception as exc:  # noqa: BLE001 - any decoder error: one grey tile naming it, not a lost sheet
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"


class _Thumbs:
    """Each image's thumbnail made once per sheet (a reference shown in many rows is read once), and
    once for both files of a sheet and every sheet of one score when the caller passes one along
    (:func:`write_sheet`'s ``thumbs``): the PNG and the HTML page show the same pictures, and the
    records of one evaluation (DISC with and without score normalization) mostly the same images."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._made: dict[Path, tuple[Any | None, str]] = {}
        self.jpeg: dict[Path, str] = {}  # the HTML page's base64 JPEG of each thumbnail

    def get(self, tile: Tile) -> tuple[Any | None, str]:
        if tile.image is None:
            return None, tile.missing or "no image"
        if tile.image not in self._made:
            self._made[tile.image] = thumbnail(tile.image, self.size)
        return self._made[tile.image]


def png_tiles(row: Row) -> tuple[Tile, ...]:
    """The tiles the PNG draws of ``row``: all when they fit :data:`MAX_PNG_TILES`; else the first ones
    and, when the row ends with a true match none of them is (a copy ranked past the results shown),
    that one in the last place: the picture of what the model missed is the point of the row."""
    tiles = row.tiles[:MAX_TILES]
    if len(tiles) <= MAX_PNG_TILES:
        return tiles
    head = tiles[:MAX_PNG_TILES - 1]
    if tiles[-1].mark == "true" and not any(t.mark == "true" for t in head):
        return (*head, tiles[-1])
    return tiles[:MAX_PNG_TILES]


def _summary(sheet: Sheet, shown: int) -> str:
    cut = f"{shown:,} of {sheet.total:,} {sheet.what} shown" if shown < sheet.total else f"all {sheet.total:,} {sheet.what} shown"
    return cut + (", worst first" if sheet.total > 1 else "")


# --- PNG -------------------------------------------------------------------------------------------


def render_png(sheet: Sheet, size: int = THUMB, thumbs: _Thumbs | None = None) -> tuple[bytes, int]:
    """The sheet as PNG bytes and the number of rows drawn (at most :data:`MAX_PNG_ROWS`). ``thumbs``:
    thumbnails already made for this sheet (:func:`write_sheet` shares them with the HTML page)."""
    from PIL import Image, ImageDraw, ImageFont

    font = _font(ImageFont, 11)
    bold = _font(ImageFont, 13)
    # Captions (three lines under each of up to 144 tiles) in Pillow's bitmap font: FreeType took a
    # third of a sheet's time for them (0.3 ms a line against 0.02 ms); titles keep the smoother one.
    small = ImageFont.load_default_imagefont() if hasattr(ImageFont, "load_default_imagefont") else font
    rows = sheet.rows[:MAX_PNG_ROWS]
    lines = max((min(len(t.caption), CAPTION_LINES) for r in rows for t in png_tiles(r)), default=0)
    pad, title_h, caption_h = 6, 18, 13 * lines + 4  # room for the longest caption drawn, no more
    tiles = max((len(png_tiles(r)) for r in rows), default=1)
    cut = any(len(png_tiles(r)) < min(len(r.tiles), MAX_TILES) for r in rows)
    # As wide as the tiles and the text drawn (at most 640 for the text): a sheet of one or two tiles a
    # row is half the pixels, and the PNG's encoding (most of a sheet's cost) half the time.
    header_lines = [(bold, line, "black") for line in _title_lines(sheet.title)]
    header_lines.append((font, _summary(sheet, len(rows)) + (f"; up to {MAX_PNG_TILES} pictures a row (every one on "
                                                              "the HTML page)." if cut else "."), (80, 80, 80)))
    if _legend_text(sheet):
        header_lines.append((font, _legend_text(sheet), (80, 80, 80)))
    texts = [(f, t) for f, t, _ in header_lines] + [(font, row.title[:200]) for row in rows]
    width = max(pad + tiles * (size + pad), min(640, 2 * pad + int(max(f.getlength(t) for f, t in texts))))
    header = len(header_lines) * title_h + pad
    row_h = title_h + size + caption_h + pad
    canvas = Image.new("RGB", (width, header + max(1, len(rows)) * row_h + pad), "white")
    draw = ImageDraw.Draw(canvas)
    for n, (f, text, colour) in enumerate(header_lines):
        draw.text((pad, pad + n * title_h), text, fill=colour, font=f)
    thumbs = thumbs if thumbs is not None and thumbs.size == size else _Thumbs(size)
    for n, row in enumerate(rows):
        top = header + n * row_h
        draw.text((pad, top), row.title[:200], fill="black", font=font)
        for m, tile in enumerate(png_tiles(row)):
            left, y = pad + m * (size + pad), top + title_h
            picture, why = thumbs.get(tile)
            colour = MARKS.get(tile.mark, MARKS[""])
            draw.rectangle((left - 2, y - 2, left + size + 1, y + size + 1), outline=colour, width=3)
            if picture is None:
                draw.rectangle((left, y, left + size - 1, y + size - 1), fill=(225, 225, 225))
                for k, line in enumerate(_wrap(why, 20)[:4]):
                    draw.text((left + 4, y + 4 + 13 * k), line, fill=(90, 90, 90), font=small)
            else:
                canvas.paste(picture, (left + (size - picture.width) // 2, y + (size - picture.height) // 2))
            for k, line in enumerate(tile.caption[:CAPTION_LINES]):
                draw.text((left, y + size + 3 + 13 * k), line[:21], fill=colour if k == 0 else "black", font=small)
    return png_bytes(canvas), len(rows)


def _title_lines(title: str, width: int = 90) -> list[str]:
    """The title in lines of at most ``width`` characters (broken at ``: `` and spaces): the narrow PNG
    must not cut the model or the run id it names."""
    import textwrap

    return [line for part in title[:400].split("\n") for line in textwrap.wrap(part, width) or [""]][:4]


def png_bytes(canvas: Any, level: int = PNG_COMPRESS) -> bytes:
    """An RGB image as PNG bytes: every row with the Sub filter, computed in numpy, then zlib at ``level``.

    Why not Pillow's encoder: it tries each of the five filters on every row, which on a sheet costs
    about as much again as the compression itself; one filter computed at once halves the PNG's time
    (the largest part of a sheet's cost, issue 47's bound) for files a few percent larger. Lossless and
    standard: any PNG reader reads it back exactly (tests/unit/test_failure_sheets_abid_pairs.py)."""
    import struct
    import zlib

    import numpy as np

    pixels = np.asarray(canvas.convert("RGB"), dtype=np.uint8)
    height, width = pixels.shape[:2]
    rows = pixels.reshape(height, width * 3)
    raw = np.empty((height, width * 3 + 1), dtype=np.uint8)
    raw[:, 0] = 1  # filter type Sub: each byte minus the one a pixel to its left (mod 256)
    raw[:, 1:4] = rows[:, :3]
    np.subtract(rows[:, 3:], rows[:, :-3], out=raw[:, 4:])

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), level))
            + chunk(b"IEND", b""))


def _font(image_font: Any, size: int) -> Any:
    try:
        return image_font.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the bitmap font
        return image_font.load_default()


def _legend_text(sheet: Sheet) -> str:
    marks = [f"{MARK_NAMES[m]} = {w}" for m, w in sheet.legend.items() if w and m in MARK_NAMES]
    return ("Frames: " + ", ".join(marks)) if marks else ""


MARK_NAMES = {"query": "blue", "true": "green", "false": "red"}


def _wrap(text: str, width: int) -> list[str]:
    return [text[i:i + width] for i in range(0, len(text), width)] or [""]


# --- HTML ------------------------------------------------------------------------------------------


def render_html(sheet: Sheet, size: int = THUMB, max_bytes: int = MAX_HTML_BYTES,
                thumbs: _Thumbs | None = None) -> tuple[str, int]:
    """The sheet as one self-contained HTML page (thumbnails embedded as JPEG data URIs, every text
    escaped) and the number of rows it holds: rows are added while the page stays under ``max_bytes``."""
    thumbs = thumbs if thumbs is not None and thumbs.size == size else _Thumbs(size)
    encoded = thumbs.jpeg
    parts: list[str] = []
    used = 0
    shown = 0
    for row in sheet.rows:
        cells = []
        for tile in row.tiles[:MAX_TILES]:
            picture, why = thumbs.get(tile)
            if picture is not None and tile.image is not None:
                if tile.image not in encoded:
                    buffer = io.BytesIO()
                    picture.save(buffer, "JPEG", quality=80)
                    encoded[tile.image] = base64.b64encode(buffer.getvalue()).decode("ascii")
                body = f'<img src="data:image/jpeg;base64,{encoded[tile.image]}" alt="{_e(tile.caption[0] if tile.caption else "")}">'
            else:
                body = f'<div class="missing">{_e(why)}</div>'
            caption = "<br>".join(_e(line) for line in tile.caption[:CAPTION_LINES])
            cells.append(f'<figure class="{_e(tile.mark or "other")}">{body}<figcaption>{caption}</figcaption></figure>')
        part = f'<section><h2>{_e(row.title)}</h2><div class="tiles">{"".join(cells)}</div></section>\n'
        if used + len(part) > max_bytes and shown:
            break
        parts.append(part)
        used += len(part)
        shown += 1
    notes = "".join(f"<li>{_e(note)}</li>" for note in sheet.notes)
    legend = " ".join(f'<span class="{_e(m)}">{_e(w)}</span>' for m, w in sheet.legend.items() if w)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(sheet.title)}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }} h2 {{ font-size: 13px; margin: 14px 0 4px; font-weight: 600; }}
.tiles {{ display: flex; flex-wrap: wrap; gap: 8px; }}
figure {{ margin: 0; width: {size + 6}px; }}
figure img, .missing {{ display: block; width: {size}px; height: {size}px; object-fit: contain; border: 3px solid #999; background: #eee; }}
.missing {{ font-size: 11px; color: #555; overflow: hidden; word-break: break-all; }}
figcaption {{ font-size: 11px; line-height: 1.25; word-break: break-all; }}
.query img, .query .missing {{ border-color: #285ac8; }} .true img, .true .missing {{ border-color: #1e963c; }}
.false img, .false .missing {{ border-color: #c82828; }}
.legend span {{ margin-right: 10px; padding: 1px 5px; border: 2px solid #999; }}
.legend .query {{ border-color: #285ac8; }} .legend .true {{ border-color: #1e963c; }} .legend .false {{ border-color: #c82828; }}
</style></head><body>
<h1>{_e(sheet.title)}</h1>
<p>{_e(_summary(sheet, shown))}. <span class="legend">{legend}</span></p>
{f"<ul>{notes}</ul>" if notes else ""}
{"".join(parts)}</body></html>
"""
    return page, shown


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


# --- both files --------------------------------------------------------------------------------------


def write_sheet(sheet: Sheet, folder: str | os.PathLike[str], stem: str, size: int = THUMB,
                thumbs: _Thumbs | None = None) -> dict[str, Any]:
    """Write ``<stem>.png`` and ``<stem>.html`` into ``folder`` (atomically); returns what was written:
    the two paths, their sha256, the rows each shows and the rows there were. ``thumbs``
    (:func:`thumbnails`): the thumbnails made so far, shared by every sheet of one score."""
    from vsbench.io.storage import atomic_write_bytes

    folder = Path(folder)
    thumbs = thumbs if thumbs is not None and thumbs.size == size else _Thumbs(size)
    png, png_rows = render_png(sheet, size, thumbs)
    page, html_rows = render_html(sheet, size, thumbs=thumbs)
    data = page.encode("utf-8")
    written = {}
    for suffix, payload in (("png", png), ("html", data)):
        path = folder / f"{stem}.{suffix}"
        atomic_write_bytes(path, payload)
        written[suffix] = {"path": str(path), "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload)}
    return {"files": written, "rows": {"png": png_rows, "html": html_rows}, "total": sheet.total,
            "title": sheet.title}


def thumbnails(size: int = THUMB) -> _Thumbs:
    """A thumbnail cache to pass to :func:`write_sheet` for every sheet of one score (each image read once)."""
    return _Thumbs(size)


def rank_text(rank: int | None, k: int) -> str:
    """A true match's place in words: ``rank 3`` (1-based), or ``not in the top 10``."""
    return f"rank {rank + 1}" if rank is not None else f"not in the top {k}"



# --- a score step's failure sheet -----------------------------------------------------------------------

FAILURES_DIR = "failures"  # beside the unit files: <out>/failures/<unit file stem>.png|.html


def failure_rows() -> int:
    """:func:`sheet_rows` from the environment for a score step: a value that is not a count is one
    warning and no sheets (a picture never fails a score), said once per step by asking once."""
    try:
        return sheet_rows()
    except ValueError as exc:
        print(f"vsbench: {exc}; no failure sheets", file=sys.stderr)
        return 0


def write_failure_sheet(make: Callable[[], Sheet | None], folder: str | os.PathLike[str], stem: str, what: str, *,
                        base: str | os.PathLike[str] | None = None, size: int = THUMB,
                        thumbs: _Thumbs | None = None) -> dict[str, Any] | None:
    """Build a sheet with ``make`` and write ``<folder>/<stem>.png|.html``: the one writer of every
    failure sheet (a score's records and ABID's tasks). Returns the record's entry ``{"png", "html",
    "rows", "total", "sha256"}`` (paths relative to ``base`` when given, else as written; ``rows``: the
    rows the HTML page shows; ``sha256``: of each file, checked when the run logs them) or None when
    ``make`` has no sheet. Anything that goes wrong is one warning line naming ``what`` and None: the
    score it illustrates stands without it. ``thumbs``: shared by every sheet of one score."""
    try:
        sheet = make()
        if sheet is None:
            return None
        written = write_sheet(sheet, folder, stem, size, thumbs=thumbs)
        paths = {suffix: Path(written["files"][suffix]["path"]) for suffix in ("png", "html")}
        if base is not None:
            paths = {suffix: path.relative_to(base) for suffix, path in paths.items()}
    except Exception as exc:  # noqa: BLE001 - a sheet that cannot be made never fails the score
        print(f"vsbench: {what}: no failure sheet ({type(exc).__name__}: {str(exc)[:300]}; "
              f"{SHEET_ROWS_ENV}=0 turns them off)", file=sys.stderr)
        return None
    return {"png": paths["png"].as_posix(), "html": paths["html"].as_posix(), "rows": written["rows"]["html"],
            "total": sheet.total, "sha256": {kind: written["files"][kind]["sha256"] for kind in ("png", "html")}}
