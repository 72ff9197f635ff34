"""``cluster.apply`` runs kfp's resource setters with a check that does not walk the stack
(``_setters_without_stack_walk``): kfp's own calls ``inspect.stack()`` for each setter, which made
``vsbench compile`` take over 30 s under pytest. The stand-in must change nothing else: the same
compiled YAML, the same refusal for a task that is no container step, and kfp restored after.

No ``from __future__ import annotations`` here: kfp reads the components' annotations as types."""

import contextlib
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl
from kfp.dsl import pipeline_task

from vsbench.platform import cluster
from vsbench.platform.cluster import ClusterSettings, apply


@dsl.component(base_image="python:3.11")
def _step(x: int) -> int:
    return x + 1


@dsl.pipeline(name="inner")
def _inner(x: int = 1) -> int:
    return _step(x=x).output


def _compiled(tmp_path: Path, name: str) -> list[dict]:
    @dsl.pipeline(name="one-step")
    def one_step(x: int = 1) -> None:
        apply(_step(x=x), "gpu", ClusterSettings(), retries=2)
        apply(_step(x=x), "light", ClusterSettings())

    path = tmp_path / f"{name}.yaml"
    compiler.Compiler().compile(one_step, str(path))
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_the_compiled_yaml_is_the_one_kfps_own_setters_make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quick = _compiled(tmp_path, "quick")
    monkeypatch.setattr(cluster, "_setters_without_stack_walk", contextlib.nullcontext)
    assert quick == _compiled(tmp_path, "kfps-own")
    executors = quick[0]["deploymentSpec"]["executors"]
    resources = [executor["container"].get("resources", {}) for executor in executors.values()]
    assert any("accelerator" in r for r in resources) and all("cpuLimit" in r for r in resources)


def test_kfps_own_check_is_back_after_each_apply(tmp_path: Path) -> None:
    original = pipeline_task.PipelineTask._ensure_container_spec_exists
    _compiled(tmp_path, "once")
    assert pipeline_task.PipelineTask._ensure_container_spec_exists is original


def _refusal(setters) -> str:
    """The error of a resource setter on a pipeline used as a component, under ``setters``."""
    with pytest.raises(ValueError) as raised:
        @dsl.pipeline(name="outer")
        def outer() -> None:
            with setters():
                _inner(x=2).set_cpu_request("1")
    return str(raised.value)


def test_a_task_that_is_no_container_step_is_refused_as_kfp_refuses_it() -> None:
    message = _refusal(cluster._setters_without_stack_walk)
    assert message == _refusal(contextlib.nullcontext)
    assert message.startswith("set_cpu_request can only be used on single-step components")
