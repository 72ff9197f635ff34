"""images/cuda_check.py: the GPU architectures a library's kernels run on, read from its embedded
CUDA fat binaries, on a machine without a GPU (the CUDA image's build runs it)."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("cuda_check", ROOT / "images" / "cuda_check.py")
cuda_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cuda_check)


def fatbin(*entries: tuple[int, int]) -> bytes:
    """A fat binary as nvcc embeds it: header, then (kind, sm) entries with a payload each."""
    body = b""
    for kind, sm in entries:
        payload = b"\0" * 24
        header = struct.pack("<HHIQIII", kind, 0x101, 64, len(payload), 0, 0, 0) + struct.pack("<I", sm)  # sm at 28
        body += header.ljust(64, b"\0") + payload
    return b"\x7fELF junk" + struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body + b"trailing"


def test_archs_are_read_from_every_fat_binary() -> None:
    data = fatbin((2, 70), (2, 80)) + b"between" + fatbin((2, 90), (1, 90))
    assert cuda_check.fatbin_archs(data) == {("sass", 70), ("sass", 80), ("sass", 90), ("ptx", 90)}
    assert cuda_check.fatbin_archs(b"no cuda here") == set()


@pytest.mark.parametrize(("archs", "sm", "runs"), [
    ({("sass", 80)}, 80, True),
    ({("sass", 80)}, 86, True),  # same family, newer minor: runs
    ({("sass", 80)}, 90, False),  # faiss-gpu-cu12 1.14 on an H100
    ({("sass", 86)}, 80, False),  # newer minor's code on an older GPU: no
    ({("sass", 80), ("ptx", 80)}, 90, True),  # the driver compiles the PTX
    ({("ptx", 90)}, 80, False),
    ({("sass", 90), ("ptx", 90)}, 100, True),
])
def test_which_gpus_the_code_runs_on(archs: set[tuple[str, int]], sm: int, runs: bool) -> None:
    assert cuda_check.runs_on(archs, sm) is runs


def test_the_check_fails_naming_the_missing_architecture(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old, new = tmp_path / "libfaiss-cu12-1.14.so", tmp_path / "libfaiss-1.15.so"
    old.write_bytes(fatbin((2, 70), (2, 80)))
    new.write_bytes(fatbin((2, 70), (2, 75), (2, 80), (2, 86), (2, 89), (2, 90), (1, 90)))
    assert cuda_check.main(["--require", "80,90", str(old)]) == 1
    assert "no GPU code for sm_90 (found: sass sm_70, sass sm_80)" in capsys.readouterr().err
    assert cuda_check.main(["--require", "80,90", str(new)]) == 0


def test_the_cuda_image_pins_a_faiss_with_h100_code_and_its_cuda_12_libraries() -> None:
    """faiss-gpu (not faiss-gpu-cu12, whose 1.14 wheel has no sm_90 code), at the CPU image's faiss
    version, its CUDA 12 runtime wheels locked, and the image's build running the check."""
    pins = {line.split("==")[0]: line.split("==")[1].split()[0]
            for line in (ROOT / "images" / "lock-cuda.txt").read_text().splitlines() if "==" in line}
    cpu = (ROOT / "images" / "requirements-cpu.txt").read_text()
    assert "faiss-gpu-cu12" not in pins and f"faiss-cpu=={pins['faiss-gpu']}" in cpu
    for needed in ("nvidia-cuda-runtime-cu12", "nvidia-cublas-cu12", "nvidia-curand-cu12"):
        assert pins[needed].startswith(("12.", "10.")), needed
    dockerfile = (ROOT / "images" / "Dockerfile.cuda").read_text()
    assert "cuda_check.py --require 80,90" in dockerfile
    assert "!images/cuda_check.py" in (ROOT / "images" / "Dockerfile.cuda.dockerignore").read_text()
