"""Batched JPEG decoding on the run's device (nvJPEG on CUDA), then resize and crop there too.

Why: on an H100 the embed step ran at 2,166 images/s end to end while the network takes 12,000+
and ``torchvision.io.decode_jpeg(list, device="cuda")`` with a resize on the GPU decodes 9,345
(issue 40): the DataLoader workers decoding with Pillow were the bottleneck. In this mode the
workers only read each file's bytes (and its header, see :func:`read_encoded`); one batched
call decodes them on the device, and the resize and center crop of the model's own
:class:`~vsbench.imaging.preprocessing.Preprocessing` (size, crop, interpolation; the mean/std stay
where they were, in the caller's normalization) run there as tensor operations.

The code is device-generic: with a CPU device the same calls run torchvision's libjpeg-turbo
decoder (``--decode gpu`` with ``--device cpu``, meant for checks: tests/unit/test_batched_decode.py
and docs/fidelity.md bound this path against the Pillow path on the CPU).

Fallback, one image at a time, counted (:attr:`BatchDecoder.cpu_fallbacks`): a file whose header
Pillow does not call a plain JPEG in mode RGB or L (PNG, CMYK/YCCK, an Adobe RGB JPEG, an MPO)
is never sent to the device; a file the device decoder refuses (odd subsampling, a damaged
stream) is retried alone, then decoded by the caller's CPU path from the bytes already read.
That CPU path is the Pillow path of :mod:`vsbench.retrieval.embed` / :mod:`vsbench.abid.data`,
so a corrupt file's listed reason is its old reason.

What stays on the CPU and why: the pixel cap (Pillow's header, in the worker, before anything is
decoded: a decompression bomb must never reach the GPU's memory) and, for embedding, the strict
completeness check (:func:`vsbench.imaging.jpeg.check_complete`: a luma-only decode at 1/8 scale,
~0.4 ms, in the worker). Neither nvJPEG nor torchvision's CPU decoder refuses a scan that ends
early before an end-of-image marker (libjpeg-turbo warns and fills grey rows), so the check cannot
move to the device; in the worker it runs on the loader's cores in parallel, a fifth of the
Pillow decode and resize it replaces. ABID training checks every image once per run before
training (:func:`vsbench.abid.data.split_available`), so its workers only read bytes.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from vsbench.imaging import jpeg
from vsbench.imaging.limits import open_image
from vsbench.imaging.modes import DecodeChoice, resolve_decode
from vsbench.imaging.preprocessing import Preprocessing

# torchvision warns on every decode_jpeg call from 0.29 (TorchCodec supersedes it); said once in docs/fidelity.md.
_DEPRECATION = r".*decoding and encoding capabilities of TorchVision are deprecated.*"


def device_decode_available(device: torch.device) -> bool:
    """Whether torchvision can decode JPEGs on ``device`` (nvJPEG built in, for CUDA)."""
    try:
        import torchvision.io  # noqa: F401 - registers torch.ops.image

        ops = torch.ops.image
        return hasattr(ops, "decode_jpegs_cuda") if device.type == "cuda" else hasattr(ops, "decode_jpeg")
    except (ImportError, RuntimeError, AttributeError):
        return False


def decode_choice(mode: str, device: torch.device, workload: str) -> DecodeChoice:
    """``mode`` (:data:`~vsbench.imaging.modes.DECODE_MODES`) resolved for ``workload`` on ``device``
    (:func:`~vsbench.imaging.modes.resolve_decode`: ``auto`` takes the path measured faster there,
    ``gpu`` the batched tensor decode on any device, failing in one line where torchvision cannot
    decode, ``cpu`` the workers)."""
    return resolve_decode(mode, device.type, workload, device_decode_available=device_decode_available(device))


def uses_device_decode(mode: str, device: torch.device, workload: str) -> bool:
    """Whether :func:`decode_choice` takes the batched tensor decode."""
    return decode_choice(mode, device, workload).on_device


def device_decodable(header: Any) -> bool:
    """Whether a file Pillow opened (header only) goes to the device decoder: a JPEG in mode RGB or
    L (what :mod:`vsbench.imaging.jpeg` reproduces too), not an Adobe JPEG stored as RGB (libjpeg
    reads its transform flag; nvJPEG's handling is not known here)."""
    if header.format != "JPEG" or header.mode not in jpeg.FAST_MODES:
        return False
    return not ("adobe" in header.info and header.info.get("adobe_transform") == 0)


def read_encoded(path: Path, *, check_complete: bool) -> tuple[np.ndarray, bool]:
    """(the file's bytes as uint8, whether the device may decode it), for a loader worker: the file
    is read once, and its header and pixels come from those bytes (:func:`encoded_bytes`)."""
    return encoded_bytes(Path(path).read_bytes(), check_complete=check_complete, name=path)


def encoded_bytes(data: bytes, *, check_complete: bool, name: str | Path | None = None) -> tuple[np.ndarray, bool]:
    """:func:`read_encoded` of bytes already read (the embed step hashes the same buffer: issue 46).

    The header is read by Pillow first (:func:`~vsbench.imaging.limits.open_image`, from the same
    bytes, ``name`` in its reasons): the pixel cap and a file that is no image raise here, with the
    reason the CPU path gives. ``check_complete`` runs :func:`~vsbench.imaging.jpeg.check_complete`
    on a device-decodable JPEG (raises :class:`~vsbench.imaging.jpeg.TruncatedJpeg`); files for the
    CPU fallback are checked there."""
    with open_image(io.BytesIO(data), name=name) as header:
        decodable = device_decodable(header)
    if decodable and check_complete:
        jpeg.check_complete(data)
    return np.frombuffer(data, dtype=np.uint8), decodable


@dataclass(frozen=True)
class Encoded:
    """Undecoded images of one dataset item (``files`` of them: one image, or a row's partners)."""

    data: tuple[np.ndarray, ...]
    decodable: tuple[bool, ...]

    @classmethod
    def read(cls, paths: Sequence[Path], *, check_complete: bool = False) -> Encoded:
        read = [read_encoded(p, check_complete=check_complete) for p in paths]
        return cls(tuple(d for d, _ in read), tuple(ok for _, ok in read))


class EncodedBatch:
    """A batch of :class:`Encoded` items packed into one byte buffer (one shared-memory tensor per
    batch, not one per file), ``per_item`` images an item, items in order.

    ``len()`` and ``shape`` are the item count and (items, per_item), as for the uint8 tensor the
    CPU path's loader gives; ``pin_memory`` lets the DataLoader pin it like a tensor."""

    def __init__(self, data: torch.Tensor, offsets: torch.Tensor, decodable: torch.Tensor, per_item: int) -> None:
        self.data, self.offsets, self.decodable, self.per_item = data, offsets, decodable, per_item

    @classmethod
    def pack(cls, items: Sequence[Encoded]) -> EncodedBatch:
        per_item = {len(item.data) for item in items}
        if len(per_item) != 1:
            raise ValueError(f"items of one batch hold {sorted(per_item)} images each: need one count")
        arrays = [a for item in items for a in item.data]
        sizes = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        data = torch.from_numpy(np.concatenate(arrays) if arrays else np.zeros(0, np.uint8))
        decodable = torch.tensor([ok for item in items for ok in item.decodable], dtype=torch.bool)
        return cls(data, torch.from_numpy(offsets), decodable, per_item.pop())

    def __len__(self) -> int:
        return self.count // self.per_item

    @property
    def count(self) -> int:
        """Images in the batch."""
        return len(self.offsets) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), self.per_item

    def files(self) -> list[torch.Tensor]:
        """Each image's bytes: views of the one buffer (1-D, contiguous, on the CPU)."""
        bounds = self.offsets.tolist()
        return [self.data[bounds[i]:bounds[i + 1]] for i in range(self.count)]

    def pin_memory(self, *args: Any) -> EncodedBatch:
        return EncodedBatch(self.data.pin_memory(*args), self.offsets, self.decodable, self.per_item)


def collate_encoded(items: list[Any]) -> Any:
    """``default_collate`` that packs :class:`Encoded` leaves into one :class:`EncodedBatch`
    (labels and other fields collate as before)."""
    from torch.utils.data._utils.collate import collate, default_collate_fn_map

    return collate(items, collate_fn_map={**default_collate_fn_map,
                                          Encoded: lambda batch, **_: EncodedBatch.pack(batch)})


def decode_files(files: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """RGB uint8 (3, H, W) tensors on ``device``, one per JPEG in ``files``; None where the
    decoder refused one. One batched call first (torchvision returns nothing when any file fails),
    then each file alone."""
    from torchvision.io import ImageReadMode, decode_jpeg

    if not files:
        return []
    if device.type == "cuda":
        # torchvision's decoder allocates its outputs on this stream but writes them from a stream of its
        # own that does not wait for this one (pytorch/vision PR 9606): a block freed here while kernels
        # queued on this stream still read it could be overwritten early. One wait per batch rules it out.
        torch.cuda.current_stream(device).synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DEPRECATION)
        try:
            return list(decode_jpeg(list(files), mode=ImageReadMode.RGB, device=device))
        except RuntimeError:
            pass
        out: list[torch.Tensor | None] = []
        for data in files:
            try:
                out.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
            except RuntimeError:
                out.append(None)
        return out


def resized_size(width: int, height: int, preprocessing: Preprocessing) -> tuple[int, int]:
    """(width, height) after the resize step, rounded as torchvision's ``Resize(int)`` does."""
    size = preprocessing.resize_size
    if preprocessing.resize_mode == "square":
        return size, size
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def crop_box(target: tuple[int, int], preprocessing: Preprocessing) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of the center crop in the resized image (all of it without one)."""
    if not preprocessing.crops:
        return 0, 0, target[0], target[1]
    side = preprocessing.input_size
    if preprocessing.crop_offset == "floor":  # Hugging Face's image processors
        left, top = (target[0] - side) // 2, (target[1] - side) // 2
    else:  # torchvision's CenterCrop: round half to even
        left, top = round((target[0] - side) / 2.0), round((target[1] - side) / 2.0)
    return left, top, left + side, top + side


def resize_and_crop(images: torch.Tensor, preprocessing: Preprocessing) -> torch.Tensor:
    """(N, 3, H, W) uint8 images of one size -> the network's uint8 input size, as the Pillow path
    does it: where Pillow's ``draft`` would decode the JPEG at 1/2, 1/4 or 1/8 scale, the mean of
    each scale x scale block stands in for it (nvJPEG has no DCT scaling; without this, a photo 8x
    the target would be filtered with a kernel 8x wider than on the CPU path); then the antialiased
    resize with the preprocessing's filter (in float32, rounded to uint8 as Pillow stores its
    result) and the center crop, a crop reaching outside the image padded with zeros as Pillow's
    ``crop`` pads."""
    height, width = images.shape[-2:]
    target = resized_size(width, height, preprocessing)
    scale = jpeg.draft_scale((width, height), target)
    if scale > 1:  # the Pillow path decodes such a JPEG at 1/scale (DCT scaling): a block mean, near enough
        pooled = F.avg_pool2d(images.float(), kernel_size=scale, stride=scale, ceil_mode=True)
        images = pooled.round_().to(torch.uint8)
        height, width = images.shape[-2:]
    if (width, height) != target:
        mode = {"nearest": "nearest-exact", "bilinear": "bilinear", "bicubic": "bicubic"}[preprocessing.interpolation]
        resized = F.interpolate(images.float(), size=(target[1], target[0]), mode=mode,
                                antialias=mode != "nearest-exact",
                                align_corners=None if mode == "nearest-exact" else False)
        images = resized.round_().clamp_(0, 255).to(torch.uint8)
    left, top, right, bottom = crop_box(target, preprocessing)
    if (left, top, right, bottom) == (0, 0, target[0], target[1]):
        return images
    height, width = bottom - top, right - left  # the crop's size, before the padding moves its corner
    padding = (max(0, -left), max(0, right - target[0]), max(0, -top), max(0, bottom - target[1]))
    if any(padding):
        images = F.pad(images, padding)
        left, top = left + padding[0], top + padding[2]
    return images[..., top:top + height, left:left + width]


@dataclass
class BatchDecoder:
    """Decodes :class:`EncodedBatch` es on ``device`` into the network's uint8 input.

    ``fallback(data) -> (H, W, 3) uint8`` is the caller's CPU path for one file's bytes (it raises
    for a file nothing can read). Counts: ``device_decoded`` images, ``cpu_fallbacks`` images the
    CPU path decoded instead (header not for the device, or refused by it)."""

    device: torch.device
    preprocessing: Preprocessing
    fallback: Callable[[bytes], np.ndarray]
    device_decoded: int = 0
    cpu_fallbacks: int = 0

    def decode(self, batch: EncodedBatch) -> tuple[list[torch.Tensor | None], list[str]]:
        """One uint8 (3, h, w) tensor on the device per image (the preprocessing's output size;
        None for a file neither decoder reads, with the reason beside it, else "")."""
        with torch.autocast(self.device.type, enabled=False):  # resize in float32 whatever the caller's AMP
            return self._decode(batch)

    def _decode(self, batch: EncodedBatch) -> tuple[list[torch.Tensor | None], list[str]]:
        files = batch.files()
        decodable = batch.decodable.tolist()
        on_device = [i for i, ok in enumerate(decodable) if ok]
        decoded = decode_files([files[i] for i in on_device], self.device)
        images: list[torch.Tensor | None] = [None] * len(files)
        reasons = [""] * len(files)
        by_size: dict[tuple[int, ...], list[int]] = {}
        for i, image in zip(on_device, decoded):
            if image is not None and image.dim() == 3 and image.shape[0] == 3:
                images[i] = image
                by_size.setdefault(tuple(image.shape), []).append(i)
        for members in by_size.values():  # one resize per source size: ABID's 224x224 photos are one batch
            done = resize_and_crop(torch.stack([images[i] for i in members]), self.preprocessing)
            for i, image in zip(members, done):
                images[i] = image
        self.device_decoded += sum(len(m) for m in by_size.values())
        for i in range(len(files)):
            if images[i] is not None:
                continue
            self.cpu_fallbacks += 1
            try:
                pixels = self.fallback(files[i].numpy().tobytes())
            except Exception as exc:  # noqa: BLE001 - decoders raise many types; each becomes a listed failure
                reasons[i] = f"{type(exc).__name__}: {exc}"
                continue
            images[i] = torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1).to(self.device)
        return images, reasons

    def stack(self, batch: EncodedBatch) -> torch.Tensor:
        """The batch as one (N, 3, H, W) uint8 tensor on the device, for inputs of one size (ABID
        training: every image is checked readable before training, so a failure here is an error)."""
        images, reasons = self.decode(batch)
        bad = [r for r in reasons if r]
        if bad:
            raise ValueError(f"{len(bad)} image(s) of a batch could not be decoded, e.g. {bad[0]}")
        return torch.stack(images)  # type: ignore[arg-type]

    def stats(self) -> dict[str, int]:
        return {"device_decoded": self.device_decoded, "cpu_fallbacks": self.cpu_fallbacks}

