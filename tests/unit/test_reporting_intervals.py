"""The readers' side of issue 45 without MLflow: interval metrics read as intervals, the leaderboard's
layout within 80 columns, and the tests the readers make (paired, unpaired for other data)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np

from vsbench.reporting.leaderboard import leaderboard, render_leaderboard, render_runs
from vsbench.reporting.regression import compare_metrics
from vsbench.reporting.runs import RunRecord, display_name
from vsbench.reporting.significance import (
    bad_direction,
    compare_metric,
    resampling_of,
    split_intervals,
)
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units

START = datetime(2026, 1, 1, tzinfo=UTC)


def _units(correct: np.ndarray, prefix: str = "q") -> Units:
    return Units("query", "disc", np.array([f"{prefix}{i}" for i in range(len(correct))]),
                 {"correct": np.asarray(correct, dtype=float)}, {"acc": {"statistic": "ratio", "num": "correct"}})


def test_split_intervals_keeps_only_the_bounds_of_present_metrics():
    plain, bounds = split_intervals({"uap": 0.5, "uap_ci95_low": 0.4, "uap_ci95_high": 0.6,
                                     "orphan_ci95_low": 0.1, "map": 0.3, "map_ci95_low": 0.2})
    assert plain == {"uap": 0.5, "orphan_ci95_low": 0.1, "map": 0.3}  # map has one bound: no interval
    assert bounds == {"uap": (0.4, 0.6)}
    # The regression check never compares a bound as a metric of its own.
    drops, _, compared = compare_metrics({"uap": 0.5, "uap_ci95_low": 0.4}, {"uap": 0.5, "uap_ci95_low": 0.1},
                                         threshold=0.0)
    assert drops == [] and compared == 1


def test_leaderboard_cells_carry_intervals_and_fit_80_columns():
    long_names = [f"efficientnet_lite0 {{\"bins\":{b}}} · PCAW64,L2norm,IVF1024,PQ32x8,RFlat · 1.00[0,2]"
                  for b in (4, 8, 16)]
    records = [RunRecord(f"r{i}", START, "p", name, "disc",
                         {"uap": 0.5 + i / 10, "uap_ci95_low": 0.45 + i / 10, "uap_ci95_high": 0.55 + i / 10,
                          "accuracy_at_1": 0.3}, {})
               for i, name in enumerate(long_names)]
    frame = leaderboard(records)
    assert sorted(frame.metric.unique()) == ["accuracy_at_1", "uap"]
    uap = frame[frame.metric == "uap"].set_index("model")
    assert math.isclose(uap.loc[long_names[2], "low"], 0.65) and uap.loc[long_names[2], "best"]
    assert frame[frame.metric == "accuracy_at_1"].low.isna().all()
    text = render_leaderboard(frame, width=80, details=True)
    print(text)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert f"uap (higher is better)\n  {display_name(long_names[2])}\n    0.7 [0.65, 0.75]*\n" in text

    short = [RunRecord("r", START, "p", m, "b", {"uap": v, "uap_ci95_low": v - 0.1, "uap_ci95_high": v + 0.1}, {})
             for m, v in (("a", 0.5), ("c", 0.4))]
    wide = render_leaderboard(leaderboard(short)).splitlines()
    assert wide[1].split() == ["metric", "better", "a", "c"]  # fits: the table as it always was
    assert wide[2].split() == ["uap", "higher", "0.5", "[0.4,", "0.6]*", "0.4", "[0.3,", "0.5]"]


def test_compare_fits_100_columns_with_long_model_names_and_details_on_request():
    """Issue 48: `vsbench compare` printed its leaderboard 233 columns wide. Now the models whose names
    do not fit are m1, m2... with a legend of the full names, the intervals on request (--details)."""
    names = ['resnet34 {"weights": "random"} · Flat', 'efficientnet_lite0 {"bins": 8} · PCAW64,L2norm,Flat',
             'dino_vits16 · Flat', 'sscd_disc_mixup {"weights": "imagenet"} · PCAW512,L2norm,Flat',
             'timm:convnext_tiny.fb_in22k_ft_in1k {"pool": "gem", "weights": "imagenet"} · IVF1024,PQ32 · ' + "x" * 90]
    records = [RunRecord(f"{i:032x}", START, "vsbench-similarity", name, "disc",
                         {"uap": 0.5 + i / 10, "uap_ci95_low": 0.45 + i / 10, "uap_ci95_high": 0.55 + i / 10,
                          "accuracy_at_1": 0.3 + i / 100, "recall_at_p90": 0.1},
                         {"vsbench.image": "registry.example.com/team/vsbench-cuda:2026.11.28-abcdef",
                          "vsbench.image_id": "sha256:" + "f" * 64})
               for i, name in enumerate(names)]
    frame = leaderboard(records)
    text = render_leaderboard(frame)
    print(text)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100 and "[" not in text.split("models:")[0]  # intervals hidden
    assert lines[1].split() == ["metric", "better", "m1", "m2", "m3", "m4", "m5"]
    legend = text.split("models:\n")[1]
    # the full name, each once, as MLflow names the runs (issue 57): no options' JSON
    assert '{"' not in text
    for label, name in zip(["m1", "m2", "m3", "m4"], sorted(names)):
        assert f"  {label}  {display_name(name)}\n" in legend
    assert "m5  timm:convnext_tiny.fb_in22k_ft_in1k" in legend and "x" * 20 in legend
    assert "vsbench compare --details" in text
    detailed = render_leaderboard(frame, details=True)
    assert "0.9 [0.85, 0.95]*" in detailed and all(display_name(name) in detailed for name in names[:4])
    runs = render_runs(records)
    assert max(len(line) for line in runs.splitlines()) <= 100 and "  ran in registry.example.com" in runs
    # A leaderboard that fits keeps its intervals and names (the table as it always was).
    short = render_leaderboard(leaderboard([
        RunRecord("r", START, "p", m, "b", {"uap": v, "uap_ci95_low": v - 0.1, "uap_ci95_high": v + 0.1}, {})
        for m, v in (("a", 0.5), ("c", 0.4))]))
    assert "models:" not in short and "[0.4, 0.6]*" in short and "[low, high]: 95% bootstrap interval" in short


def test_details_wraps_a_model_name_longer_than_the_terminal_at_its_words():
    """Issue 57: `compare --details` printed a model's full name on one line, 115 columns and more, past
    a 100-column terminal. The name is wrapped at its words, continued under itself, its value after."""
    long_name = ('timm:convnext_tiny.fb_in22k_ft_in1k {"pool": "gem", "weights": "imagenet"} · '
                 'PCAW64,L2norm,IVF1024,PQ32x8,RFlat · 1.00[0,2] · 2026-11-28 finetuned on the DISC dev split')
    records = [RunRecord(f"r{i}", START, "p", name, "disc",
                         {"uap": value, "uap_ci95_low": value - 0.05, "uap_ci95_high": value + 0.05}, {})
               for i, (name, value) in enumerate([(long_name, 0.7), ("resnet34 · Flat", 0.5)])]
    shown = display_name(long_name)
    assert len(f"  {shown}") > 110  # the case seen: one line 115 columns wide
    text = render_leaderboard(leaderboard(records), details=True)
    print(text)
    lines = text.splitlines()
    assert [line for line in lines if len(line) > 100] == []
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {shown.split()[0]}"))
    block = lines[start:lines.index("    0.7 [0.65, 0.75]*") + 1]
    assert len(block) >= 3 and all(line.startswith("      ") for line in block[1:-1])  # continued under the name
    assert " ".join(line.strip() for line in block[:-1]) == shown  # every word, once, in order
    assert "  resnet34 · Flat\n    0.5 [0.45, 0.55]" in text


def test_the_readers_tests_pair_only_the_same_units_of_the_same_data():
    rng = np.random.default_rng(0)
    base = (rng.random(300) < 0.6).astype(float)
    worse = base.copy()
    worse[np.flatnonzero(base == 1)[:40]] = 0
    resampling = Resampling(200, 0)

    paired = compare_metric(_units(base), _units(worse), "acc", resampling)
    assert paired.paired and paired.high < 0 and bad_direction(paired, higher_is_better=True)
    assert not bad_direction(paired, higher_is_better=False)
    other_data = compare_metric(_units(base), _units(worse), "acc", resampling, same_data=False)
    assert not other_data.paired and other_data.test.startswith("unpaired")
    same = compare_metric(_units(base), _units(base), "acc", resampling)
    assert same.difference == 0 and same.p_value == 1 and not bad_direction(same, True)

    assert resampling_of({"ci_resamples": "500", "ci_seed": "7"}) == Resampling(500, 7)
    assert resampling_of({"ci_method": "off"}, {"ci_resamples": "50"}).resamples == 50


def test_the_html_report_prints_an_intervals_edge_note_beside_it(tmp_path) -> None:
    """Issue 55: a run's tag ``interval_note.<metric>`` (few units, zero width, resamples left out) is
    shown beside that metric's interval in the report, escaped; a metric without a note shows none."""
    from vsbench.reporting.html_report import write_report

    note = "only 2 queries (under 20): a rough interval; zero width: <every> resample gave the same value"
    records = [RunRecord("r1", START, "p", "small", "disc",
                         {"uap": 1.0, "uap_ci95_low": 1.0, "uap_ci95_high": 1.0, "accuracy_at_1": 0.5,
                          "accuracy_at_1_ci95_low": 0.1, "accuracy_at_1_ci95_high": 0.9},
                         {"interval_note.uap": note}),
               RunRecord("r2", START, "p", "big", "disc", {"uap": 0.5, "uap_ci95_low": 0.4, "uap_ci95_high": 0.6}, {})]
    path = tmp_path / "report.html"
    write_report(records, path, title="t")
    page = path.read_text()
    escaped = note.replace("<", "&lt;").replace(">", "&gt;")
    assert f'<span class="ci">[1, 1]</span> <span class="ci-note">({escaped})</span>' in page, page
    assert page.count('class="ci-note"') == 1  # r1's accuracy_at_1 and r2's uap have no note


def test_the_terminal_leaderboard_prints_each_intervals_edge_note_within_100_columns() -> None:
    """Issue 57: the report and ``compare --runs`` show a run's ``interval_note.<metric>`` beside the
    interval; the terminal leaderboard showed none, so a rough interval read as a sound one. Each note
    is printed under its benchmark's table, naming the model and the metrics it is about, within 100
    columns, whether the table keeps its intervals, hides them, or labels the models m1, m2..."""
    few = "only 8 queries (under 20): a rough interval"
    flat = "zero width: every resample gave the same value; 3 of 1000 replicates dropped (no positive left)"
    long_name = "timm:convnext_tiny.fb_in22k_ft_in1k · IVF1024,PQ32 · " + "x" * 40  # the m1, m2 legend
    records = [RunRecord("r1", START, "p", "small", "disc",
                         {"uap": 0.5, "uap_ci95_low": 0.2, "uap_ci95_high": 0.8, "accuracy_at_1": 0.4,
                          "accuracy_at_1_ci95_low": 0.1, "accuracy_at_1_ci95_high": 0.7, "recall_at_p90": 0.0,
                          "recall_at_p90_ci95_low": 0.0, "recall_at_p90_ci95_high": 0.0},
                         {"interval_note.uap": few, "interval_note.accuracy_at_1": few,
                          "interval_note.recall_at_p90": flat}),
               RunRecord("r2", START, "p", long_name, "disc", {"uap": 0.6, "uap_ci95_low": 0.5, "uap_ci95_high": 0.7},
                         {}),
               RunRecord("r3", START, "p", "plain", "vsd", {"hr_at_5": 0.6}, {})]
    for details in (False, True):
        text = render_leaderboard(leaderboard(records), details=details)
        assert max(len(line) for line in text.splitlines()) <= 100, text
        disc, vsd = text.split("== vsd ==")
        notes = disc.split("interval notes:\n")[1]
        flattened = " ".join(notes.split())
        assert f"small (accuracy_at_1, uap): {few}" in flattened and f"small (recall_at_p90): {flat}" in flattened
        assert long_name[:20] not in notes and "interval notes" not in vsd  # r2 and r3 have no note


def test_the_trend_axis_names_the_date_its_runs_started_on_not_the_last_ticks() -> None:
    """Issue 57 (seen in docs/img/compare-report-wide.png): runs of Dec 06 at 23:33 read as
    ``2026-Dec-07`` under the report's time axis, matplotlib's offset being the last tick's date (the
    padded range ends on a 00:00 tick)."""
    from vsbench.reporting.html_report import _trend_figure

    late = datetime(2026, 12, 6, 23, 33, tzinfo=UTC)
    records = [RunRecord(f"r{i}", late, "p", model, "disc", {"uap": 0.5 + i / 10}, {})
               for i, model in enumerate(("a", "b"))]
    import io

    figure = _trend_figure(records, ["uap"], {"a": "C0", "b": "C1"}, {"uap": True})
    figure.savefig(io.BytesIO(), format="png")  # drawn as the report draws it
    axis = figure.axes[0]
    assert axis.xaxis.get_offset_text().get_text() == "2026-Dec-06"
    assert "00:00" in [tick.get_text() for tick in axis.get_xticklabels()]  # the range does cross midnight
    two_days = _trend_figure([*records, RunRecord("r3", datetime(2026, 12, 7, 1, 0, tzinfo=UTC), "p", "a", "disc",
                                                  {"uap": 0.6}, {})], ["uap"], {"a": "C0", "b": "C1"}, {"uap": True})
    two_days.savefig(io.BytesIO(), format="png")
    assert two_days.axes[0].xaxis.get_offset_text().get_text() == "2026-Dec-06 to Dec-07"
