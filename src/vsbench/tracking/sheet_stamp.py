"""A failure sheet stamped with the MLflow run it is logged to.

Why: a score step draws its sheets before any MLflow run exists (a command uploads its bundle later,
or never), so the sheet's title can name the benchmark, model and variant but not the run. A person
who downloads the PNG or opens the HTML page from the Artifacts tab must still be able to tell which
run it shows (issue 57), so the copy logged to a run gets one more line: ``MLflow run <id>``. The
file on disk keeps the digest the score recorded; only the logged copy is stamped, after that digest
was checked.
"""

from __future__ import annotations

import html
import io
import tempfile
from collections.abc import Callable
from pathlib import Path

STAMP_HEIGHT = 22  # pixels the PNG gains on top


def stamp_words(run_id: str, run_name: str = "") -> str:
    """``MLflow run 0123abcd… (disc · resnet34-random · Flat · none)``: the line a stamped sheet gains."""
    return f"MLflow run {run_id}" + (f" ({run_name})" if run_name else "")


def log_stamped(log: Callable[[str], object], path: Path, data: bytes, run_id: str, run_name: str = "") -> None:
    """Hand ``log`` (an artifact logger taking a local path) a stamped copy of ``path``'s ``data``, under
    the same file name, from a folder removed afterwards."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / Path(path).name
        copy.write_bytes(stamped(copy.name, data, run_id, run_name))
        log(str(copy))


def stamped(name: str, data: bytes, run_id: str, run_name: str = "") -> bytes:
    """``data`` (a sheet file named ``name``) with :func:`stamp_words` added: a line on top of a ``.png``,
    a paragraph under an ``.html`` page's heading (and the run id in its ``<title>``); any other file as
    it is."""
    words = stamp_words(run_id, run_name)
    suffix = Path(name).suffix.lower()
    if suffix == ".html":
        return _stamp_html(data.decode("utf-8"), words, run_id).encode("utf-8")
    if suffix == ".png":
        return _stamp_png(data, words)
    return data


def _stamp_html(page: str, words: str, run_id: str) -> str:
    line = f'<p class="run">{html.escape(words)}</p>'
    head, found, rest = page.partition("</h1>")
    if not found:
        return page.replace("<body>", f"<body>\n{line}", 1)
    title_start, title_found, title_rest = head.partition("<title>")
    if title_found:
        title_text, _, after = title_rest.partition("</title>")
        head = f"{title_start}<title>{title_text} · run {html.escape(run_id)}</title>{after}"
    return f"{head}</h1>\n{line}{rest}"


def _stamp_png(data: bytes, words: str) -> bytes:
    from PIL import Image, ImageDraw, ImageFont

    try:
        with Image.open(io.BytesIO(data)) as original:
            picture = original.convert("RGB")
    except (OSError, ValueError):  # not a picture Pillow reads: logged as the score wrote it, unstamped
        return data
    try:
        font = ImageFont.load_default(size=13)
    except (TypeError, OSError):  # Pillow without FreeType: the bitmap font
        font = ImageFont.load_default()
    width = max(picture.width, int(font.getlength(words)) + 12)
    canvas = Image.new("RGB", (width, picture.height + STAMP_HEIGHT), "white")
    ImageDraw.Draw(canvas).text((6, 5), words, fill=(40, 40, 40), font=font)
    canvas.paste(picture, (0, STAMP_HEIGHT))
    buffer = io.BytesIO()
    canvas.save(buffer, "PNG", compress_level=1)
    return buffer.getvalue()
