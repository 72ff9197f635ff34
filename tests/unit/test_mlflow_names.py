"""What MLflow's pages show of an evaluation (issue 57), without a server: names that lead with what
differs, the headline as read with its interval low then high, counts kept out of the metrics, a
benchmark's splits as one model's rows, and a parent's summary metrics kept out of the reports."""

from __future__ import annotations

from vsbench.reporting.runs import split_metrics
from vsbench.tracking.evaluations import Embedder, evaluations_of, headline_text, leaderboard_view_state
from vsbench.tracking.names import is_summary_metric, summary_metric

PAIRS = [{"variant": "easy_diffseq", "distance": "l2", "roc_auc": 0.9, "pr_ap": 0.6, "num_positives": 40},
         {"variant": "hard_sameseq", "distance": "l2", "roc_auc": 0.8, "pr_ap": 0.4, "num_positives": 40},
         {"variant": "mean", "distance": "l2", "mean_pr_ap": 0.5}]


def _pairs(model: str = "resnet34") -> list:
    return evaluations_of("patch_pairs", PAIRS, Embedder(model=model, options={"weights": "random"}), run_params={},
                          split_field="variant", headline_split="mean")


def test_the_headline_reads_value_then_low_then_high():
    metrics = {"uap": 0.86951, "uap_ci95_high": 0.95312, "uap_ci95_low": 0.77138, "accuracy_at_1": 0.5}
    assert headline_text(metrics, "uap") == "0.8695 [0.7714, 0.9531]"  # low first, whatever the dict's order
    assert headline_text({"uap": 0.5}, "uap") == "0.5000"  # no interval logged: the value alone
    assert headline_text({"mean_rank": 123.456, "mean_rank_ci95_low": 100.0, "mean_rank_ci95_high": 150.0},
                         "mean_rank") == "123.5 [100, 150]"
    assert headline_text(metrics, "recall") == ""
    disc = evaluations_of("disc", [{"codec": "Flat", "score_norm": "none", **metrics}],
                          Embedder(model="resnet34", options={"weights": "random"}), run_params={})[0]
    assert disc.params["headline"] == disc.tags()["vsbench.headline.value"] == "0.8695 [0.7714, 0.9531]"
    assert disc.params["model_name"] == "resnet34-random" and disc.run_name == "resnet34-random · Flat · none"
    view = leaderboard_view_state(disc)
    assert view["selectedColumns"][:3] == ["params.`headline`", "params.`model_name`", "metrics.`uap`"]
    assert view["columnOrder"][:3] == ["attributes.`Run Name`", "params.`headline`", "params.`model_name`"]
    assert view["columnWidths"]["params.`model_name`"] >= 180  # MLflow applies widths of ordered columns only
    assert "params.`model_name`" in view["selectedColumns"] and "params.`model_options`" not in view["selectedColumns"]


def test_splits_are_rows_of_one_model_and_counts_are_not_metrics():
    easy, hard, mean = _pairs()
    assert {e.model_key for e in (easy, hard, mean)} == {easy.model_key}  # one model: (resnet34-random, l2)
    assert easy.model_name == mean.model_name == "resnet34-random · l2"
    assert [e.run_name for e in (easy, mean)] == ["resnet34-random · l2 · easy_diffseq", "resnet34-random · l2 · mean"]
    assert "num_positives" not in easy.metrics and easy.params["num_positives"] == "40"  # not ranked
    assert easy.tags()["vsbench.split"] == "easy_diffseq" and [e.ranks for e in (easy, hard, mean)] == [False, False, True]
    assert easy.series != hard.series  # nights pair split by split
    assert _pairs("efficientnet_lite0")[0].model_key != easy.model_key
    view = leaderboard_view_state(mean)
    assert view["searchFilter"].endswith("tags.`vsbench.split` = 'mean'") and view["orderByKey"] == "metrics.`mean_pr_ap`"
    assert "params.`distance`" in view["selectedColumns"]


def test_a_parents_summary_metrics_are_not_a_second_record():
    name = summary_metric("disc", "uap_ci95_low")
    assert name == "best.disc.uap_ci95_low" and is_summary_metric(name) and not is_summary_metric("uap")
    pairs = split_metrics({"best.disc.uap": 0.5, "counting_accuracy": 0.7}, {}, "vsbench-abid")
    assert pairs == {("baselines", "abid"): {"counting_accuracy": 0.7}}, pairs
