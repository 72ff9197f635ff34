"""Quantity-verification baseline ("are there k of this asin in the bin?").

The challenge gave no baseline. Ours combines two estimates, both learned from training data:

* a per-asin prior: the asin's most common quantity in the training bins that hold it (1 for an
  asin never seen with a quantity, which is the most common quantity overall), and
* the bin's total item count predicted by the counting network: an asin cannot be present more
  times than the bin holds items.

The estimate is ``q = clip(prior, 1, predicted_total)`` (at least 1: the task guarantees the asin
is in the bin), and the answer is yes iff the asked quantity equals ``q``. The trivial answers
(always yes, always no: 50% on the balanced set) and the prior alone are reported beside it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsbench.io.inputs import read_index_list, read_json, read_lines
from vsbench.io.storage import atomic_write_text

RESULT_NAME = "obj_num_verification_result.txt"


@dataclass(frozen=True)
class QuantityAnswers:
    baseline: list[int]
    prior_only: list[int]
    always_yes: list[int]
    always_no: list[int]


def asin_quantity_prior(metadata: list[dict[str, Any]], train_indices: list[int]) -> dict[str, int]:
    """Most common quantity per asin over training bins (ties: the smaller quantity)."""
    seen: dict[str, Counter[int]] = defaultdict(Counter)
    for idx in train_indices:
        per_bin: Counter[str] = Counter()
        for entry in metadata[idx].get("BIN_FCSKU_DATA", {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("asin"), str):
                quantity = entry.get("quantity")
                per_bin[entry["asin"]] += quantity if isinstance(quantity, int) and quantity > 0 else 1
        for asin, quantity in per_bin.items():
            seen[asin][quantity] += 1
    return {asin: min(c, key=lambda q: (-c[q], q)) for asin, c in seen.items()}


def answer_quantity_questions(questions: list[list[Any]], prior: dict[str, int],
                              predicted_totals: dict[int, int]) -> QuantityAnswers:
    baseline, prior_only = [], []
    for idx, asin, _label, _truth, asked, _targets in questions:
        expected = prior.get(asin, 1)
        total = predicted_totals.get(idx)
        estimate = max(1, min(expected, total)) if total is not None else expected
        baseline.append(int(asked == estimate))
        prior_only.append(int(asked == expected))
    n = len(questions)
    return QuantityAnswers(baseline, prior_only, [1] * n, [0] * n)


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
    answers = answer_quantity_questions(questions, asin_quantity_prior(metadata, train), totals)
    atomic_write_text(out_dir / RESULT_NAME, "".join(f"{a}\n" for a in answers.baseline))
    return answers
