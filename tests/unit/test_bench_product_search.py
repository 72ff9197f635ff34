"""The product_search adapter: submission mode (validated features file) and the image-only baseline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.product_search.adapter import load_product_search
from vsbench.io.features import FeatureSet
from vsbench.io.inputs import InputError
from vsbench.io.storage import UnsafePathError
from vsbench.reporting.plots import close

GALLERY = ["g1", "g2", "g3", "g4"]


def _layout(root: Path, candidates: list[list[tuple[str, int]]] | None = None) -> None:
    """Two queries: q1 (source g4) with candidates g1 (1), g2 (0), g3 (1); q2 (source g1) with g2, g3 all 0."""
    candidates = candidates or [[("g1", 1), ("g2", 0), ("g3", 1)], [("g2", 0), ("g3", 0)]]
    sources = ["g4", "g1"]
    lines = [json.dumps({"index": n + 1, "source_pid": sources[n], "feedback1": "a", "feedback2": "b",
                         "feedback3": "c", "candidates": [{"candidate_pid": p, "label": y} for p, y in cands]})
             for n, cands in enumerate(candidates)]
    (root / "queries.jsonl").write_text("\n".join(lines) + "\n")
    (root / "gallery.csv").write_text("ASIN,Image ID\n" + "".join(f"B0000000{n},{g}\n" for n, g in enumerate(GALLERY)))


def _unit(rows: list[list[float]]) -> np.ndarray:
    a = np.zeros((len(rows), 128), dtype=np.float32)
    a[:, : len(rows[0])] = rows
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def _submission(root: Path, name: str = "sub.npz", **overrides: np.ndarray) -> str:
    # q1 scores g1 .9, g2 .8, g3 .1 (angles in the first two dims): AP = (1/1 + 2/3) / 2 = 5/6.
    def at(c: float) -> list[float]:
        return [c, float(np.sqrt(1 - c * c))]

    arrays = {"query_feature": _unit([[1.0, 0.0], [1.0, 0.0]]),
              "gallery_feature": _unit([at(0.9), at(0.8), at(0.1), at(0.3)])}
    arrays.update(overrides)
    np.savez(root / name, **arrays)
    return name


def _record(bench, features: dict | None = None) -> dict:
    result = bench.evaluate(features or {}, EvalSettings())
    for figure in result.figures.values():
        close(figure)
    return result.records[0]


def test_submission_map_by_hand(tmp_path: Path) -> None:
    _layout(tmp_path)
    bench = load_product_search(tmp_path, submission=_submission(tmp_path))
    assert bench.image_sets() == {}
    record = _record(bench)
    assert record == {"mode": "submission", "map": pytest.approx(5 / 6), "num_queries": 1,
                      "num_queries_without_positive": 1}


@pytest.mark.parametrize(("override", "message"), [
    ({"query_feature": np.ones((2, 64), dtype=np.float32) / 8}, r"query_feature must be a 2-D array with 128 columns"),
    ({"gallery_feature": np.full((4, 128), np.nan, dtype=np.float32)}, r"gallery_feature row 0 has a non-finite"),
    ({"gallery_feature": np.ones((4, 128), dtype=np.float32)}, r"gallery_feature row 0 has L2 norm 11.313"),
    ({"query_feature": _unit([[1.0, 0.0]] * 3)}, r"query_feature has 3 rows for 2 queries"),
    ({"gallery_feature": _unit([[1.0, 0.0]] * 5)}, r"gallery_feature has 5 rows for 4 gallery rows"),
])
def test_submission_validation_names_the_file(tmp_path: Path, override: dict, message: str) -> None:
    _layout(tmp_path)
    bench = load_product_search(tmp_path, submission=_submission(tmp_path, **override))
    with pytest.raises(InputError, match=rf"^{tmp_path / 'sub.npz'}: {message}"):
        bench.evaluate({}, EvalSettings())


def test_image_only_baseline_keeps_the_model_dimension(tmp_path: Path) -> None:
    _layout(tmp_path)
    bench = load_product_search(tmp_path)
    sets = bench.image_sets()
    assert sets["query"].ids == ("g4", "g1") and sets["query"].paths[0] == tmp_path / "images" / "g4.jpg"
    assert sets["gallery"].ids == ("g1", "g2", "g3")  # g4 is no query's candidate: not embedded
    # 3-d features; the query is its source image g4 = (1, 0, 0); g1 .9, g2 .8, g3 .1 as above.
    vectors = {"g1": [0.9, 0.436, 0], "g2": [0.8, 0.6, 0], "g3": [0.1, 0, 0.995], "g4": [1, 0, 0]}
    features = {name: FeatureSet(np.array(s.ids), np.array([vectors[i] for i in s.ids], dtype=np.float32))
                for name, s in sets.items()}
    record = _record(bench, features)
    assert record["mode"] == "image_only" and record["map"] == pytest.approx(5 / 6)


def test_repeated_source_is_embedded_once(tmp_path: Path) -> None:
    _layout(tmp_path)
    lines = (tmp_path / "queries.jsonl").read_text().splitlines()
    (tmp_path / "queries.jsonl").write_text("\n".join([lines[0], lines[0]]) + "\n")
    assert load_product_search(tmp_path).image_sets()["query"].ids == ("g4",)


def test_candidate_outside_the_gallery_names_the_line(tmp_path: Path) -> None:
    _layout(tmp_path, [[("g1", 1)], [("zz", 0)]])
    with pytest.raises(InputError, match=r"queries.jsonl:2: candidate 'zz' is not in the gallery"):
        load_product_search(tmp_path, submission="sub.npz")


def test_image_ids_cannot_leave_the_images_folder(tmp_path: Path) -> None:
    _layout(tmp_path)
    (tmp_path / "gallery.csv").write_text("ASIN,Image ID\nB01,../../etc/passwd\nB02,g2\nB03,g3\nB04,g4\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps(
        {"index": 1, "source_pid": "g4", "candidates": [{"candidate_pid": "../../etc/passwd", "label": 1}]}) + "\n")
    with pytest.raises(UnsafePathError):
        load_product_search(tmp_path)
