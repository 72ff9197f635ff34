"""What vsbench believes of a unit file read back from a store (issue 54): statistics only by name from
the fixed registry (a plugin's through its entry point), never imported from the file; metadata parsed
by a strict schema; units believed only when they give the run's own logged numbers; resamples
capped; every store call bounded, one line naming the URI."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.forged_units import (
    MARKER_MODULE,
    all_right,
    disc_units,
    logged_value,
    marker_module,
    naming_statistic,
    with_metadata,
)
from vsbench.io.store import StoreError, bounded
from vsbench.reporting.significance import resampling_of
from vsbench.stats.resample import MAX_RESAMPLES, Resampling
from vsbench.stats.statistics import ENTRY_POINT_GROUP, check_name, evaluate, find, known
from vsbench.stats.units import Units, UnitsError, units_from_bytes
from vsbench.tracking.units import UNITS_TAG, fetch_units


def plus_one(units: Units, weights: np.ndarray) -> np.ndarray:
    """A plugin's statistic: the mean of ``x`` plus one."""
    x = units.values("x")
    return (weights @ x) / weights.sum(axis=1) + 1


def _install(site: Path, entries: str, name: str = "stats-plugin") -> None:
    """A distribution in ``site`` whose ``vsbench.statistics`` entry points are ``entries``."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entries}\n")


# --- statistics by name -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["this:x", "builtins:print", f"{MARKER_MODULE}:run", "os.system", "", 5, None])
def test_a_statistic_that_is_not_registered_is_refused_and_nothing_is_imported(name, tmp_path, monkeypatch):
    marker = marker_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    with pytest.raises(UnitsError) as refused:
        find(name)
    assert "\n" not in str(refused.value) and "known: ratio" in str(refused.value)
    assert not marker.exists() and not (tmp_path / "called").exists()
    assert {"this", MARKER_MODULE} & (set(sys.modules) - before) == set()


def test_a_plugin_statistic_comes_from_its_entry_point_only(tmp_path, monkeypatch):
    _install(tmp_path, f"plugin.plus_one = {__name__}:plus_one\nratio = {__name__}:plus_one")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert find("plugin.plus_one") is plus_one and "plugin.plus_one" in known()
    units = Units("query", "toy", np.array(["a", "b"]), {"x": np.array([1.0, 3.0])},
                  {"m": {"statistic": "plugin.plus_one"}, "r": {"statistic": "ratio", "num": "x"}})
    values = evaluate(units, np.ones((1, 2), dtype=np.int32))
    assert values["m"][0] == 3.0
    assert values["r"][0] == 2.0  # a plugin cannot replace a built-in: "ratio" is still vsbench's
    # The module:function the entry point names is not a name a file can use.
    with pytest.raises(UnitsError):
        check_name(f"{__name__}:plus_one")


def test_a_plugin_statistic_that_cannot_load_is_one_line_naming_its_distribution(tmp_path, monkeypatch):
    _install(tmp_path, "broken.stat = no_such_module_anywhere:fn", name="broken-stats")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnitsError, match=r"^statistic 'broken.stat' \(no_such_module_anywhere:fn, from broken-stats\) "
                                         r"cannot be loaded: ModuleNotFoundError") as refused:
        find("broken.stat")
    assert "\n" not in str(refused.value)


def test_params_a_file_got_wrong_are_one_line_not_a_crash():
    units = Units("query", "toy", np.array(["a"]), {"x": np.array([1.0])},
                  {"m": {"statistic": "ratio", "num": "x", "nonsense": 1}})
    with pytest.raises(UnitsError, match=r"^metric 'm': statistic 'ratio' cannot use the params"):
        evaluate(units, np.ones((1, 1), dtype=np.int32))


# --- the metadata schema ----------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "expected"), [
    (lambda m: m.pop("kind") and None, "kind: Field required"),
    (lambda m: m.update(kind="everything"), "kind: Input should be"),
    (lambda m: m.update(benchmark=7), "benchmark: Input should be a valid string"),
    (lambda m: m.update(metrics=["accuracy_at_1"]), "metrics: Input should be a valid dictionary"),
    (lambda m: m["metrics"]["accuracy_at_1"].pop("statistic") and None, "metrics.accuracy_at_1.statistic: Field required"),
    (lambda m: m["metrics"]["accuracy_at_1"].update(units=1), "param 'units' is not a statistic's keyword"),
    (lambda m: m["metrics"]["accuracy_at_1"].update(num={"a": 1}), "param 'num' is not a number"),
    (lambda m: m.update(code="import os"), "code: Extra inputs are not permitted"),
    (lambda m: m.update(version=2), "unit file version '2', this vsbench reads 1"),
    (lambda m: [1, 2], "metadata is not a JSON object"),
    (lambda m: b"{not json", "metadata is not JSON"),
])
def test_broken_metadata_is_one_line_naming_the_file(change, expected):
    data = with_metadata(disc_units(), change)
    with pytest.raises(UnitsError) as refused:
        units_from_bytes(data, "run R1: unit file units/disc.parquet")
    text = str(refused.value)
    assert text.startswith("run R1: unit file units/disc.parquet: ") and expected in text and "\n" not in text


def test_honest_metadata_round_trips():
    units = disc_units()
    back = units_from_bytes(units.to_parquet_bytes())
    assert back.metrics == units.metrics and back.kind == "query" and back.benchmark == "disc"


# --- units against the run's own metric (fetch_units) -------------------------------------------------


def _run(tmp_path: Path, data: bytes, logged: dict[str, float], *, tag: str | None = None):
    """A fake MLflow run naming one unit file whose bytes are ``data`` (its tag updated to match, as a
    writer of the run would), and a client that serves the file."""
    source = tmp_path / "served.parquet"
    source.write_bytes(data)
    tags = {UNITS_TAG: tag if tag is not None else json.dumps({"units/disc.parquet": hashlib.sha256(data).hexdigest()})}
    run = SimpleNamespace(info=SimpleNamespace(run_id="R1"), data=SimpleNamespace(tags=tags, metrics=logged))

    def download(run_id: str, artifact: str, target: str) -> str:
        local = Path(target) / artifact
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(source.read_bytes())
        return str(local)

    return SimpleNamespace(download_artifacts=download), run


def test_units_that_give_the_logged_value_are_believed(tmp_path):
    units = disc_units()
    client, run = _run(tmp_path, units.to_parquet_bytes(), {"accuracy_at_1": logged_value(units), "n": 40.0})
    found = fetch_units(client, run, tmp_path / "cache")
    assert list(found) == ["accuracy_at_1"] and len(found["accuracy_at_1"]) == 40


def test_units_rewritten_with_their_tag_updated_are_refused_naming_both_values(tmp_path):
    honest = disc_units()
    client, run = _run(tmp_path, all_right(honest).to_parquet_bytes(), {"accuracy_at_1": logged_value(honest)})
    with pytest.raises(UnitsError) as refused:
        fetch_units(client, run, tmp_path / "cache")
    assert str(refused.value) == ("run R1: unit file units/disc.parquet: its units give accuracy_at_1 = 1.0, the run "
                                  "logged 0.35; these are not the units behind the logged number (refused)")


def test_a_metric_the_run_did_not_log_is_not_used(tmp_path):
    units = disc_units()
    client, run = _run(tmp_path, units.to_parquet_bytes(), {"other": 1.0})
    assert fetch_units(client, run, tmp_path / "cache") == {}


@pytest.mark.parametrize("statistic", ["this:x", "builtins:print", f"{MARKER_MODULE}:run"])
def test_a_unit_file_naming_a_module_is_refused_naming_the_run_and_file(statistic, tmp_path, monkeypatch):
    marker = marker_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    units = disc_units()
    client, run = _run(tmp_path, naming_statistic(units, statistic), {"accuracy_at_1": logged_value(units)})
    with pytest.raises(UnitsError, match=r"^run R1: unit file units/disc.parquet: metric 'accuracy_at_1': statistic"):
        fetch_units(client, run, tmp_path / "cache")
    assert not marker.exists() and not (tmp_path / "called").exists()


@pytest.mark.parametrize("tag", ['{"../../etc/passwd": "' + "0" * 64 + '"}', '{"units/a.parquet": "x"}', "[1]",
                                 "not json", '{"units/a/b.parquet": "' + "0" * 64 + '"}'])
def test_a_malformed_units_tag_is_one_line_naming_the_run(tag, tmp_path):
    client, run = _run(tmp_path, disc_units().to_parquet_bytes(), {}, tag=tag)
    with pytest.raises(UnitsError, match=r"^run R1: its vsbench.units tag is not a JSON object"):
        fetch_units(client, run, tmp_path / "cache")


# --- list columns read together ------------------------------------------------------------------------


def _logged(units: Units) -> dict[str, float]:
    """What an honest scorer logged: every metric of ``units`` at weight 1."""
    values = evaluate(units, np.ones((1, len(units)), dtype=np.int32))
    return {metric: float(value[0]) for metric, value in values.items()}


def _reshaped(units: Units, column: str, row: int, change: int) -> Units:
    """``units`` with unit ``row``'s list in ``column`` one value shorter (``change`` -1) or longer (+1:
    its last value again), every other column as it was: what a forger or a broken writer leaves."""
    from vsbench.stats.units import ListColumn

    old = units.columns[column]
    lists = [np.asarray(old.values[old.offsets[i]:old.offsets[i + 1]]) for i in range(len(old))]
    lists[row] = lists[row][:-1] if change < 0 else np.append(lists[row], lists[row][-1:])
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in lists])]).astype(np.int64)
    values = np.concatenate(lists).astype(old.values.dtype)
    return Units(units.kind, units.benchmark, units.ids, {**units.columns, column: ListColumn(values, offsets,
                 old.categories)}, units.metrics, units.clusters, units.variant)


def _disc_lists() -> Units:
    from vsbench.benchmarks.disc.units import copy_detection_units

    return copy_detection_units(["Q0", "Q0", "Q1", "Q2", "Q3"], ["R0", "R1", "R1", "R0", "R2"], [.9, .5, .8, .7, .6],
                                ["Q0", "Q1", "Q2", "Q3"], ["R0", "R1", "R2", ""], queries=["Q0", "Q1", "Q2", "Q3"])


def _vsd_lists() -> Units:
    from vsbench.benchmarks.vsd.units import vsd_units

    seeds, labels = ["s0", "s0", "s1", "s1"], [1, 0, 0, 1]
    neighbours = {"s0": (["a", "b", "c"], [.9, .8, .7]), "s1": (["d"], [.6])}  # not the tagged pairs' lengths
    return vsd_units(seeds, labels, [1, 2, 2, 1], [.9, .4, .3, .8], neighbours=neighbours, candidates=["a", "x", "y", "d"])


def _tagged_lists() -> Units:
    """A plugin's file: list columns of its own names, read together because a statistic names both."""
    from vsbench.stats.units import ListColumn

    return Units("seed", "toy", np.array(["s0", "s1"]),
                 {"s": ListColumn.from_lists([[.9, .2], [.7, .4]]), "y": ListColumn.from_lists([[1, 0], [0, 1]], np.int8)},
                 {"roc": {"statistic": "tagged_roc_auc", "score": "s", "label": "y"}})


@pytest.mark.parametrize(("make", "column", "row", "change", "said"), [
    (_disc_lists, "references", 0, +1, "unit 'Q0' has 2 values in 'positive' and 3 in 'references'"),
    (_disc_lists, "positive", 1, -1, "unit 'Q1' has 0 values in 'positive' and 1 in 'references'"),
    (_disc_lists, "scores", 0, -1, "unit 'Q0' has 2 values in 'references' and 1 in 'scores'"),
    (_vsd_lists, "top_score", 0, -1, "unit 's0' has 3 values in 'top' and 2 in 'top_score'"),
    (_vsd_lists, "candidate", 1, +1, "unit 's1' has 3 values in 'candidate' and 2 in 'label'"),
    (_tagged_lists, "y", 1, -1, "unit 's1' has 2 values in 's' and 1 in 'y'"),
])
def test_list_columns_read_together_of_other_lengths_are_refused_naming_run_file_and_both(
        tmp_path, make, column, row, change, said):
    """A unit's lists that are read value by value together (a query's references, scores and truths; a
    seed's neighbours; two columns one statistic names) must have one length: one shorter or longer was
    cut short by ``zip`` in ``vsbench export`` and the sheets, or read past, without a word (issue 54).
    The run logs the honest numbers, as a forger who keeps them would."""
    honest = make()
    client, run = _run(tmp_path, _reshaped(honest, column, row, change).to_parquet_bytes(), _logged(honest))
    with pytest.raises(UnitsError) as refused:
        fetch_units(client, run, tmp_path / "cache")
    assert str(refused.value) == (f"run R1: unit file units/disc.parquet: {said}, lists read value by value "
                                  "together (refused); score the run again")


@pytest.mark.parametrize("make", [_disc_lists, _vsd_lists, _tagged_lists])
def test_honest_list_columns_are_believed(tmp_path, make):
    """Lists of other lengths in columns not read together (a seed's tagged pairs and its neighbours)
    are no reason to refuse a file."""
    units = make()
    client, run = _run(tmp_path, units.to_parquet_bytes(), _logged(units))
    assert set(fetch_units(client, run, tmp_path / "cache")) == set(units.metrics)


# --- caps and bounds --------------------------------------------------------------------------------


def test_resamples_are_capped_in_one_line(monkeypatch):
    assert Resampling(MAX_RESAMPLES).resamples == 100_000
    monkeypatch.setenv("VSBENCH_RESAMPLES", "100000000")
    with pytest.raises(ValueError, match=r"^resamples 100,000,000 is over the cap of 100,000 \(VSBENCH_RESAMPLES"):
        Resampling.from_env()
    monkeypatch.setenv("VSBENCH_RESAMPLES", "200")
    # A run's ci_resamples param over the cap is data, not obeyed: the environment's is used instead.
    assert resampling_of({"ci_resamples": "100000000", "ci_seed": "3"}).resamples == 200


def test_a_store_that_does_not_answer_costs_the_bound_and_one_line():
    release = threading.Event()
    try:
        with pytest.raises(StoreError) as refused:
            bounded(release.wait, "http://127.0.0.1:9", "get_run", timeout=0.2)
    finally:
        release.set()
    assert str(refused.value) == ("MLflow store http://127.0.0.1:9 did not answer get_run within 0.2 s "
                                  "(VSBENCH_TRACKING_TIMEOUT); check that the server is up, or MLFLOW_TRACKING_URI")


def test_a_refused_connection_is_one_line_and_an_answer_passes_through():
    import requests
    from mlflow.exceptions import MlflowException

    def refused() -> None:
        try:
            raise requests.exceptions.ConnectionError("HTTPConnectionPool: [Errno 111] Connection refused")
        except requests.exceptions.ConnectionError as exc:
            raise MlflowException("API request failed: Max retries exceeded") from exc

    with pytest.raises(StoreError, match=r"^MLflow store http://h:1 cannot be reached \(") as down:
        bounded(refused, "http://h:1", "get_run", timeout=5)
    assert "\n" not in str(down.value)

    def unknown() -> None:
        raise MlflowException("Run 'x' not found")

    with pytest.raises(MlflowException, match="not found"):  # the store answered: its own error stays
        bounded(unknown, "http://h:1", "get_run", timeout=5)
