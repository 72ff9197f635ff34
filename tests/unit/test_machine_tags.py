"""Every run records the machine it ran on (issue 39): the same seed gives other digits on another
CPU, so the regression check must be able to tell a move to another node from a model change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vsbench.tracking import provenance
from vsbench.tracking.provenance import MACHINE_TAG, code_tags, machine_parts, machine_tags

XEON_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx fma avx2 avx512f avx512_bf16 amx_tile amx_bf16 avx512_vnni
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu
"""
GRAVITON_CPUINFO = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes sve sve2 bf16 i8mm
CPU part\t: 0xd4f
"""


@pytest.fixture(autouse=True)
def fresh_tags() -> Iterator[None]:
    """machine_tags is computed once per process: each test sees its own environment."""
    machine_tags.cache_clear()
    yield
    machine_tags.cache_clear()


def test_cpuinfo_gives_the_model_and_the_vector_instruction_sets() -> None:
    model, flags = provenance._cpuinfo(XEON_CPUINFO)
    assert model == "Intel(R) Xeon(R) Platinum 8480+"  # the first processor's, not overwritten
    assert [f for f in provenance.ISA_FLAGS if f in flags] == [
        "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "avx2", "fma", "avx", "sse4_2"]
    model, flags = provenance._cpuinfo(GRAVITON_CPUINFO)
    assert model == "" and {"asimd", "sve2", "bf16"} <= flags


def test_every_run_carries_the_machine_and_one_line_of_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    tags = code_tags()
    parts = machine_parts(tags)
    assert set(parts) == {"cpu", "isa", "cpus", "gpu", "torch", "faiss"}
    assert all(parts.values()) and parts["torch"] != "none"  # torch is installed wherever vsbench runs
    assert tags[MACHINE_TAG].split(" · ") == [parts["cpu"], parts["isa"], f"{parts['cpus']} cpus",
                                               f"gpu {parts['gpu']}", f"torch {parts['torch']}",
                                               f"faiss {parts['faiss']}"]


def test_kernels_forced_by_the_environment_are_part_of_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    plain = machine_tags()[MACHINE_TAG]
    machine_tags.cache_clear()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    forced = machine_tags()
    assert forced["vsbench.machine.kernels"] == "ATEN_CPU_CAPABILITY=avx2"
    assert forced[MACHINE_TAG] == f"{plain} · ATEN_CPU_CAPABILITY=avx2"


def test_gpu_names_come_from_the_driver_and_respect_hidden_devices(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    for bus, model in (("0000:17:00.0", "NVIDIA H100 80GB HBM3"), ("0000:65:00.0", "NVIDIA H100 80GB HBM3")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(f"Model: \t\t {model}\nIRQ:   17\n")
    real_path = provenance.Path
    monkeypatch.setattr(provenance, "Path", lambda p: tmp_path if p == "/proc/driver/nvidia/gpus" else real_path(p))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert provenance._gpu_names() == "NVIDIA H100 80GB HBM3 x2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert provenance._gpu_names() == "none"


def test_a_run_without_machine_tags_has_no_machine_parts() -> None:
    assert machine_parts({"vsbench.host": "vm", "vsbench.version": "0.1.0"}) == {}


def test_the_reports_line_per_run_names_the_machine() -> None:
    from datetime import UTC, datetime

    from vsbench.reporting.runs import RunRecord, provenance

    tags = {"vsbench.version": "0.1.0", "vsbench.host": "node-7", **machine_tags()}
    record = RunRecord("r", datetime.now(UTC), "vsbench-abid", "baselines", "abid", {}, tags)
    assert provenance(record).endswith(f"code: vsbench 0.1.0 on node-7 ({tags[MACHINE_TAG]})")
    before = RunRecord("r", datetime.now(UTC), "vsbench-abid", "baselines", "abid", {}, {"vsbench.host": "node-7"})
    assert provenance(before).endswith("on node-7")  # a run logged before machine tags


def test_versions_are_read_beside_the_module_as_importlib_metadata_gives_them() -> None:
    from importlib import metadata

    assert provenance._version("torch", "torch") == metadata.version("torch")
    assert provenance._version("faiss", "faiss-cpu", "faiss-gpu") == metadata.version("faiss-cpu")
    assert provenance._version("no_such_module_vsbench", "no-such") == "none"
