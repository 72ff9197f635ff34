"""A ground truth that asks one question twice (issue 54, item 5): counting and quantity truths are
refused naming the question and both entries; a verification truth with two labels for one
question is refused, with one label it is scored (as the challenge's script does) with a warning."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from vsbench.cli.score import score_app

runner = CliRunner()


def _score(command: str, tmp_path: Path, truth: list, answers: list[int]):
    gt, pred = tmp_path / "gt.json", tmp_path / "pred.txt"
    gt.write_text(json.dumps(truth))
    pred.write_text("".join(f"{a}\n" for a in answers))
    result = runner.invoke(score_app, [command, "--pred", str(pred), "--gt", str(gt),
                                       "--output", str(tmp_path / "m.json"), "--resamples", "0", "--no-track"])
    return result, gt


def _one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_counting_image_listed_twice_is_refused_naming_it(tmp_path: Path) -> None:
    # the case: image 5 with quantities 1 and 2 (one of the two answers is wrong whatever is predicted)
    result, gt = _score("abid-counting", tmp_path, [[5, 1], [9, 0], [5, 2]], [1, 0, 2])
    line = _one_line_error(result, str(gt), "image '5' is listed twice", "entries 1 and 3",
                           "quantity 1, then quantity 2")
    assert line.startswith("error: ")


def test_counting_repeat_with_one_answer_is_refused_too(tmp_path: Path) -> None:
    result, _ = _score("abid-counting", tmp_path, [[5, 1], [5, 1]], [1, 1])
    _one_line_error(result, "image '5' is listed twice", "the same answer")


def test_counting_ids_of_other_types_are_other_images(tmp_path: Path) -> None:
    result, _ = _score("abid-counting", tmp_path, [[5, 1], ["5", 1]], [1, 1])
    assert result.exit_code == 0, result.output


def test_quantity_question_asked_twice_is_refused_naming_it(tmp_path: Path) -> None:
    truth = [[5, "B1", 1, 2, 2, []], [7, "B2", 0, 1, 3, []], [5, "B1", 0, 3, 2, []]]
    result, gt = _score("abid-quantity", tmp_path, truth, [1, 0, 0])
    _one_line_error(result, str(gt), "image '5', asin 'B1', asked quantity 2 is listed twice", "entries 1 and 3",
                    "true quantity 2, then true quantity 3")


def test_quantity_same_image_other_question_is_scored(tmp_path: Path) -> None:
    truth = [[5, "B1", 1, 2, 2, []], [5, "B1", 0, 2, 3, []]]
    result, _ = _score("abid-quantity", tmp_path, truth, [1, 0])
    assert result.exit_code == 0, result.output


def test_verification_question_with_two_labels_is_refused(tmp_path: Path) -> None:
    truth = [[5, "B1", 1, []], [6, "B1", 0, []], [5, "B1", 0, []]]
    result, gt = _score("abid-verification", tmp_path, truth, [1, 0, 0])
    _one_line_error(result, str(gt), "image '5', asin 'B1' is listed twice with two answers",
                    "entries 1 (label 1) and 3 (label 0)")


def test_verification_repeat_with_one_label_is_scored_with_a_warning(tmp_path: Path) -> None:
    truth = [[5, "B1", 1, []], [6, "B1", 0, []], [5, "B1", 1, []]]
    result, gt = _score("abid-verification", tmp_path, truth, [1, 0, 1])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and f"{gt}: 1 question(s) are listed more than once" in warnings[0]
    assert "(e.g. 5:B1)" in warnings[0]
    assert json.loads((tmp_path / "m.json").read_text())["accuracy"] == 1.0  # both copies scored


def test_verification_without_repeats_warns_nothing(tmp_path: Path) -> None:
    result, _ = _score("abid-verification", tmp_path, [[5, "B1", 1, []], [6, "B1", 0, []]], [1, 0])
    assert result.exit_code == 0 and "warning" not in result.stderr, result.output


def test_product_search_candidate_listed_twice_is_refused_naming_it(tmp_path: Path) -> None:
    from vsbench.benchmarks.product_search.readers import read_product_queries
    from vsbench.io.inputs import InputError

    queries = tmp_path / "queries.jsonl"
    candidates = [{"candidate_pid": "P1", "label": 1}, {"candidate_pid": "P2", "label": 0},
                  {"candidate_pid": "P1", "label": 1}]
    queries.write_text(json.dumps({"source_pid": "S", "candidates": candidates[:2]}) + "\n"
                       + json.dumps({"source_pid": "S", "candidates": candidates}) + "\n")
    try:
        read_product_queries(queries)
    except InputError as exc:
        message = str(exc)
    else:
        raise AssertionError("a candidate listed twice was read")
    assert message.startswith(f"{queries}:2: candidate_pid 'P1' appears twice") and "candidates 1 and 3" in message
