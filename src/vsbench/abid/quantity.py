"""Quantity-verification baseline ("are there k of this asin in the bin?").

The challenge gave no baseline. Ours combines two estimates, both learned from training data:

* a per-asin prior: the asin's most common quantity in the training bins that hold it (1 for an
  asin never seen with a quantity, which is the most common quantity overall), and
* the bin's total item count predicted by the counting network: an asin cannot be present more
  times than the bin holds items.

The estimate is ``q = clip(prior, 1, predicted_total)`` (at least 1: the task guarantees the asin
is in the bin), and the answer is yes iff the asked quantity equals ``q``. The trivial answers
(always yes, always no: 50% on the balanced set) and the prior alone are reported beside it.

The cap only helps when the counting network counts well: on real bins a weak network's cap
scored 0.941 against the prior alone's 0.971. So the rule is chosen on training bins, never on the
validation questions: the counting step predicts counts on a slice of training bins
(``counting_calibration.json``: the bins held out of its training when it held any, else a seeded
tenth of them), the prior is refitted without those bins, questions are asked of them as prepare
asks the validation ones (the true quantity, and a wrong one), and the cap is kept only when it
answers more of them correctly than the prior alone. Which rule answered, and both accuracies, are
in the result. The calibration is used only beside the counting result it was written with (it
records that file's sha256): one left by another counting run, or from before it was keyed, is not
evidence about this result, and the line says so.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.abid.coverage import MODERATE_MAX_QUANTITY
from vsbench.io.inputs import read_index_list, read_json, read_lines
from vsbench.io.storage import atomic_write_text, file_sha256

RESULT_NAME = "obj_num_verification_result.txt"
CALIBRATION_NAME = "counting_calibration.json"  # written by the counting step beside its result
CAPPED, PRIOR_ONLY = "prior capped by the predicted count", "prior only"


@dataclass(frozen=True)
class RuleChoice:
    """Which rule answers, and the evidence: accuracies on questions about training bins."""

    rule: str
    cap_accuracy: float | None = None  # None: no calibration predictions to decide on
    prior_accuracy: float | None = None
    questions: int = 0
    trained_on: bool = True  # the counting network trained on the calibration bins
    note: str = ""  # why there was no calibration to decide on, when there was one beside the result

    def line(self) -> str:
        if self.cap_accuracy is None:
            why = self.note or f"no {CALIBRATION_NAME} beside the counting result to decide on"
            return f"quantity rule: {self.rule} ({why}; re-run the counting step to write it)"
        seen = "bins the counting network trained on" if self.trained_on else "bins held out of counting's training"
        return (f"quantity rule: {self.rule} (on {self.questions} questions about training {seen}: cap "
                f"{self.cap_accuracy:.4f}, prior alone {self.prior_accuracy:.4f})")


@dataclass(frozen=True)
class QuantityAnswers:
    baseline: list[int]
    prior_only: list[int]
    always_yes: list[int]
    always_no: list[int]
    choice: RuleChoice = field(default_factory=lambda: RuleChoice(CAPPED))


def bin_quantities(metadata: list[dict[str, Any]], idx: int) -> Counter[str]:
    """Units of each asin in bin ``idx`` (entries of one asin under several keys added)."""
    per_bin: Counter[str] = Counter()
    entries = metadata[idx].get("BIN_FCSKU_DATA", {}) if isinstance(metadata[idx], dict) else {}
    for entry in entries.values() if isinstance(entries, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("asin"), str):
            quantity = entry.get("quantity")
            per_bin[entry["asin"]] += quantity if isinstance(quantity, int) and quantity > 0 else 1
    return per_bin


def asin_quantity_prior(metadata: list[dict[str, Any]], train_indices: list[int]) -> dict[str, int]:
    """Most common quantity per asin over training bins (ties: the smaller quantity)."""
    seen: dict[str, Counter[int]] = defaultdict(Counter)
    for idx in train_indices:
        for asin, quantity in bin_quantities(metadata, idx).items():
            seen[asin][quantity] += 1
    return {asin: min(c, key=lambda q: (-c[q], q)) for asin, c in seen.items()}


def _estimate(prior: int, total: int | None, capped: bool) -> int:
    return max(1, min(prior, total)) if capped and total is not None else prior


def answer_quantity_questions(questions: list[list[Any]], prior: dict[str, int],
                              predicted_totals: dict[int, int], choice: RuleChoice | None = None) -> QuantityAnswers:
    choice = choice or RuleChoice(CAPPED)
    capped = choice.rule == CAPPED
    baseline, prior_only = [], []
    for idx, asin, _label, _truth, asked, _targets in questions:
        expected = prior.get(asin, 1)
        baseline.append(int(asked == _estimate(expected, predicted_totals.get(idx), capped)))
        prior_only.append(int(asked == expected))
    n = len(questions)
    return QuantityAnswers(baseline, prior_only, [1] * n, [0] * n, choice)


def choose_rule(metadata: list[dict[str, Any]], train: list[int], calibration: dict[str, Any] | None,
                seed: int = 0) -> RuleChoice:
    """Cap or prior alone, decided on training bins with predicted counts (module docstring).

    Each moderate calibration bin asks, for every asin it holds, its true quantity and one wrong
    quantity (uniform over ``1..max(5, true + 1)``, as prepare asks), with a prior fitted on the
    other training bins. The cap is kept only if it answers strictly more of them correctly.
    """
    if not calibration or not calibration.get("bins"):
        return RuleChoice(CAPPED)
    predicted = {int(idx): int(total) for idx, total in calibration["bins"]}
    prior = asin_quantity_prior(metadata, [idx for idx in train if idx not in predicted])
    rng = np.random.default_rng([seed, 0x9A17])
    right = {True: 0, False: 0}
    asked_count = 0
    for idx in sorted(predicted):
        total = metadata[idx].get("EXPECTED_QUANTITY", 0) if 0 <= idx < len(metadata) else 0
        if not isinstance(total, int) or not 0 < total <= MODERATE_MAX_QUANTITY:  # the moderate set's bins
            continue
        for asin, truth in bin_quantities(metadata, idx).items():
            wrong = [q for q in range(1, max(MODERATE_MAX_QUANTITY, truth + 1) + 1) if q != truth]
            for asked, label in ((truth, 1), (wrong[int(rng.integers(len(wrong)))], 0)):
                asked_count += 1
                for capped in (True, False):
                    answer = int(asked == _estimate(prior.get(asin, 1), predicted[idx], capped))
                    right[capped] += int(answer == label)
    if not asked_count:
        return RuleChoice(CAPPED)
    cap, plain = right[True] / asked_count, right[False] / asked_count
    return RuleChoice(CAPPED if cap > plain else PRIOR_ONLY, cap, plain, asked_count,
                      bool(calibration.get("trained_on", True)))


def run_quantity_baseline(tasks_dir: Path, counting_result: Path, out_dir: Path) -> QuantityAnswers:
    """Answer ``obj_num_verification_val.json`` from the counting predictions; writes the result file."""
    questions = read_json(tasks_dir / "obj_num_verification_val.json")
    metadata = read_json(tasks_dir / "metadata.json")
    train = read_index_list(tasks_dir / "random_train.txt")
    counting_val = read_json(tasks_dir / "counting_val.json")
    lines = [word for line in read_lines(counting_result) for word in line.split()]
    if len(lines) != len(counting_val):
        raise ValueError(f"{counting_result}: {len(lines)} lines, but counting_val.json has {len(counting_val)} rows")
    totals = {int(idx): int(p) for (idx, _), p in zip(counting_val, lines)}
    calibration, note = read_calibration(counting_result)
    choice = choose_rule(metadata, train, calibration)
    if note:
        choice = replace(choice, note=note)
    answers = answer_quantity_questions(questions, asin_quantity_prior(metadata, train), totals, choice)
    atomic_write_text(out_dir / RESULT_NAME, "".join(f"{a}\n" for a in answers.baseline))
    return answers


def read_calibration(counting_result: Path) -> tuple[dict[str, Any] | None, str]:
    """(the calibration written with ``counting_result``, or None; why one beside it is not used).

    Keyed on the result's content: the counting step records the sha256 of the result file it
    wrote beside it, so a calibration left by another counting run (or killed between the two
    writes) never decides this result's rule."""
    path = counting_result.parent / CALIBRATION_NAME
    if not path.is_file():
        return None, ""
    data = read_json(path)
    recorded = data.get("counting_result_sha256") if isinstance(data, dict) else None
    if recorded is None:
        return None, f"{path} names no counting result (written before calibrations were keyed): not used"
    if recorded != file_sha256(counting_result):
        return None, f"{path} was written with another {counting_result.name}: not used"
    return data, ""
