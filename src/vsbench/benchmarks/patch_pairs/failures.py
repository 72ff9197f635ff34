"""The patch-pair failure sheet (issue 47): the hardest false positives and false negatives of one record.

A patch-pair descriptor is used by thresholding a distance, so its failures are pairs on the wrong
side of a threshold. The threshold shown is the run's own operating point at **95% recall**, the one
HPatches-style FPR95 reads: the smallest distance under which (at or under) 95% of the record's
matching pairs fall, computed from the record's own pair distances (its unit file). At that
threshold

* a *false positive* is a non-matching pair at or under it: hardest first, smallest distance first;
* a *false negative* is a matching pair over it (the 5% the operating point gives up): hardest
  first, largest distance first.

Ties keep the unit file's order (file, then line), so a sheet is the same for the same distances.
The sheet shows each pair's two patches side by side, its distance and the threshold; about half its
rows are false positives and half false negatives (the other kind fills rows one kind cannot).

The images are the adapter's patch files, ``<patches>/<patch id><ext>`` (one file per patch, so no
crop is needed), each checked to lie under the patches folder (:func:`~vsbench.reporting.sheets.image_in_root`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vsbench.reporting.sheets import Row, Sheet, Tile, image_in_root
from vsbench.stats.units import Units

RECALL = 0.95
LEGEND = {"false": "false positive: not a match, at or under the threshold",
          "true": "false negative: a match, over the threshold"}


def recall_threshold(positives: np.ndarray, recall: float = RECALL) -> float:
    """The smallest distance at or under which ``recall`` of the matching pairs lie (FPR95's threshold)."""
    ordered = np.sort(np.asarray(positives, dtype=np.float64))
    return float(ordered[max(0, math.ceil(recall * ordered.size) - 1)])


def hardest(units: Units) -> tuple[float, np.ndarray, np.ndarray]:
    """(threshold, false positives hardest first, false negatives hardest first): row positions in ``units``.
    Raises ValueError when the record has no matching pair (no recall, no threshold)."""
    distance = np.asarray(units.columns["distance"], dtype=np.float64)
    label = np.asarray(units.columns["label"])
    order = np.arange(distance.size)
    if not (label == 1).any():
        raise ValueError("no matching pair: no threshold at 95% recall")
    threshold = recall_threshold(distance[label == 1])
    fp = order[(label == 0) & (distance <= threshold)]
    fn = order[(label == 1) & (distance > threshold)]
    fp = fp[np.lexsort((fp, distance[fp]))]  # smallest distance first, then unit order
    fn = fn[np.lexsort((fn, -distance[fn]))]  # largest distance first, then unit order
    return threshold, fp, fn


def _quota(fp: int, fn: int, rows: int) -> tuple[int, int]:
    """Rows for each kind: half each (false positives get the odd one), the other kind filling in."""
    take_fp = min(fp, max(rows - rows // 2, rows - fn))
    return take_fp, min(fn, rows - take_fp)


def pair_failure_sheet(units: Units, pairs: Mapping[str, tuple[Sequence[str], Sequence[str]]], patches: Path,
                       ext: str, rows: int) -> Sheet:
    """The sheet of one record: ``pairs`` maps each pairs file's grid name (the units' ``set``) to its
    (first patches, second patches) in file order; ``patches`` is the folder the patch files are in."""
    threshold, fp, fn = hardest(units)
    take_fp, take_fn = _quota(fp.size, fn.size, rows)
    sets, lines = units.columns["set"], units.columns["line"]
    distance = units.columns["distance"]
    refused: list[str] = []

    def tile(patch: str, mark: str, caption: tuple[str, ...]) -> Tile:
        path, why = image_in_root(patches, f"{patch}{ext}")
        if why:
            refused.append(why)
        return Tile(path, (patch, *caption), mark, why)

    def row(position: int, kind: str, rank: int, count: int) -> Row:
        name, line = str(sets[position]), int(lines[position])
        first, second = pairs[name][0][line - 1], pairs[name][1][line - 1]
        d = float(distance[position])
        side = "<=" if kind == "false positive" else ">"
        mark = "false" if kind == "false positive" else "true"
        title = (f"{kind} {rank} of {count}: {first} / {second}, distance {d:.4f} {side} threshold "
                 f"{threshold:.4f} ({name} line {line})")
        return Row(title, (tile(first, mark, (f"distance {d:.4f}", f"{name}:{line}")),
                           tile(second, mark, (f"threshold {threshold:.4f}", kind))))

    shown = [row(int(p), "false positive", n + 1, fp.size) for n, p in enumerate(fp[:take_fp])]
    shown += [row(int(p), "false negative", n + 1, fn.size) for n, p in enumerate(fn[:take_fn])]
    matching = int((np.asarray(units.columns["label"]) == 1).sum())
    notes = (f"threshold {threshold:.6g}: the distance at 95% recall of this record's {matching:,} matching pairs "
             "(FPR95's operating point); a pair at or under it is called a match. "
             f"{fp.size:,} false positives, {fn.size:,} false negatives.", *sorted(set(refused))[:5])
    title = " ".join(part for part in ("patch pairs", units.variant) if part)
    return Sheet(f"{title}: hardest false positives and false negatives", tuple(shown), total=int(fp.size + fn.size),
                 what="misclassified pairs", notes=notes, legend=dict(LEGEND))
