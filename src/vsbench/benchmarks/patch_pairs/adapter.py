"""Patch-pair classification, HPatches style (seed 003; REFERENCE.md section 3).

Native layout under ``root`` (names configurable, see :func:`load_patch_pairs`)::

    test_pos_easy.pairs  test_pos_hard.pairs  test_neg_diffseq.pairs  test_neg_sameseq.pairs
    patches/<patch id>.png

A pairs file holds ``patch_a,patch_b,label`` lines (no header); the label must be 1 in a positives
file and 0 in a negatives file, so a swapped or mixed file stops the run. Patch ids are paths
relative to the patches folder (``safe_join``: an id cannot leave it).

Evaluation follows the seed: a descriptor (one feature row per patch) gives each pair a distance,
L2 by default or L1 (``distance`` option); the distances become the benchmark's own result files,
``<results_dir>/classification/<descriptor>/<pairs file stem>.results`` with ``distance,label``
lines (written when ``results_dir`` is given, so that ``vsbench score pairs`` and the original
tools can read them); and :mod:`vsbench.benchmarks.patch_pairs.metrics` scores every (easy|hard) x
(diffseq|sameseq) combination: balanced ROC AUC and imbalanced PR AP, plus their mean PR AP, the
HPatches paper's single figure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.benchmarks.base import EvalResult, EvalSettings, Units, option_path
from vsbench.benchmarks.patch_pairs.metrics import PatchPairMetrics, mean_pr_ap, patch_pair_grid
from vsbench.benchmarks.patch_pairs.units import pair_sequences, patch_pair_units
from vsbench.io.features import FeatureSet, ImageSet
from vsbench.io.inputs import InputError, quote, read_lines
from vsbench.io.storage import UnsafePathError, atomic_write_text, safe_join

NAME = "patch_pairs"
IMAGE_SET = "patches"
POSITIVES = {"easy": "pos_easy", "hard": "pos_hard"}  # grid name -> file infix
NEGATIVES = {"diffseq": "neg_diffseq", "sameseq": "neg_sameseq"}
DISTANCES = ("l2", "l1")


@dataclass(frozen=True)
class PairsFile:
    """One ``.pairs`` file: its stem (``test_pos_easy``), the label all its lines carry, the pairs."""

    stem: str
    label: int
    first: tuple[str, ...]
    second: tuple[str, ...]


@dataclass(frozen=True)
class PairDistances:
    """Distances of one pairs file, in file order: the content of its ``.results`` file."""

    stem: str
    label: int
    distances: np.ndarray


def read_pairs(path: Path, label: int) -> PairsFile:
    """``patch_a,patch_b,label`` lines; every label must equal ``label``; blank lines at the end are ignored."""
    lines = read_lines(path)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise InputError(path, "file is empty")
    first, second = [], []
    for number, line in enumerate(lines, start=1):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            raise InputError(path, f"expected 3 fields (patch_a,patch_b,label), found {len(fields)}", number)
        if not fields[0] or not fields[1]:
            raise InputError(path, "empty patch id", number)
        if fields[2] != str(label):
            kind = "positives" if label == 1 else "negatives"
            raise InputError(path, f"label {quote(fields[2])} in a {kind} file (expected {label})", number)
        first.append(fields[0])
        second.append(fields[1])
    return PairsFile(path.name.removesuffix(".pairs"), label, tuple(first), tuple(second))


def pair_distances(features: FeatureSet, pairs: PairsFile, distance: str = "l2") -> PairDistances:
    """Distance between the descriptors of each pair's two patches (float64, so L2 is exact enough to tie)."""
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
    a = features.select(pairs.first, IMAGE_SET).features.astype(np.float64)
    b = features.select(pairs.second, IMAGE_SET).features.astype(np.float64)
    diff = a - b
    values = np.sqrt(np.einsum("ij,ij->i", diff, diff)) if distance == "l2" else np.abs(diff).sum(axis=1)
    return PairDistances(pairs.stem, pairs.label, values)


def write_results(results_dir: Path, descriptor: str, results: Sequence[PairDistances]) -> list[Path]:
    """Write ``<results_dir>/classification/<descriptor>/<stem>.results`` (``distance,label`` lines).

    Distances are written with ``repr`` (shortest round-trip form), so reading a file back gives
    exactly the numbers that were scored.
    """
    if "/" in descriptor or "\\" in descriptor:
        raise UnsafePathError(f"descriptor name must be one path component, got {descriptor!r}")
    folder = safe_join(results_dir / "classification", descriptor)
    written = []
    for result in results:
        path = folder / f"{result.stem}.results"
        atomic_write_text(path, "".join(f"{float(d)!r},{result.label}\n" for d in result.distances))
        written.append(path)
    return written


def curve_figures(grid: Mapping[str, PatchPairMetrics]) -> dict[str, Any]:
    """ROC curves (balanced protocol) and PR curves (imbalanced protocol), one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roc_fig, roc_ax = plt.subplots(figsize=(5, 5))
    pr_fig, pr_ax = plt.subplots(figsize=(5, 5))
    for variant, metrics in grid.items():
        roc_ax.plot(metrics.roc.fpr, metrics.roc.tpr, label=f"{variant} (AUC {metrics.roc.auc:.3f})")
        pr_ax.plot(metrics.pr.recall, metrics.pr.precision, label=f"{variant} (AP {metrics.pr.ap:.3f})")
    roc_ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    roc_ax.set(xlabel="false positive rate", ylabel="true positive rate", xlim=(0, 1), ylim=(0, 1.01),
               title="Patch pairs: ROC (balanced)")
    pr_ax.set(xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.01),
              title="Patch pairs: PR (imbalanced)")
    roc_ax.legend(loc="lower right", fontsize="small")
    pr_ax.legend(loc="lower left", fontsize="small")
    roc_fig.tight_layout()
    pr_fig.tight_layout()
    return {"patch_pairs_roc.png": roc_fig, "patch_pairs_pr.png": pr_fig}


class PatchPairsBenchmark:
    """Adapter: the four pairs files of one split, the patch images they name, and the scorer."""

    name = NAME

    def __init__(self, root: Path, *, split: str = "test", patches: str = "patches", patch_ext: str = ".png",
                 distance: str = "l2", descriptor: str = "descriptor", results_dir: str | Path | None = None,
                 sequence_pattern: str | None = None) -> None:
        if distance not in DISTANCES:
            raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
        self.root = Path(root)
        self.patches_dir = option_path(self.root, patches)
        self.patch_ext = patch_ext
        self.distance = distance
        self.descriptor = descriptor
        self.results_dir = None if results_dir is None else option_path(self.root, results_dir)
        if sequence_pattern is not None:
            re.compile(sequence_pattern)  # a bad pattern stops the load, not the evaluation
        self.sequence_pattern = sequence_pattern
        self.positives = {name: read_pairs(self.root / f"{split}_{infix}.pairs", 1) for name, infix in POSITIVES.items()}
        self.negatives = {name: read_pairs(self.root / f"{split}_{infix}.pairs", 0) for name, infix in NEGATIVES.items()}
        seen: dict[str, Path] = {}
        for pairs in (*self.positives.values(), *self.negatives.values()):
            for patch in (*pairs.first, *pairs.second):
                if patch not in seen:
                    seen[patch] = safe_join(self.patches_dir, patch + patch_ext)
        self._patches = ImageSet(tuple(seen), tuple(seen.values()))

    def image_sets(self) -> dict[str, ImageSet]:
        """Every patch some pairs file names, in order of first appearance."""
        return {IMAGE_SET: self._patches}

    def distances(self, features: FeatureSet) -> list[PairDistances]:
        """Each pairs file's distances under this descriptor (positives files first, as loaded)."""
        features.check_finite(IMAGE_SET)
        return [pair_distances(features, pairs, self.distance)
                for pairs in (*self.positives.values(), *self.negatives.values())]

    def evaluate(self, features: dict[str, FeatureSet], settings: EvalSettings) -> EvalResult:
        """Distances -> (optional) ``.results`` files -> ROC AUC / PR AP per variant and the mean PR AP.

        ``settings`` is unused: pair classification involves no search.
        """
        results = self.distances(features[IMAGE_SET])
        if self.results_dir is not None:
            write_results(self.results_dir, self.descriptor, results)
        by_stem = {r.stem: r.distances for r in results}
        grid = patch_pair_grid({name: by_stem[p.stem] for name, p in self.positives.items()},
                               {name: by_stem[n.stem] for name, n in self.negatives.items()})
        records: list[dict[str, Any]] = [{"variant": variant, "distance": self.distance, **m.as_dict()}
                                         for variant, m in grid.items()]
        records.append({"variant": "mean", "distance": self.distance, "mean_pr_ap": mean_pr_ap(grid)})
        units = self.units(by_stem)
        listed = [units[r["variant"]] for r in records]
        return EvalResult(records=records, figures=curve_figures(grid), units=listed,
                          failure_sheet=lambda index, rows: self.failure_sheet(listed[index], rows))

    def units(self, by_stem: Mapping[str, np.ndarray]) -> dict[str, Units]:
        """Per record variant, its pairs (:mod:`vsbench.benchmarks.patch_pairs.units`), clustered by the
        sequence of each pair's first patch."""
        files = {**self.positives, **self.negatives}
        return patch_pair_units({name: by_stem[p.stem] for name, p in self.positives.items()},
                                {name: by_stem[n.stem] for name, n in self.negatives.items()},
                                clusters={name: pair_sequences(f.first, self.sequence_pattern)
                                          for name, f in files.items()})

    def failure_sheet(self, units: Units, rows: int) -> Any:
        """The record's hardest false positives and false negatives at its 95%-recall threshold, as a
        :class:`~vsbench.reporting.sheets.Sheet` (:mod:`vsbench.benchmarks.patch_pairs.failures`); the
        engine writes it beside the record's unit file. Raises when the patch folder is gone."""
        from vsbench.benchmarks.patch_pairs.failures import pair_failure_sheet

        if not self.patches_dir.is_dir():
            raise FileNotFoundError(f"the patch folder {self.patches_dir} is not there")
        files = {**self.positives, **self.negatives}
        return pair_failure_sheet(units, {name: (f.first, f.second) for name, f in files.items()}, self.patches_dir,
                                  self.patch_ext, rows)



def load_patch_pairs(root: Path, **options: Any) -> PatchPairsBenchmark:
    """Options: ``split`` ("test": the ``<split>_*.pairs`` files), ``patches`` (folder, "patches"),
    ``patch_ext`` (".png"), ``distance`` ("l2" | "l1"), ``descriptor`` (results folder name),
    ``results_dir`` (write ``.results`` files there; none by default), ``sequence_pattern`` (regular
    expression naming a patch id's sequence, which clusters the pairs for intervals; default: see
    :mod:`vsbench.benchmarks.patch_pairs.units`)."""
    return PatchPairsBenchmark(Path(root), **options)
