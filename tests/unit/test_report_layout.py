"""What a person reads on the HTML report's tables and plots (issue 57): the model's display name, the
header's counts, legends that name only drawn lines and fit the figure, labels that do not overprint
and value labels that the error bars do not strike through.

The plot checks measure the drawn text's extents with matplotlib's own renderer (Agg): the same
boxes the PNG is made of, with no pixel or float tie that depends on the machine."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

from matplotlib.text import Text

from vsbench.reporting.html_report import (
    _bars_figure,
    _trend_figure,
    display_name,
    run_counts,
    write_report,
)
from vsbench.reporting.leaderboard import leaderboard
from vsbench.reporting.runs import RunRecord
from vsbench.tracking.provenance import SOURCE_TAG

START = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
LONG = 'efficientnet_lite0 {"checkpoint":"/models/sscd_disc_mixup.torchscript.pt"} · PCAW64,L2norm,Flat · 1.00[0,2]'
MODELS = ['resnet34 {"weights":"random"} · Flat · none', "resnet34 · Flat · none", LONG,
          *(f"model_{i}_with_a_rather_long_name · PCAW64,L2norm,Flat · 1.00[0,2]" for i in range(9))]


def _records(models: list[str] = MODELS, nights: int = 2, parent: str = "cmd") -> list[RunRecord]:
    records = []
    for night, (i, model) in itertools.product(range(nights), enumerate(models)):
        value = 0.40 + 0.03 * i + 0.01 * night
        metrics = {"uap": value, "uap_ci95_low": value - 0.2, "uap_ci95_high": value + 0.25,
                   "accuracy_at_1": value + 0.1, "recall_at_p90": value - 0.1}
        records.append(RunRecord(f"e{night}-{i}", START + timedelta(days=night), "vsbench-similarity", model, "disc",
                                 metrics, {SOURCE_TAG: "cli"}, parent_run_id=f"{parent}{night}"))
    return records


def test_display_name_reads_options_as_mlflow_names_them():
    assert display_name('resnet34 {"weights":"random"} · Flat · none') == "resnet34-random · Flat · none"
    assert display_name('histogram {"bins":4}') == "histogram-bins4"
    assert display_name("resnet34 · Flat · none") == "resnet34 · Flat · none"
    assert display_name("resnet34 {not json") == "resnet34 {not json"  # read as data, never as code


def test_header_counts_commands_and_evaluations():
    records = _records(MODELS[:3], nights=2)
    assert run_counts(records) == "2 commands, 6 evaluations"
    assert run_counts([]) == "no runs"


def test_report_columns_show_display_names_and_counts(tmp_path):
    page = write_report(_records(MODELS[:3]), tmp_path / "r.html", title="t").read_text()
    head = page.split("<thead>")[1].split("</thead>")[0].replace("<wbr>", "")
    assert '<th title="resnet34 {&quot;weights&quot;:&quot;random&quot;} · Flat · none">resnet34-random · Flat · none</th>' \
        in head
    assert "{" not in "".join(re.findall(r">([^<]*)</th>", head))  # no raw options JSON in any header text
    assert "2 commands, 6 evaluations" in page and "runs (pipelines and commands)" not in page


def _drawn(figure):
    """Draw ``figure`` on the Agg canvas the PNG is saved from, and return its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def _frame(models=MODELS):
    frame = leaderboard(_records(models))
    frame["indistinguishable"] = False
    return frame


def test_value_labels_start_past_their_whiskers():
    frame = _frame()
    colors = {m: "C0" for m in MODELS}
    figure = _bars_figure(frame, ["uap"], colors, {"uap": True})
    renderer = _drawn(figure)
    axis = figure.axes[0]
    labels = [t for t in axis.texts if t.get_gid() == "value-label"]
    assert len(labels) == len(MODELS)
    rows = frame[frame["metric"] == "uap"].sort_values("model")
    for label, high in zip(labels, rows["high"]):
        whisker_end = axis.transData.transform((high, 0))[0]
        assert label.get_window_extent(renderer).x0 >= whisker_end, label.get_text()


def test_reference_labels_do_not_overprint():
    models = ['resnet34 {"weights":"random"} · Flat · none (random features)',
              'resnet50 {"weights":"random"} · Flat · none (random features)', "resnet34 · Flat · none"]
    frame = _frame(models)
    figure = _bars_figure(frame, ["uap"], {m: "C1" for m in models}, {"uap": True})
    renderer = _drawn(figure)
    texts = [t for t in figure.findobj(Text) if t.get_text().strip() and t.get_visible()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    named = [text for text, _ in boxes if "random features" in text]
    assert named, "the reference lines are named"
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        assert not box_a.overlaps(box_b), (a, b)


def test_trend_legend_fits_and_names_only_drawn_models():
    records = _records()
    colors = {m: f"C{i % 10}" for i, m in enumerate([*MODELS, "never_run · Flat · none"])}
    figure = _trend_figure(records, ["accuracy_at_1", "recall_at_p90", "uap"], colors,
                           {"uap": True, "accuracy_at_1": True, "recall_at_p90": True})
    renderer = _drawn(figure)
    [legend] = figure.legends
    names = [t.get_text() for t in legend.get_texts()]
    assert names == [display_name(m) for m in MODELS]  # not the model that has no point
    box, page = legend.get_window_extent(renderer), figure.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1 and box.y1 <= page.y1, (box, page)
