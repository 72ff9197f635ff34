"""The quantity baseline's rule is chosen on training bins: the count cap is kept only when it helps."""

from __future__ import annotations

import json
from pathlib import Path

from vsbench.abid.quantity import (
    CALIBRATION_NAME,
    CAPPED,
    PRIOR_ONLY,
    answer_quantity_questions,
    asin_quantity_prior,
    choose_rule,
    run_quantity_baseline,
)
from vsbench.io.storage import file_sha256


def _bin(quantity: int) -> dict:
    return {"EXPECTED_QUANTITY": quantity, "BIN_FCSKU_DATA": {"A": {"asin": "A", "quantity": quantity}}}


# Asin A: three units in bins 0-11, one unit in bins 12-19. Calibrating on bins 6-15 leaves 0-5 (three)
# and 16-19 (one) to fit the prior on: 3.
METADATA = [_bin(3) for _ in range(12)] + [_bin(1) for _ in range(8)]
CALIBRATION_BINS = range(6, 16)
TRAIN = list(range(20))


def test_a_strong_counter_keeps_the_cap():
    # Counted right, the cap turns the prior's 3 into 1 where the bin holds one.
    calibration = {"trained_on": True, "bins": [[i, METADATA[i]["EXPECTED_QUANTITY"]] for i in CALIBRATION_BINS]}
    choice = choose_rule(METADATA, TRAIN, calibration)
    assert choice.rule == CAPPED and choice.questions == 20  # 10 bins, a true and a wrong quantity each
    assert choice.cap_accuracy > choice.prior_accuracy


def test_a_weak_counter_loses_the_cap_to_the_prior():
    # The same bins, every count predicted as 1: the cap says 1 where there are three.
    calibration = {"trained_on": False, "bins": [[i, 1] for i in CALIBRATION_BINS]}
    choice = choose_rule(METADATA, TRAIN, calibration)
    assert choice.rule == PRIOR_ONLY and choice.cap_accuracy < choice.prior_accuracy
    assert "prior only" in choice.line() and "held out of counting's training" in choice.line()


def test_the_prior_is_refitted_without_the_calibration_bins():
    # With bins 0-11 all held out for calibration, A's prior from the others is 1.
    assert asin_quantity_prior(METADATA, list(range(12, 20))) == {"A": 1}
    calibration = {"bins": [[i, 3] for i in range(12)]}
    choice = choose_rule(METADATA, TRAIN, calibration)
    # prior 1 everywhere; capping 1 by 3 changes nothing: a tie keeps the prior alone
    assert choice.rule == PRIOR_ONLY and choice.cap_accuracy == choice.prior_accuracy


def test_the_chosen_rule_answers_and_the_prior_alone_stays_beside_it():
    question = [[15, "A", 1, 1, 1, []]]  # bin 15 holds one A; asked "1?"
    prior = {"A": 3}
    capped = answer_quantity_questions(question, prior, {15: 1}, choose_rule(
        METADATA, TRAIN, {"bins": [[i, METADATA[i]["EXPECTED_QUANTITY"]] for i in CALIBRATION_BINS]}))
    assert capped.baseline == [1] and capped.prior_only == [0]
    plain = answer_quantity_questions(question, prior, {15: 1}, choose_rule(
        METADATA, TRAIN, {"bins": [[i, 1] for i in CALIBRATION_BINS]}))
    assert plain.baseline == [0] == plain.prior_only


def _quantity_inputs(tmp_path: Path) -> tuple[Path, Path]:
    """(tasks folder, counting result) of one quantity question about bin 15."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "metadata.json").write_text(json.dumps(METADATA))
    (tasks / "random_train.txt").write_text("".join(f"{i + 1}\n" for i in TRAIN))
    (tasks / "obj_num_verification_val.json").write_text(json.dumps([[15, "A", 1, 1, 1, []]]))
    (tasks / "counting_val.json").write_text(json.dumps([[15, 1]]))
    counting = tmp_path / "counting"
    counting.mkdir()
    (counting / "counting_result.txt").write_text("1\n")
    return tasks, counting / "counting_result.txt"


def test_without_calibration_the_cap_answers_and_the_line_says_why(tmp_path: Path):
    tasks, result = _quantity_inputs(tmp_path)
    counting = result.parent
    answers = run_quantity_baseline(tasks, result, tmp_path / "out")
    assert answers.choice.rule == CAPPED and f"no {CALIBRATION_NAME}" in answers.choice.line()
    (counting / CALIBRATION_NAME).write_text(json.dumps({"trained_on": True, "bins": [[i, 1] for i in CALIBRATION_BINS],
                                                         "counting_result_sha256": file_sha256(result)}))
    answers = run_quantity_baseline(tasks, result, tmp_path / "out")
    assert answers.choice.rule == PRIOR_ONLY
    assert (tmp_path / "out" / "obj_num_verification_result.txt").read_text() == f"{answers.baseline[0]}\n"


def test_a_calibration_of_another_counting_result_decides_nothing(tmp_path: Path):
    """The calibration is keyed on the result it was written with: one left beside another result
    (a counting run killed between its two writes, a result copied in) or from before the key is
    not used, and the line names it."""
    tasks, result = _quantity_inputs(tmp_path)
    calibration = {"trained_on": True, "bins": [[i, 1] for i in CALIBRATION_BINS]}  # would choose the prior alone
    (result.parent / CALIBRATION_NAME).write_text(json.dumps(calibration))
    answers = run_quantity_baseline(tasks, result, tmp_path / "out")
    assert answers.choice.rule == CAPPED and answers.choice.cap_accuracy is None
    assert f"{result.parent / CALIBRATION_NAME} names no counting result" in answers.choice.line()
    (result.parent / CALIBRATION_NAME).write_text(json.dumps({**calibration, "counting_result_sha256": "0" * 64}))
    answers = run_quantity_baseline(tasks, result, tmp_path / "out")
    assert answers.choice.rule == CAPPED and "was written with another counting_result.txt" in answers.choice.line()
    (result.parent / CALIBRATION_NAME).write_text(json.dumps({**calibration,
                                                              "counting_result_sha256": file_sha256(result)}))
    assert run_quantity_baseline(tasks, result, tmp_path / "out").choice.rule == PRIOR_ONLY
