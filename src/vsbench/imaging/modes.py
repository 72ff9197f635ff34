"""Where JPEGs are decoded, as the commands name it, and what ``auto`` picks (no torch here: ``vsbench
--help`` stays fast).

``gpu``: batched on the run's device whatever it is (on a CPU device torchvision's libjpeg-turbo
decoder runs the same code path: for tests and the fidelity check of docs/fidelity.md); ``cpu``: the
DataLoader's workers, with Pillow, as before issue 40; ``auto``: the path *measured* faster for this
work on this kind of device, from :data:`AUTO_DECODE` (issue 58). Each row names the measurement it
rests on; a row changes only with a new measurement (bench/gpu_check.sh on that kind of device).

Why a table and not a calibration at start-up: a calibration would embed the first batches twice
on every run and every shard, and its pick would move with the load of the node; the table is one
line to read in a review, and the manifest records the pick and its reason (:func:`resolve_decode`).
"""

from __future__ import annotations

from dataclasses import dataclass

DECODE_MODES = ("auto", "gpu", "cpu")
WORKLOADS = ("embed", "train")
DECODE_HELP = ("Where JPEGs are decoded: auto (default: the path measured faster for this work on this "
               "device; for embedding that is the loader's workers with Pillow, also on CUDA, see "
               "bench/README.md), gpu (batched on the run's device; on the CPU for checks) or cpu (the "
               "workers, with Pillow).")

DEVICE, WORKERS = "device", "workers"  # the two decode paths a run records

# (workload, device type) -> (path, the measurement it rests on). A device type not listed: the workers.
AUTO_DECODE: dict[tuple[str, str], tuple[str, str]] = {
    ("embed", "cuda"): (WORKERS, "measured faster: Pillow in the workers 1,108 images/s vs the batched device "
                                 "decode 738 images/s end to end (one H200, resnet50, 29,534 photos, "
                                 "bench/gpu_check.sh, bench/README.md 2026-11-28); issue 58's feeder is not "
                                 "measured on a GPU yet"),
    ("train", "cuda"): (DEVICE, "the batched device decode as issue 40 set it (one H200: 2,394 images/s steady, "
                                "bench/README.md 2026-11-28); the workers' path was not measured for training"),
}


def check_decode_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`DECODE_MODES`; else ValueError naming them."""
    if mode not in DECODE_MODES:
        raise ValueError(f"decode mode {mode!r}: use one of {', '.join(DECODE_MODES)}")
    return mode


@dataclass(frozen=True)
class DecodeChoice:
    """The decode path a run takes (:data:`DEVICE` or :data:`WORKERS`) and why, for its manifest and params."""

    mode: str
    path: str
    reason: str

    @property
    def on_device(self) -> bool:
        return self.path == DEVICE

    def as_dict(self) -> dict[str, str | bool]:
        return {"mode": self.mode, "path": self.path, "reason": self.reason, "on_device": self.on_device}


def resolve_decode(mode: str, device_type: str, workload: str, *, device_decode_available: bool) -> DecodeChoice:
    """``mode`` resolved for a ``workload`` (:data:`WORKLOADS`) on a device of ``device_type``.

    ``gpu`` takes the device path wherever torchvision can decode (ValueError, one line, where it
    cannot); ``cpu`` never; ``auto`` the :data:`AUTO_DECODE` row, and the workers where the row picks
    the device but torchvision has no decoder for it (a build without nvJPEG)."""
    check_decode_mode(mode)
    if workload not in WORKLOADS:
        raise ValueError(f"decode workload {workload!r}: use one of {', '.join(WORKLOADS)}")
    if mode == "cpu":
        return DecodeChoice(mode, WORKERS, "--decode cpu asked for")
    if mode == "gpu":
        if not device_decode_available:
            raise ValueError(f"--decode gpu: torchvision cannot decode JPEGs on {device_type} here (needs torchvision "
                             "with nvJPEG for CUDA); use --decode cpu")
        return DecodeChoice(mode, DEVICE, "--decode gpu asked for")
    path, source = AUTO_DECODE.get((workload, device_type), (WORKERS, f"no batched decoder is preferred on {device_type}"))
    if path == DEVICE and not device_decode_available:
        return DecodeChoice(mode, WORKERS, f"torchvision cannot decode on {device_type} here (no nvJPEG)")
    return DecodeChoice(mode, path, f"auto, {workload} on {device_type}: {source}")
