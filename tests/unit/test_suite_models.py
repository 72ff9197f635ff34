"""The nightly suite's ``models`` x ``benchmarks``: one line adds a model to every benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsbench.runspec.suite import Suite

BASE = """
benchmarks:
  - {benchmark: disc, root: /d, codecs: "Flat;PCAW8,Flat", num_shards: 2}
  - {benchmark: copydays, root: /c}
models:
  - {model: efficientnet_lite0}
"""


def test_models_times_benchmarks_become_entries(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(BASE)
    before = Suite.load(path)
    assert [e.name for e in before.entries] == ["disc-efficientnet-lite0", "copydays-efficientnet-lite0"]
    assert before.entries[0].codecs == "Flat;PCAW8,Flat" and before.entries[0].num_shards == 2
    path.write_text(BASE + '  - {model: "timm:vit_small_patch14_dinov2.lvd142m", model_options: {weights: /m.safetensors}}\n')
    after = Suite.load(path)
    added = [e for e in after.entries if e.model.startswith("timm:")]
    assert [e.benchmark for e in added] == ["disc", "copydays"]
    assert all(e.model_options == {"weights": "/m.safetensors"} for e in added)


def test_one_model_twice_needs_labels(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(BASE + "  - {model: efficientnet_lite0, model_options: {weights: random}}\n")
    with pytest.raises(ValueError, match="repeat the same benchmark and model"):
        Suite.load(path)
    path.write_text(BASE + "  - {model: efficientnet_lite0, model_options: {weights: random}, label: lite0-random}\n")
    assert "disc-lite0-random" in [e.name for e in Suite.load(path).entries]


def test_models_without_benchmarks_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("models:\n  - {model: m}\n")
    with pytest.raises(ValueError, match="'models' and 'benchmarks' go together"):
        Suite.load(path)


def test_the_shipped_suite_keeps_its_pairs() -> None:
    names = sorted(e.name for e in Suite.load().entries)
    assert names == sorted(["disc-torchscript", "disc-efficientnet-lite0", "copydays-efficientnet-lite0",
                            "vsd-dino-vits16", "abid-embeddings-efficientnet-lite0",
                            "disc-efficientnet-lite0-ivf-sharded"])  # a large gallery in reference shards


def test_the_regression_rule_takes_measured_spreads_and_refuses_negative_ones(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(BASE + "regression:\n  threshold: 0.02\n  spread: {'*__uap': 0.01, counting_accuracy: 0.05}\n")
    assert Suite.load(path).regression.spread == {"*__uap": 0.01, "counting_accuracy": 0.05}
    path.write_text(BASE + "regression:\n  spread: {'*__uap': -0.01}\n")
    with pytest.raises(ValueError, match=r"regression.spread: \['\*__uap'\] must be >= 0"):
        Suite.load(path)
