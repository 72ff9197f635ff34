"""ABID's per-question outcomes (vsbench.abid.units): the statistics' contract against the ABID scorers
on expanded data, intervals equal to scipy's bootstrap over the same draws, McNemar equal to scipy's
binomial test, paired p-values equal to scipy's exact permutation test, identical runs, stable ids."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from vsbench.abid.metrics import counting_metrics, verification_metrics
from vsbench.abid.units import answer_units, counting_units, question_ids, unique_ids
from vsbench.stats.compare import compare, intervals, mcnemar
from vsbench.stats.resample import Resampling, expanded_confidence
from vsbench.stats.statistics import evaluate, ratio
from vsbench.stats.units import read_units, units_from_bytes


def _counting_data(rng: np.random.Generator, n: int, classes: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    truth = rng.integers(0, classes, n)
    pred = np.clip(truth + rng.choice([-2, -1, 0, 0, 0, 1, 3], n), 0, None)
    return pred, truth, np.asarray([str(3 * i) for i in range(n)])


def _expanded(weights: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """Each unit written out once per draw (a unit drawn twice is two questions)."""
    rows = np.repeat(np.arange(weights.size), weights)
    return [a[rows] for a in arrays]


def _counting_dict(pred: np.ndarray, truth: np.ndarray, prefix: str = "") -> dict[str, float]:
    """The scorer's own numbers, under the names its ``as_dict`` gives them."""
    found = counting_metrics(pred, truth, 6).as_dict()
    return {f"{prefix}{k}": float(v) for k, v in found.items() if k != "num_examples"}


# ---------------------------------------------------------------------------------- the contract


@pytest.mark.parametrize("seed", range(8))
def test_counting_statistics_equal_the_scorer_on_the_expanded_questions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    pred, truth, ids = _counting_data(rng, n)
    units = counting_units(pred, truth, ids, prefix="counting_")
    weights = rng.choice([0, 0, 1, 1, 1, 2, 3], size=(25, n)).astype(np.int32)
    weights[0] = 1  # all ones: the record's own numbers
    got = evaluate(units, weights)
    assert set(got) == set(_counting_dict(pred, truth, "counting_"))  # a metric for each as_dict name
    for row, w in enumerate(weights):
        if w.sum() == 0:
            assert all(math.isnan(v[row]) for v in got.values())  # nothing drawn: undefined, as 0/0
            continue
        p, g = _expanded(w, pred, truth)
        want = counting_metrics(p, g, 6)
        assert got["counting_accuracy"][row] == pytest.approx(want.accuracy, abs=1e-9)
        assert got["counting_rmse"][row] == pytest.approx(want.rmse, abs=1e-9)
        for metric in got:
            if "_class_" not in metric:
                continue
            cls = int(metric.rsplit("_", 1)[1])
            table = want.per_class_accuracy if metric.startswith("counting_accuracy") else want.per_class_rmse
            if math.isnan(table[cls]):  # the class was not drawn: the scorer's 0/0
                assert math.isnan(got[metric][row])
            else:
                assert got[metric][row] == pytest.approx(table[cls], abs=1e-9)


@pytest.mark.parametrize("task", ["verification", "quantity"])
def test_answer_statistic_equals_the_scorer_on_the_expanded_questions(task: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(1, 30))
        truth = rng.integers(0, 2, n)
        pred = np.where(rng.random(n) < 0.7, truth, 1 - truth)
        units = answer_units(pred, truth, [f"{i}:B{i}" for i in range(n)], task=task, prefix=f"{task}_")
        weights = rng.choice([0, 1, 1, 2, 3], size=(10, n)).astype(np.int32)
        weights[0] = 1
        got = evaluate(units, weights)[f"{task}_accuracy"]
        for row, w in enumerate(weights):
            if w.sum() == 0:
                assert math.isnan(got[row])
                continue
            p, g = _expanded(w, pred, truth)
            assert got[row] == pytest.approx(verification_metrics(p, g).accuracy, abs=1e-9)


def test_all_weights_one_give_the_records_numbers_exactly() -> None:
    pred, truth, ids = _counting_data(np.random.default_rng(3), 500)
    units = counting_units(pred, truth, ids)
    ones = {k: float(v[0]) for k, v in evaluate(units, np.ones((1, 500), np.int32)).items()}
    assert ones == pytest.approx(_counting_dict(pred, truth), abs=1e-12)


def test_ratio_refuses_an_unknown_transform() -> None:
    pred, truth, ids = _counting_data(np.random.default_rng(0), 5)
    with pytest.raises(ValueError, match="unknown transform"):
        ratio(counting_units(pred, truth, ids), np.ones((1, 5)), num="correct", where="truth", equals=0,
              transform="log")


# ------------------------------------------------------------------- intervals: scipy's bootstrap


def test_intervals_equal_scipy_bootstrap_over_the_same_draws() -> None:
    """RMSEs (not proportions) keep the bootstrap: scipy's percentile interval over the same draws at
    the expanded level of the questions behind each (all 80; class 2's own)."""
    rng = np.random.default_rng(11)
    n, resamples, seed = 80, 300, 5
    pred, truth, ids = _counting_data(rng, n, classes=3)  # every class drawn in every resample (NaN-free)
    units = counting_units(pred, truth, ids, prefix="counting_")
    found = intervals(units, Resampling(resamples, seed))
    for metric in ("counting_rmse", "counting_rmse_class_2"):
        def statistic(rows: np.ndarray, metric: str = metric) -> float:
            rows = rows.astype(np.int64)
            return _counting_dict(pred[rows], truth[rows], "counting_")[metric]

        questions = n if metric == "counting_rmse" else int(np.count_nonzero(truth == 2))
        level = expanded_confidence(0.95, questions)
        ref = sps.bootstrap((np.arange(n),), statistic, method="percentile", rng=np.random.default_rng(seed),
                            n_resamples=resamples, batch=None, vectorized=False, confidence_level=level)
        assert found[metric].method == "expanded percentile bootstrap" and found[metric].level == level
        assert found[metric].low == pytest.approx(ref.confidence_interval.low, abs=1e-9)
        assert found[metric].high == pytest.approx(ref.confidence_interval.high, abs=1e-9)


def _beta_clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The textbook Clopper-Pearson bounds from beta quantiles: an implementation independent of
    scipy's binomtest (which finds its bounds by root finding)."""
    alpha = (1 - confidence) / 2
    low = 0.0 if k == 0 else float(sps.beta.ppf(alpha, k, n - k + 1))
    high = 1.0 if k == n else float(sps.beta.ppf(1 - alpha, k + 1, n - k))
    return low, high


def test_accuracies_get_scipys_exact_clopper_pearson_interval() -> None:
    """Every accuracy, a class's on that class's questions only, is scipy's
    ``binomtest(k, n).proportion_ci(method="exact")`` of its own right answers k of n (to the last bit),
    and agrees with the beta-quantile formula; 0 of n and n of n reach 0 and 1 without zero width."""
    rng = np.random.default_rng(11)
    n = 80
    pred, truth, ids = _counting_data(rng, n, classes=3)
    pred[truth == 0] = 0  # class 0 all right: n of n
    units = counting_units(pred, truth, ids, prefix="counting_")
    for confidence in (0.95, 0.9):
        found = intervals(units, Resampling(300, 5, confidence))
        for metric, rows in (("counting_accuracy", truth >= 0), ("counting_accuracy_class_0", truth == 0),
                             ("counting_accuracy_class_1", truth == 1), ("counting_accuracy_class_2", truth == 2)):
            k, m = int(np.sum(pred[rows] == truth[rows])), int(np.sum(rows))
            ref = sps.binomtest(k, m).proportion_ci(confidence_level=confidence, method="exact")
            got = found[metric]
            assert got.method == "Clopper-Pearson" and got.units == m
            assert (got.low, got.high) == (ref.low, ref.high)
            assert (got.low, got.high) == pytest.approx(_beta_clopper_pearson(k, m, confidence), abs=1e-9)
    class_0 = intervals(units, Resampling(300, 5))["counting_accuracy_class_0"]
    assert class_0.high == 1.0 and class_0.low < 1.0  # all right: [0.8.., 1], never [1, 1]

    truth_v = rng.integers(0, 2, n)
    pred_v = np.where(rng.random(n) < 0.6, truth_v, 1 - truth_v)
    answers = answer_units(pred_v, truth_v, [str(i) for i in range(n)], task="verification")
    got = intervals(answers, Resampling(300, 5))["accuracy"]
    k = int(np.sum(pred_v == truth_v))
    assert (got.low, got.high) == pytest.approx(_beta_clopper_pearson(k, n), abs=1e-9)
    wrong = answer_units(1 - truth_v, truth_v, [str(i) for i in range(n)], task="verification")
    none_right = intervals(wrong, Resampling(300, 5))["accuracy"]
    assert none_right.low == 0.0 and none_right.high == pytest.approx(_beta_clopper_pearson(0, n)[1], abs=1e-12)


# ------------------------------------------------------------------- comparisons: McNemar, permutation


def test_mcnemar_equals_scipy_binomtest_on_many_random_tables() -> None:
    rng = np.random.default_rng(2)
    for _ in range(300):
        n = int(rng.integers(1, 120))
        a = rng.random(n) < rng.random()
        b = rng.random(n) < rng.random()
        only_a, only_b, p = mcnemar(a, b)
        assert (only_a, only_b) == (int(np.sum(a & ~b)), int(np.sum(~a & b)))
        want = 1.0 if only_a + only_b == 0 else sps.binomtest(only_a, only_a + only_b, 0.5).pvalue
        assert p == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_identical_runs_differ_by_zero_with_p_one() -> None:
    pred, truth, ids = _counting_data(np.random.default_rng(4), 60)
    first = counting_units(pred, truth, ids, prefix="counting_")
    second = counting_units(pred.copy(), truth.copy(), ids.copy(), prefix="counting_")
    found = compare(first, second, Resampling(200, 1))
    assert found["counting_accuracy"].paired
    for metric, diff in found.items():
        assert diff.difference == 0 and diff.p_value == 1.0, metric
        assert (diff.low, diff.high) == (0.0, 0.0) or (math.isnan(diff.low) and math.isnan(diff.high)), metric
    assert found["counting_accuracy"].mcnemar == (0, 0, 1.0)
    assert found["counting_rmse"].mcnemar is None  # not a mean of 0/1 outcomes


def test_paired_p_values_equal_scipys_exact_tests_on_tiny_inputs() -> None:
    rng = np.random.default_rng(9)
    for trial in range(30):
        n = int(rng.integers(2, 11))
        truth = rng.integers(0, 4, n)
        pred_a = np.clip(truth + rng.choice([-1, 0, 0, 1], n), 0, None)
        pred_b = np.clip(truth + rng.choice([-1, 0, 0, 0, 2], n), 0, None)
        ids = [str(i) for i in range(n)]
        # The second run's questions in another order: compare pairs them by id.
        order = rng.permutation(n)
        first = counting_units(pred_a, truth, ids)
        second = counting_units(pred_b[order], truth[order], np.asarray(ids)[order])
        found = compare(first, second, Resampling(100, trial), ["accuracy", "rmse"])
        assert found["rmse"].test.startswith("exact paired permutation test")
        correct_a, correct_b = (pred_a == truth).astype(float), (pred_b == truth).astype(float)
        se_a, se_b = (pred_a - truth) ** 2.0, (pred_b - truth) ** 2.0
        # accuracy, a mean of 0/1 outcomes, takes McNemar's exact test: scipy's binomial test of the discordant
        only_a, only_b = int(np.sum((correct_a == 1) & (correct_b == 0))), int(np.sum((correct_a == 0) & (correct_b == 1)))
        assert found["accuracy"].test.startswith("exact McNemar test")
        expected = sps.binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
        assert found["accuracy"].p_value == pytest.approx(expected, abs=1e-12), trial
        assert found["accuracy"].difference == pytest.approx(correct_b.mean() - correct_a.mean(), abs=1e-12)
        for metric, x, y, fn in (("rmse", se_a, se_b, lambda v, axis: np.sqrt(np.mean(v, axis=axis))),):
            ref = sps.permutation_test((x, y), lambda u, v, axis, fn=fn: fn(v, axis=axis) - fn(u, axis=axis),
                                       permutation_type="samples", n_resamples=2 ** n + 1, vectorized=True,
                                       alternative="two-sided")
            assert found[metric].p_value == pytest.approx(ref.pvalue, abs=1e-12), (trial, metric)
            assert found[metric].difference == pytest.approx(fn(y, axis=0) - fn(x, axis=0), abs=1e-12)


def test_mcnemar_of_a_comparison_counts_the_discordant_questions() -> None:
    truth = np.array([1, 0, 1, 1, 0, 1, 0, 0])
    a = np.array([1, 0, 0, 1, 1, 1, 0, 1])
    b = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    ids = question_ids([[i, f"B{i}", int(t)] for i, t in enumerate(truth)], "verification")
    found = compare(answer_units(a, truth, ids, task="verification"),
                    answer_units(b, truth, ids, task="verification"), Resampling(50, 0))
    only_a = int(np.sum((a == truth) & (b != truth)))
    only_b = int(np.sum((a != truth) & (b == truth)))
    assert found["accuracy"].mcnemar == (only_a, only_b, pytest.approx(sps.binomtest(only_a, only_a + only_b).pvalue))


# ------------------------------------------------------------------------------------- ids, files


def test_question_ids_name_the_task_files_questions_stably() -> None:
    assert question_ids([[5, 1], [9, 0], [5, 2]], "counting").tolist() == ["5", "9", "5#2"]
    entries = [[5, "B1", 1, [2]], [5, "B2", 0, [3]], [5, "B1", 1, [2]]]
    assert question_ids(entries, "verification").tolist() == ["5:B1", "5:B2", "5:B1#2"]
    quantity = [[5, "B1", 1, 2, 2, []], [5, "B1", 0, 2, 4, []]]
    assert question_ids(quantity, "quantity").tolist() == ["5:B1:2", "5:B1:4"]
    assert unique_ids(["a", "a", "a"]).tolist() == ["a", "a#2", "a#3"]
    with pytest.raises(ValueError):
        question_ids(entries, "nosuch")


def test_unit_file_round_trip_keeps_the_metrics_and_the_per_class_statistic(tmp_path: Path) -> None:
    pred, truth, ids = _counting_data(np.random.default_rng(5), 50)
    units = counting_units(pred, truth, ids, prefix="counting_", variant="moderate")
    sha = units.write(tmp_path / "u.parquet")
    back = read_units(tmp_path / "u.parquet", sha)
    assert back.kind == "question" and back.benchmark == "abid_counting" and back.variant == "moderate"
    assert dict(back.metrics) == {k: dict(v) for k, v in units.metrics.items()}
    ones = np.ones((1, 50), np.int32)
    recomputed = {k: float(v[0]) for k, v in evaluate(back, ones).items()}
    assert recomputed == pytest.approx(_counting_dict(pred, truth, "counting_"))
    assert units_from_bytes(units.to_parquet_bytes()).ids.tolist() == ids.tolist()


def test_lengths_must_agree() -> None:
    with pytest.raises(ValueError, match="one each"):
        counting_units([1, 2], [1, 2], ["a"])
    with pytest.raises(ValueError, match="task must be"):
        answer_units([1], [1], ["a"], task="counting")


# ------------------------------------------------------------------------------ the score step


def _task_files(root: Path, rng: np.random.Generator, n: int = 40) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    counting = [[3 * i, int(rng.integers(0, 6))] for i in range(n)]
    verification = [[2 * i, f"B{i % 7}", int(rng.integers(0, 2)), [1, 2]] for i in range(n)]
    quantity = []
    for i in range(n):
        true_qty = int(rng.integers(1, 4))
        asked = true_qty if rng.random() < 0.5 else true_qty + 1
        quantity.append([i, f"B{i % 3}", int(asked == true_qty), true_qty, asked, [4]])
    (root / "counting_val.json").write_text(json.dumps(counting))
    (root / "obj_verification_val.json").write_text(json.dumps(verification))
    (root / "obj_num_verification_val.json").write_text(json.dumps(quantity))
    results = {"counting": root / "counting_result.txt", "verification": root / "verification_result.txt",
               "quantity": root / "quantity_result.txt"}
    results["counting"].write_text("".join(f"{max(0, c + int(rng.integers(-1, 2)))}\n" for _, c in counting))
    results["verification"].write_text("".join(f"{e[2] if rng.random() < 0.7 else 1 - e[2]}\n" for e in verification))
    results["quantity"].write_text("".join(f"{e[2] if rng.random() < 0.6 else 1 - e[2]}\n" for e in quantity))
    return results


def test_score_step_writes_unit_files_and_intervals_named_as_its_metrics(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from vsbench.steps.abid import UNIT_FILES, abid_score_step
    from vsbench.tracking.units import fetch_units

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("VSBENCH_RESAMPLES", "200")
    client = MlflowClient()
    parent = client.create_run(client.create_experiment("abid-units", str(tmp_path / "artifacts"))).info.run_id
    results = _task_files(tmp_path / "tasks", np.random.default_rng(1))
    answers = [str(results[t]) for t in ("counting", "verification", "quantity")]
    scored = abid_score_step(str(tmp_path / "tasks"), *answers,
                             parent_run_id=parent, manifest_path=str(tmp_path / "out" / "score.json"))
    metrics = scored.metrics
    for metric in ("counting_accuracy", "counting_rmse", "verification_accuracy", "quantity_accuracy",
                   "counting_accuracy_class_0"):
        assert metrics[f"{metric}_ci95_low"] <= metrics[metric] <= metrics[f"{metric}_ci95_high"], metric
    files = {task: tmp_path / "out" / name for task, name in UNIT_FILES.items()}
    assert set(scored.manifest["units"]) == {p.name for p in files.values()}
    for path in files.values():
        units = read_units(path, scored.manifest["units"][path.name]["sha256"])
        ones = evaluate(units, np.ones((1, len(units)), np.int32))
        for name, value in ones.items():  # each unit metric is a logged metric, by the same name
            assert metrics[name] == pytest.approx(float(value[0]), abs=1e-12), name
    [child] = [r for r in client.search_runs([client.get_run(parent).info.experiment_id])
               if r.data.tags.get("mlflow.runName") == "abid-score"]
    assert child.data.params["ci_resamples"] == "200" and child.data.params["ci_method"] == "expanded percentile bootstrap"
    assert child.data.metrics["counting_rmse_ci95_high"] == metrics["counting_rmse_ci95_high"]
    fetched = fetch_units(client, child, tmp_path / "cache")
    assert {"counting_accuracy", "verification_accuracy", "quantity_accuracy"} <= set(fetched)
    assert client.get_run(parent).data.metrics["quantity_accuracy_ci95_low"] == metrics["quantity_accuracy_ci95_low"]

    # Two runs over the same task files are compared paired, by question.
    again = abid_score_step(str(tmp_path / "tasks"), *answers,
                            units_dir=str(tmp_path / "again"), resamples=0)
    assert not any("_ci95_" in k for k in again.metrics)  # intervals off
    first = read_units(files["counting"])
    second = read_units(tmp_path / "again" / UNIT_FILES["counting"])
    diff = compare(first, second, Resampling(100, 0))["counting_accuracy"]
    assert diff.paired and diff.difference == 0 and diff.p_value == 1.0


def test_tracker_unit_files_never_fail_the_step(tmp_path: Path) -> None:
    from vsbench.tracking.runs import Tracker

    class Broken:
        def get_run(self, run_id: str):
            raise ConnectionError("store gone")

    tracker = Tracker("run", Broken())
    tracker.log_unit_files({str(tmp_path / "u.parquet"): "0" * 64})  # no exception: the tracker goes offline
    assert not tracker.online and "log_unit_files" in tracker.error
