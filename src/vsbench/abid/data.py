"""Datasets over the resized bin images, and the batch transform that runs on the device.

Images travel to the device as uint8 (4x less to copy than float32); normalization, the random
horizontal flip and the channels_last layout happen there, batch-wide. With the batched device
decode (``decode`` "auto" on CUDA, or "gpu": :mod:`vsbench.imaging.batched`) the workers only read
each file's bytes and the transform decodes the batch on the device first, to the same size with
the same bilinear filter (:func:`abid_preprocessing`: the one spec both paths read). The flip is drawn from a
generator seeded by (seed, epoch, batch), so a resumed run repeats exactly what it would have
done without the interruption.
"""

from __future__ import annotations

import io
import os
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch.utils.data import Dataset

from vsbench.abid.ids import local_name
from vsbench.abid.pairs import SiamesePairSampler
from vsbench.imaging import batched, jpeg
from vsbench.imaging.batched import BatchDecoder, Encoded, EncodedBatch
from vsbench.imaging.limits import check_failure_rate, open_image
from vsbench.io.storage import atomic_write_json
from vsbench.models.registry import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from vsbench.runtime.device import DeviceSetup

UNREADABLE_NAME = "unreadable_images.json"


def image_path(root: Path, idx0: int) -> Path:
    """Resized image of the 0-based index ``idx0`` (the challenge's ``'%05d.jpg' % (idx0 + 1)``)."""
    return root / local_name(idx0 + 1, "image")


def abid_preprocessing(size: int) -> Preprocessing:
    """What the ABID baselines feed their networks, as a :class:`~vsbench.models.registry.Preprocessing`:
    a plain bilinear resize to ``size`` x ``size`` (no crop), ImageNet mean and std."""
    return Preprocessing(input_size=size, resize_size=size, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                         interpolation="bilinear")


def training_decoder(setup: DeviceSetup, size: int, decode: str) -> BatchDecoder | None:
    """The batched device decoder ``decode`` asks for on this device, falling back to
    :func:`load_image` one file at a time; None: the workers decode with Pillow."""
    if not batched.uses_device_decode(decode, setup.device, "train"):
        return None
    return BatchDecoder(setup.device, abid_preprocessing(size),
                        lambda data: load_image(io.BytesIO(data), size).permute(1, 2, 0).numpy())


def decode_stats(decoder: BatchDecoder | None) -> dict[str, Any]:
    """Where a run's JPEGs were decoded, for its summary: on the device (with the counts of
    :class:`~vsbench.imaging.batched.BatchDecoder`) or by the loader's workers."""
    return {"on_device": True, **decoder.stats()} if decoder is not None else {"on_device": False}


def decode_metrics(stats: dict[str, Any]) -> dict[str, float]:
    """The step metric of :func:`decode_stats`: images the CPU decoded one by one instead of the device."""
    return {"decode_cpu_fallbacks": float(stats["cpu_fallbacks"])} if stats.get("on_device") else {}


def collate_for(decoder: BatchDecoder | None) -> Any:
    """The loaders' ``collate_fn``: packs the workers' bytes for a decoder (None: torch's default)."""
    return batched.collate_encoded if decoder is not None else None


def flat_pairs(partners: torch.Tensor | EncodedBatch) -> torch.Tensor | EncodedBatch:
    """A batch of rows' partners, (B, pairs, C, H, W), as one batch of images: a packed batch
    already holds them row after row."""
    return partners.flatten(0, 1) if isinstance(partners, torch.Tensor) else partners


def load_image(path: Path | IO[bytes], size: int) -> torch.Tensor:
    """uint8 CHW tensor of side ``size`` (Pillow decode; bilinear, as the resize step)."""
    from PIL import Image

    with open_image(path) as image:  # an image over the pixel cap is refused from its header
        if image.size != (size, size):
            image.draft("RGB", (size, size))
        rgb = image.convert("RGB")
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.asarray(rgb).copy()).permute(2, 0, 1)


def image_problem(path: Path) -> str:
    """Why the image at ``path`` cannot be trained on ("" when it can): fully decoded once, with
    the pixel cap, so that a corrupt, truncated or oversized file is found before training instead
    of crashing a DataLoader worker mid-epoch."""
    try:
        with open_image(path) as image:
            image.load()
            if image.format == "JPEG":  # Pillow fills a scan that ends early with grey; refuse it
                jpeg.check_complete(Path(path).read_bytes())
        return ""
    except Exception as exc:  # noqa: BLE001 - decoders raise many types; each is this image's fault
        return f"{type(exc).__name__}: {exc}"


def split_available(root: Path, indices: Sequence[int], unreadable: list[dict[str, Any]] | None = None,
                    *, threads: int | None = None, checked: Collection[int] = ()) -> tuple[list[int], list[int]]:
    """(indices whose resized image exists and decodes, indices whose image is missing or unreadable).

    Each unreadable image (corrupt, truncated, over the pixel cap) is appended to ``unreadable``
    as ``{"index", "file", "reason"}``; callers list them in their summary and apply the failure
    rate (:func:`vsbench.imaging.limits.check_failure_rate`). Decoding runs on ``threads`` threads
    (Pillow releases the GIL while decoding): ~0.5 ms a 224x224 JPEG on one core. Indices in
    ``checked`` were found readable by an earlier call of this run and are not decoded again.
    """
    problems = {idx: "" for idx in indices if idx in checked}
    to_decode = [idx for idx in indices if idx not in checked and image_path(root, idx).is_file()]
    with ThreadPoolExecutor(max_workers=threads or min(16, os.cpu_count() or 1)) as pool:
        problems.update(zip(to_decode, pool.map(lambda idx: image_problem(image_path(root, idx)), to_decode)))
    present, missing = [], []
    for idx in indices:
        problem = problems.get(idx)
        (present if problem == "" else missing).append(idx)
        if problem and unreadable is not None:
            unreadable.append({"index": idx, "file": image_path(root, idx).name, "reason": problem})
    return present, missing


def check_unreadable(step: str, out_dir: Path, unreadable: list[dict[str, Any]], checked: int,
                     max_failure_rate: float | None, write: bool) -> None:
    """Write ``out_dir/unreadable_images.json`` (when there are any and ``write``) and fail the
    step when their share of the ``checked`` images passes the threshold."""
    if not unreadable:
        return
    listing = out_dir / UNREADABLE_NAME
    if write:

        atomic_write_json(listing, {"checked": checked, "unreadable": unreadable})
    check_failure_rate(step, len({u["index"] for u in unreadable}), checked, max_failure_rate, listing)


class LabelledImages(Dataset):
    """(image, label) for counting: rows of ``counting_*.json`` whose image exists."""

    def __init__(self, root: Path, rows: Sequence[Sequence[int]], size: int, encoded: bool = False) -> None:
        self.root, self.rows, self.size = root, [(int(i), int(q)) for i, q in rows], size
        self.encoded = encoded  # the file's bytes, for a BatchDecoder, instead of its pixels

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: int) -> tuple[torch.Tensor | Encoded, int]:
        idx, label = self.rows[item]
        return _image(image_path(self.root, idx), self.size, self.encoded), label


class Images(Dataset):
    """Images by 0-based index, for inference and embedding."""

    def __init__(self, root: Path, indices: Sequence[int], size: int, encoded: bool = False) -> None:
        self.root, self.indices, self.size, self.encoded = root, list(indices), size, encoded

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> torch.Tensor | Encoded:
        return _image(image_path(self.root, self.indices[item]), self.size, self.encoded)


def _image(path: Path, size: int, encoded: bool) -> torch.Tensor | Encoded:
    """One image as pixels (Pillow, in the worker) or as bytes for the device decoder. The images
    were all decoded once before training (:func:`split_available`: pixel cap, completeness), so
    reading the bytes is all a worker does."""
    return Encoded.read([path]) if encoded else load_image(path, size)


class SiameseRowPairs(Dataset):
    """Item ``r``: training row ``r``'s image and the partners of its ``pairs_per_row`` pairs this epoch.

    Every pair of a row starts from the row's own image, so the row's image is loaded (and goes
    through the trunk) once however many pairs are drawn for it: with 6 pairs a row that is 7
    trunk passes instead of 12. The pairs are drawn in turn from one generator seeded by
    (seed, epoch, row): reproducible anywhere, each repeat a fresh draw, and at one pair a row
    (the full profile) exactly upstream's sampling of one pair per row per epoch."""

    def __init__(self, root: Path, sampler: SiamesePairSampler, size: int, seed: int, pairs_per_row: int = 1,
                 encoded: bool = False) -> None:
        self.root, self.sampler, self.size, self.seed = root, sampler, size, seed
        self.pairs_per_row = pairs_per_row
        self.epoch = 0
        self.encoded = encoded

    def __len__(self) -> int:
        return len(self.sampler)

    def __getitem__(self, item: int) -> tuple[Any, Any, torch.Tensor]:
        rng = np.random.default_rng([self.seed, self.epoch, item])
        pairs = [self.sampler.sample(item, rng) for _ in range(self.pairs_per_row)]
        labels = torch.tensor([float(pair.label) for pair in pairs])
        if self.encoded:  # the partners as one item of pairs_per_row files: a batch packs them row after row
            return (Encoded.read([image_path(self.root, pairs[0].first)]),
                    Encoded.read([image_path(self.root, pair.second) for pair in pairs]), labels)
        anchor = load_image(image_path(self.root, pairs[0].first), self.size)
        partners = torch.stack([load_image(image_path(self.root, pair.second), self.size) for pair in pairs])
        return anchor, partners, labels


@dataclass(frozen=True)
class BatchTransform:
    """uint8 NCHW on any device -> normalized float, channels_last, optionally flipped.

    ``part`` = (rank, world_size) under data-parallel training, where ``images`` is slice ``rank``
    of a global batch ``world_size`` times as large: the flips are drawn for the global batch and
    sliced, so each image is flipped exactly as in a one-process run. ``decoder`` decodes a packed
    batch of bytes (:class:`~vsbench.imaging.batched.EncodedBatch`) on the device first."""

    device: torch.device
    part: tuple[int, int] = (0, 1)
    decoder: BatchDecoder | None = None

    def __call__(self, images: torch.Tensor | EncodedBatch,
                 flip_generator: torch.Generator | None = None) -> torch.Tensor:
        if isinstance(images, EncodedBatch):
            if self.decoder is None:
                raise ValueError("a batch of undecoded files reached a BatchTransform without a decoder")
            images = self.decoder.stack(images)
        images = images.to(self.device, non_blocking=True)
        if flip_generator is not None:
            rank, world = self.part
            count = images.shape[0]
            flip = torch.rand(count * world, generator=flip_generator)[rank * count:(rank + 1) * count] < 0.5
            images = torch.where(flip.to(self.device)[:, None, None, None], images.flip(-1), images)
        mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1) * 255
        std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1) * 255
        return ((images.float() - mean) / std).contiguous(memory_format=torch.channels_last)


def flip_generator(seed: int, epoch: int, batch: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(int(np.random.SeedSequence([seed, epoch, batch]).generate_state(1)[0]))
    return generator
