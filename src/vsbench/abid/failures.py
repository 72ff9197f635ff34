"""ABID's failure sheets (issue 47): the questions the baselines answered wrong, as pictures.

The score step holds every question's answer and truth; a sheet per task shows the wrong ones with
the bin photos involved, so a person sees *how* the counting network or the siamese network fails
(a crowded bin, a glare, an object hidden under another) without looking ids up by hand:

* counting: the bin photo, its true and predicted count, **largest absolute error first** (ties in
  file order);
* object verification: the two photos of the pair, the bin asked about and the first training bin
  the task file lists as holding the asin (the siamese network compares the bin with such bins), the
  asin, the answer given and the truth, in file order (a 0/1 answer has no "worse");
* quantity verification: the bin photo, the question (asin and the quantity asked), the answer and
  the truth (and the true quantity), in file order.

Images come from the resized images folder (``bin-images-resize/``, ``'%05d.jpg'`` of the 1-based
bin id), each checked to lie under it (:func:`~vsbench.reporting.sheets.image_in_root`: a symlink
out of it is refused and named, never read); an image index that is not a non-negative integer is a
tile saying so. Asins and ids come from the task files: the renderer escapes them. Thumbnails are
:data:`THUMB` pixels: half the resized images' 224, which the JPEG decoder makes directly (draft mode,
no resampling), the cheapest size to show. A tile's caption is its bin; the row's title says the rest
(one line of text a tile: drawing text is a good part of a PNG sheet's cost).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.abid.ids import bin_stem, local_name
from vsbench.abid.readers import read_task_entries
from vsbench.reporting.record_sheets import titled
from vsbench.reporting.sheets import FAILURES_DIR, Row, Sheet, Tile, image_in_root, write_failure_sheet

TASKS = ("counting", "verification", "quantity")
BENCHMARK = "abid"
VARIANT = "moderate"  # the score step scores the moderate task files (classes 0..5)
THUMB = 112
LEGENDS = {"counting": {"false": "the bin counted wrong"},
           "verification": {"query": "the bin asked about", "true": "a training bin holding the asin"},
           "quantity": {"query": "the bin asked about"}}


def _yes(value: Any) -> str:
    return "yes" if int(value) == 1 else "no"


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def bin_label(index: Any) -> str:
    """``bin 00939`` for the task files' 0-based index 938: the bin's own id, the stem of the photo shown
    and of the metadata file that holds its truth (the index itself names the *previous* bin's files)."""
    number = _index(index)
    return f"bin {bin_stem(number + 1)}" if number is not None else f"entry {str(index)[:40]!r}"


def bin_tile(images: Path, index: Any, mark: str) -> Tile:
    """The photo of bin ``index`` (0-based, as the task files count) under ``images``, captioned with
    its id (:func:`bin_label`)."""
    number = _index(index)
    caption = (bin_label(index),)
    if number is None:
        return Tile(None, caption, mark, f"image index {str(index)[:40]!r} is not a bin index")
    path, why = image_in_root(images, local_name(number + 1, "image"))
    return Tile(path, caption, mark, why)


def task_models(counting_arch: str = "", siamese_arch: str = "") -> dict[str, str]:
    """Each task's model as a sheet's title names it: the network that answered it, with its
    architecture where the training step recorded one (``resnet34``, ``siamese-resnet34``): the
    quantity answers are the asin prior capped by the counting network's counts."""
    counting = f"{counting_arch} counting network" if counting_arch else "counting network"
    return {"counting": counting, "verification": f"{siamese_arch or 'siamese'} network",
            "quantity": f"asin prior + {counting}"}


def subject(task: str, models: Mapping[str, str] | None = None) -> str:
    """``abid · resnet34 counting network · moderate``: benchmark, model and variant, which lead every
    ABID sheet's title (issue 57: ``ABID counting: ...`` read the same for every trained network) as
    they lead the retrieval sheets' (:func:`~vsbench.reporting.record_sheets.titled`); the MLflow run
    id is added when the sheet is logged to its run (:mod:`vsbench.tracking.sheet_stamp`)."""
    return " · ".join((BENCHMARK, (models or {}).get(task) or task_models()[task], VARIANT))


def _notes(rows: Sequence[Row]) -> tuple[str, ...]:
    """Each refused path once (at most 5): the sheet says why those tiles are empty."""
    refused = sorted({tile.missing for row in rows for tile in row.tiles if "outside" in tile.missing})
    return tuple(refused[:5])


def counting_sheet(entries: Sequence[Sequence[Any]], answers: np.ndarray, truths: np.ndarray, ids: Sequence[str],
                   images: Path, rows: int) -> Sheet:
    """The bins counted wrong, largest absolute error first."""
    predicted, truth = np.asarray(answers, dtype=np.int64), np.asarray(truths, dtype=np.int64)
    error = predicted - truth
    wrong = np.flatnonzero(error != 0)
    wrong = wrong[np.lexsort((wrong, -np.abs(error[wrong])))]
    shown = []
    for n in wrong[:rows].tolist():
        index, p, t = entries[n][0], int(predicted[n]), int(truth[n])
        shown.append(Row(f"{bin_label(index)}: true count {t}, predicted {p} (off by {abs(p - t)})",
                         (bin_tile(images, index, "false"),)))
    return Sheet("ABID counting: the bins counted wrong", tuple(shown), total=int(wrong.size),
                 what="counting errors", notes=_notes(shown), legend=dict(LEGENDS["counting"]))


def verification_sheet(entries: Sequence[Sequence[Any]], answers: np.ndarray, truths: np.ndarray,
                       ids: Sequence[str], images: Path, rows: int) -> Sheet:
    """The wrong answers to "does this bin hold this asin?", in file order: the bin and a training bin
    holding the asin, side by side."""
    predicted, truth = np.asarray(answers, dtype=np.int64), np.asarray(truths, dtype=np.int64)
    wrong = np.flatnonzero(predicted != truth)
    shown = []
    for n in wrong[:rows].tolist():
        entry = entries[n]
        index, asin = entry[0], str(entry[1])
        targets = entry[3] if len(entry) > 3 and isinstance(entry[3], list) else []
        said, true = _yes(predicted[n]), _yes(truth[n])
        query = bin_tile(images, index, "query")
        reference = (bin_tile(images, targets[0], "true") if targets else
                     Tile(None, ("no training bin",), "true", "the task file lists no training bin with this asin"))
        shown.append(Row(f"is asin {asin} in {bin_label(index)}? said {said}, truth {true} (question {ids[n]})",
                         (query, reference)))
    return Sheet("ABID object verification: the wrong answers", tuple(shown), total=int(wrong.size),
                 what="wrong answers", notes=_notes(shown), legend=dict(LEGENDS["verification"]))


def quantity_sheet(entries: Sequence[Sequence[Any]], answers: np.ndarray, truths: np.ndarray, ids: Sequence[str],
                   images: Path, rows: int) -> Sheet:
    """The wrong answers to "does this bin hold N of this asin?", in file order."""
    predicted, truth = np.asarray(answers, dtype=np.int64), np.asarray(truths, dtype=np.int64)
    wrong = np.flatnonzero(predicted != truth)
    shown = []
    for n in wrong[:rows].tolist():
        entry = entries[n]
        index, asin, held, asked = entry[0], str(entry[1]), entry[3], entry[4]
        said, true = _yes(predicted[n]), _yes(truth[n])
        shown.append(Row(f"{asked} of asin {asin} in {bin_label(index)}? said {said}, truth {true} "
                         f"(holds {held}; question {ids[n]})",
                         (bin_tile(images, index, "query"),)))
    return Sheet("ABID quantity verification: the wrong answers", tuple(shown), total=int(wrong.size),
                 what="wrong answers", notes=_notes(shown), legend=dict(LEGENDS["quantity"]))


SHEETS = {"counting": counting_sheet, "verification": verification_sheet, "quantity": quantity_sheet}


def write_abid_failure_sheets(files: Mapping[str, Path], answers: Mapping[str, np.ndarray],
                              truths: Mapping[str, np.ndarray], ids: Mapping[str, Sequence[str]], images: Path,
                              folder: Path, stems: Mapping[str, str], rows: int,
                              models: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Each task's sheet as ``<folder>/failures/<stems[task]>.png|.html``: task -> the entry
    :func:`~vsbench.reporting.sheets.write_failure_sheet` returns (paths as written). ``files``: the
    task files (read again for the image indices and asins); ``ids``: each task's question ids (its
    unit ids); ``models``: each task's model (:func:`task_models`), which the title names (:func:`subject`).
    None when ``rows`` is 0; an images folder that is not there: one warning line, none."""
    if not rows:
        return {}
    if not Path(images).is_dir():
        print(f"vsbench: abid score: no failure sheets (the images folder {images} is not there)", file=sys.stderr)
        return {}
    def one(task: str) -> dict[str, Any] | None:
        def make() -> Sheet:
            entries = read_task_entries(files[task], task)
            sheet = SHEETS[task](entries, answers[task], truths[task], ids[task], Path(images), rows)
            return titled(sheet, subject(task, models)) or sheet

        return write_failure_sheet(make, Path(folder) / FAILURES_DIR, stems[task], f"abid {task}", size=THUMB)

    tasks = [task for task in TASKS if task in files]
    # The three sheets at once: decoding, drawing and encoding images mostly run outside the GIL.
    with ThreadPoolExecutor(max_workers=len(tasks) or 1, thread_name_prefix="abid-sheet") as pool:
        made = dict(zip(tasks, pool.map(one, tasks)))
    return {task: entry for task, entry in made.items() if entry is not None}
