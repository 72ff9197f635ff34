"""Where JPEGs are decoded, as the commands name it (no torch here: ``vsbench --help`` stays fast).

``auto``: in batches on the GPU (nvJPEG, :mod:`vsbench.imaging.batched`) when the run is on CUDA,
else by the DataLoader's workers with Pillow; ``gpu``: batched on the run's device whatever it is
(on a CPU device torchvision's libjpeg-turbo decoder runs the same code path: for tests and the
fidelity check of docs/fidelity.md); ``cpu``: the workers, with Pillow, as before issue 40.
"""

from __future__ import annotations

DECODE_MODES = ("auto", "gpu", "cpu")
DECODE_HELP = ("Where JPEGs are decoded: auto (default: batched on the GPU with nvJPEG when the run is on "
               "CUDA, else the loader's workers with Pillow), gpu (batched on the run's device; on the CPU "
               "for checks) or cpu (the workers, with Pillow).")


def check_decode_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`DECODE_MODES`; else ValueError naming them."""
    if mode not in DECODE_MODES:
        raise ValueError(f"decode mode {mode!r}: use one of {', '.join(DECODE_MODES)}")
    return mode
