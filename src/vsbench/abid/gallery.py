"""ABID by embeddings: the object-verification task and asin retrieval answered by an image model's
features alone, with no network trained (REFERENCE.md section 1; the siamese baseline is the
trained counterpart in :mod:`vsbench.abid.siamese`).

``root`` is an ABID data root: ``tasks/`` written by ``vsbench abid prepare`` and the images in
``bin-images-resize/`` (``'%05d.jpg'``) or, when that folder is absent, ``raw/bin-images/`` (either
spelling of the id). Options ``tasks`` and ``images`` point elsewhere.

**Verification.** A question ``[idx, asin, label, targets]`` asks whether the validation bin
``idx`` holds ``asin``; ``targets`` are the training bins known to hold it. As in the siamese
baseline, up to ``max_targets`` (20) of them whose image exists are chosen with
:func:`vsbench.abid.siamese.choose_targets` (seeded per question). The question's similarity is
the **mean** cosine between the bin and its chosen targets, and the answer is yes iff it exceeds
a threshold. Mean rather than max: every target bin holds the asin among ~4 other items, so one
target can look like the bin by chance, and the max of up to 20 such chances grows with the
number of targets, turning asins seen in many bins into "yes" regardless of the bin; the mean
does not drift with the count, so one threshold serves every question.

**Threshold, chosen on the training split, without training anything.** Calibration questions
are built from the training bins the way the validation questions are: positives from
``obj_verification_train.json`` (a bin, one of its asins, the other training bins holding it),
negatives a bin with an asin (drawn from those same rows' asins) that its metadata shows it does
not hold, with that asin's training bins as targets; ``calibration_questions`` of each (seeded),
scored exactly like validation questions. The threshold is the accuracy-maximizing one on them
(lowest such; midway between neighbouring scores). A question whose bin image or every target
image is missing is answered "no" (as in the siamese baseline) and counted in ``num_unanswerable``.
Scores: :func:`vsbench.abid.metrics.verification_metrics`.

**Asin retrieval.** Each validation bin asked about ranks the *gallery*, the training bins that
any validation question lists as a target (image present), by cosine (``vsbench.index.search``,
``L2norm,Flat``); relevant = gallery bins sharing at least one asin with it (metadata). AP per
query is sklearn's ``average_precision_score`` over the whole gallery (tied scores form one
threshold); the ranking stops after ``retrieval_k`` (1000 by default: a full ABID gallery has
~10^5 bins, and queries x gallery scores would not fit in memory) and relevant bins beyond it add
nothing (the number of relevant bins still counts all of them); ``retrieval_k=None`` ranks the
whole gallery, which is exactly sklearn's AP. Queries with no relevant bin in the gallery are left
out of the mean and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vsbench.abid.ids import RESIZED_DIR, local_name
from vsbench.abid.metrics import verification_metrics
from vsbench.abid.prepare import draw_absent
from vsbench.abid.readers import read_verification_ground_truth
from vsbench.benchmarks.base import EvalResult, EvalSettings, SearchedBenchmark, option_path, unit_rows
from vsbench.io.features import FeatureSet, ImageSet
from vsbench.io.inputs import InputError, read_json

if TYPE_CHECKING:
    from vsbench.index.plan import SearchRequest, SearchResults

NAME = "abid_embeddings"
IMAGE_SET = "bins"
RAW_IMAGES = "raw/bin-images"


@dataclass(frozen=True)
class Question:
    """A yes/no question ready to score: the bin, the answer, and the chosen target bins."""

    bin: int  # 0-based index
    label: int
    targets: tuple[int, ...]  # empty: unanswerable (missing images), answered "no"


def bin_id(idx0: int) -> str:
    """Feature id of a bin: the challenge's file stem, ``'%05d' % (idx0 + 1)``."""
    return local_name(idx0 + 1, "image").removesuffix(".jpg")


def find_bin_image(images_dir: Path, idx0: int) -> Path | None:
    """The bin's image: ``'%05d.jpg'`` (resized and padded raw keys) or ``'<id>.jpg'`` (plain raw keys)."""
    for name in (local_name(idx0 + 1, "image"), f"{idx0 + 1}.jpg"):
        if (images_dir / name).is_file():
            return images_dir / name
    return None


def asins_by_bin(metadata: Sequence[Any]) -> list[frozenset[str]]:
    """The asins each bin's metadata lists (the ``asin`` field: dict keys are not always asins)."""
    out = []
    for entry in metadata:
        items = entry.get("BIN_FCSKU_DATA", {}) if isinstance(entry, dict) else {}
        out.append(frozenset(item["asin"] for item in items.values()
                             if isinstance(item, dict) and isinstance(item.get("asin"), str)))
    return out


def accuracy_threshold(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(threshold, accuracy) maximizing the accuracy of ``score > threshold`` as the answer "yes".

    Candidates lie below every score, midway between neighbouring distinct scores, and at the top
    score (everything "no"); the lowest best one wins, so the result does not depend on input order.
    """
    order = np.argsort(scores, kind="stable")
    s, y = scores[order], labels[order].astype(bool)
    distinct = np.unique(s)
    candidates = np.concatenate([[distinct[0] - 1.0], (distinct[:-1] + distinct[1:]) / 2.0, [distinct[-1]]])
    at_or_below = np.searchsorted(s, candidates, side="right")
    negatives_below = np.concatenate([[0], np.cumsum(~y)])[at_or_below]
    positives_above = int(y.sum()) - (at_or_below - negatives_below)
    correct = negatives_below + positives_above
    best = int(np.argmax(correct))
    return float(candidates[best]), float(correct[best] / s.size)


def ranked_average_precision(scores: np.ndarray, relevant: np.ndarray, num_relevant: int) -> float:
    """sklearn's AP over a ranking sorted by descending score, tied scores as one threshold.

    ``num_relevant`` counts relevant items beyond the ranking too (a truncated ranking); over the
    whole collection this equals ``sklearn.metrics.average_precision_score``.
    """
    last_of_group = np.concatenate([np.flatnonzero(np.diff(scores) != 0), [scores.size - 1]])
    tp = np.cumsum(relevant)[last_of_group]
    precision = tp / (last_of_group + 1)
    recall = tp / num_relevant
    return float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))


def _indices(path: Path, number: int, values: Any, what: str, limit: int) -> list[int]:
    """``values`` checked as a list of 0-based bin indices that ``metadata.json`` has entries for."""
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < limit
                                               for v in values):
        raise InputError(path, f"entry {number}: {what} must be bin indices in 0..{limit - 1} (metadata.json)")
    return values


class AbidEmbeddingsBenchmark(SearchedBenchmark):
    """Adapter: validation questions, calibration questions and the retrieval gallery over ABID bins."""

    name = NAME

    def __init__(self, root: Path, *, tasks: str | Path = "tasks", images: str | Path | None = None,
                 hard: bool = False, max_targets: int = 20, seed: int = 0, calibration_questions: int = 1000,
                 retrieval_k: int | None = 1000) -> None:
        # Imported here: vsbench.abid.siamese brings in torch, which registering the adapters must not.
        from vsbench.abid.siamese import choose_targets

        if max_targets < 1 or calibration_questions < 1 or (retrieval_k is not None and retrieval_k < 1):
            raise ValueError("max_targets, calibration_questions and retrieval_k must be positive")
        self.root = Path(root)
        tasks_dir = option_path(self.root, tasks)
        if images is None:
            resized = self.root / RESIZED_DIR
            images_dir = resized if resized.is_dir() else self.root / RAW_IMAGES
        else:
            images_dir = option_path(self.root, images)
        self.task = "hard" if hard else "moderate"
        self.retrieval_k = retrieval_k
        suffix = "_hard" if hard else ""

        metadata = read_json(tasks_dir / "metadata.json")
        if not isinstance(metadata, list):
            raise InputError(tasks_dir / "metadata.json", "expected a list with one entry per bin")
        self.asins = asins_by_bin(metadata)
        n_bins = len(metadata)
        val_path = tasks_dir / f"obj_verification_val{suffix}.json"
        labels = read_verification_ground_truth(val_path)
        val = read_json(val_path)
        val_rows = [(_indices(val_path, n, [e[0]], "image index", n_bins)[0], int(labels[n - 1]),
                     _indices(val_path, n, e[3] if len(e) > 3 else None, "targets", n_bins))
                    for n, e in enumerate(val, start=1)]
        train_path = tasks_dir / f"obj_verification_train{suffix}.json"
        calibration_rows = self._calibration_rows(train_path, n_bins, calibration_questions, seed)

        wanted = {i for idx, _, targets in (*val_rows, *calibration_rows) for i in (idx, *targets)}
        self.paths = {i: p for i in sorted(wanted) if (p := find_bin_image(images_dir, i)) is not None}
        available = set(self.paths)

        def ready(rows: Iterable[tuple[int, int, list[int]]]) -> list[Question]:
            questions = []
            for number, (idx, label, targets) in enumerate(rows):
                chosen = choose_targets(targets, available, max_targets, seed, number)
                questions.append(Question(idx, label, tuple(chosen) if idx in available else ()))
            return questions

        self.questions = ready(val_rows)
        self.calibration = [q for q in ready(calibration_rows) if q.targets]
        if not self.calibration:
            raise ValueError(f"{train_path}: no calibration question has images; the threshold cannot be chosen")
        self.queries = sorted({idx for idx, _, _ in val_rows if idx in available})
        self.gallery = sorted({t for _, _, targets in val_rows for t in targets if t in available})
        if not self.queries or not self.gallery:
            raise ValueError(f"{images_dir}: no validation bin or no target bin has an image")
        needed = {*self.queries, *self.gallery}
        needed |= {i for q in (*self.questions, *self.calibration) if q.targets for i in (q.bin, *q.targets)}
        order = sorted(needed)
        self._bins = ImageSet(tuple(bin_id(i) for i in order), tuple(self.paths[i] for i in order))

    def _calibration_rows(self, path: Path, n_bins: int, per_class: int, seed: int) -> list[tuple[int, int, list[int]]]:
        """Training-split questions, ``per_class`` positives then ``per_class`` negatives (see module docstring)."""
        rows = read_json(path)
        if not isinstance(rows, list) or not rows:
            raise InputError(path, "expected a non-empty list of [image_index, [[asin, [train indices]], ...]]")
        positives: list[tuple[int, int, list[int]]] = []
        holders: dict[str, set[int]] = {}
        bins = []
        for number, row in enumerate(rows, start=1):
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], list)):
                raise InputError(path, f"entry {number}: expected [image_index, [[asin, [train indices]], ...]]")
            idx = _indices(path, number, [row[0]], "image index", n_bins)[0]
            bins.append(idx)
            for obj in row[1]:
                if not (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[0], str)):
                    raise InputError(path, f"entry {number}: expected [asin, [train indices]] objects")
                targets = _indices(path, number, obj[1], "targets", n_bins)
                positives.append((idx, 1, targets))
                holders.setdefault(obj[0], set()).update((idx, *targets))
        rng = np.random.default_rng(seed)
        picked = [positives[i] for i in sorted(rng.permutation(len(positives))[:per_class].tolist())]
        pool = sorted(holders)
        negatives: list[tuple[int, int, list[int]]] = []
        for i in rng.permutation(len(bins)).tolist():
            if len(negatives) == per_class:
                break
            asin = draw_absent(pool, self.asins[bins[i]], rng)
            if asin is not None:
                negatives.append((bins[i], 0, sorted(holders[asin] - {bins[i]})))
        return picked + negatives

    def image_sets(self) -> dict[str, ImageSet]:
        """Validation bins, gallery bins, and the calibration bins with their chosen targets."""
        return {IMAGE_SET: self._bins}


    def _unit_rows(self, features: dict[str, FeatureSet]) -> tuple[np.ndarray, dict[int, int]]:
        """Every bin's unit-length features, and bin index -> row."""
        feats = features[IMAGE_SET]
        feats.check_finite(IMAGE_SET)
        ids = self._bins.ids
        return unit_rows(feats.select(ids, IMAGE_SET).features, "bin"), {int(i) - 1: n for n, i in enumerate(ids)}

    def search_requests(self, features: dict[str, FeatureSet], settings: EvalSettings) -> list[SearchRequest]:
        """One search, ``gallery``: the retrieval queries' bins against the gallery bins by exact cosine,
        ``retrieval_k`` deep (the whole gallery when None)."""
        from vsbench.index.plan import SearchRequest  # faiss: imported only when scoring

        unit, row = self._unit_rows(features)
        depth = len(self.gallery) if self.retrieval_k is None else min(self.retrieval_k, len(self.gallery))
        return [SearchRequest("gallery", unit[[row[i] for i in self.queries]], unit[[row[i] for i in self.gallery]],
                              None, "L2norm,Flat", "ip", depth, reference_ids=tuple(str(g) for g in self.gallery))]

    def score(self, features: dict[str, FeatureSet], settings: EvalSettings,
              results: Mapping[str, SearchResults]) -> EvalResult:
        """The verification answers (exact cosine, no search) and the retrieval mAP of the search's results."""
        from vsbench.index.plan import results_for

        unit, row = self._unit_rows(features)
        depth = len(self.gallery) if self.retrieval_k is None else min(self.retrieval_k, len(self.gallery))

        def similarity(question: Question) -> float:
            return float(np.mean(unit[[row[t] for t in question.targets]] @ unit[row[question.bin]]))

        calibration = np.array([similarity(q) for q in self.calibration])
        threshold, calibration_accuracy = accuracy_threshold(
            calibration, np.array([q.label for q in self.calibration]))
        answers = np.array([int(similarity(q) > threshold) if q.targets else 0 for q in self.questions])
        verification = verification_metrics(answers, np.array([q.label for q in self.questions]))
        retrieval_map, scored = self._retrieval_map(results_for(results, "gallery"))
        record: dict[str, Any] = {
            "task": self.task,
            "verification_accuracy": verification.accuracy,
            "verification_precision": verification.precision,
            "verification_recall": verification.recall,
            "asin_retrieval_map": retrieval_map,
            "threshold": threshold,
            "retrieval_k": depth,
            "calibration_accuracy": calibration_accuracy,
            "num_questions": verification.num_examples,
            "num_unanswerable": sum(1 for q in self.questions if not q.targets),
            "num_calibration_questions": len(self.calibration),
            "num_retrieval_queries": scored,
            "num_retrieval_queries_without_relevant": len(self.queries) - scored,
        }
        return EvalResult(records=[record])

    def _retrieval_map(self, results: SearchResults) -> tuple[float, int]:
        """(mAP over the queries with a relevant gallery bin, number of such queries)."""
        from vsbench.index.plan import as_candidates

        ((_, _, found),) = as_candidates(results, None)
        starts = np.searchsorted(found.query, np.arange(len(self.queries) + 1))
        holders: dict[str, list[int]] = {}
        for position, g in enumerate(self.gallery):
            for asin in self.asins[g]:
                holders.setdefault(asin, []).append(position)
        aps = []
        for n, idx in enumerate(self.queries):
            relevant_all = np.zeros(len(self.gallery), dtype=bool)
            for asin in self.asins[idx]:
                relevant_all[holders.get(asin, [])] = True
            if not relevant_all.any():
                continue
            refs = found.reference[starts[n]:starts[n + 1]]
            aps.append(ranked_average_precision(found.score[starts[n]:starts[n + 1]], relevant_all[refs],
                                                int(relevant_all.sum())))
        if not aps:
            raise ValueError("no validation bin shares an asin with any gallery bin: retrieval mAP is undefined")
        return float(np.mean(aps)), len(aps)


def load_abid_embeddings(root: Path, **options: Any) -> AbidEmbeddingsBenchmark:
    """Options: ``tasks`` ("tasks"), ``images`` (bin-images-resize/ or raw/bin-images/), ``hard`` (False:
    the moderate task files), ``max_targets`` (20), ``seed`` (0), ``calibration_questions`` (1000 per
    answer), ``retrieval_k`` (1000; None: the whole gallery)."""
    return AbidEmbeddingsBenchmark(Path(root), **options)
