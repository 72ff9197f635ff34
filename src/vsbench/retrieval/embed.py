"""Embed an image set with a registered model: batched, sharded, resumable.

Shard ``i`` of ``n`` (a contiguous, balanced slice of the ids) writes
``<set_name>.shard-<i>-of-<n>.npz`` (a :class:`~vsbench.io.features.FeatureSet`) and a manifest
``<set_name>.shard-<i>-of-<n>.json`` beside it, so a pipeline can fan one set out over nodes and
:mod:`vsbench.retrieval.shards` reads the pieces back in order. A shard whose manifest says it is complete
for the same work is not recomputed: a retried step redoes only what is missing. "The same work"
is keyed on content (:func:`input_key`): the bytes of every image of the shard (another ``--root``
with the same ids, or a photo replaced in place, is other work), the bytes of every file a model
option names (a ``precomputed`` ``.npz``, a TorchScript file), the model, its options, the seed,
AMP and the library versions. The image digests are remembered by their stat record in
``.inputs/<stem>.json`` (:class:`~vsbench.io.digests.DigestMemo`), so an unchanged re-run only
calls ``stat``; the same digests look the images up in the embedding cache.

**The bytes hashed are the bytes used** (issue 46). The key's digests come from one read, the
decode from another: a file replaced in between (an rsync updating the dataset, by ``mv`` or in
place) would be embedded from its new bytes under its old digest, in the shard and in the shared
cache. So each loader worker reads a file once, hashes that buffer and decodes from it
(:func:`load_image_file`, :class:`EncodedFiles`); a descriptor is cached only under the digest
of the bytes it was computed from, and a worker's digest that is not the key's stops the shard
(:class:`InputsChanged`, :func:`embed_with_cache` says why stopping rather than re-keying). The
files model options name are re-checked once the model is built (:func:`_recheck_option_files`).

Loading is built for the GPU: DataLoader workers decode and resize with Pillow (or, for JPEGs
that need no resize, libjpeg-turbo straight into the array: :func:`load_image`) and hand over
uint8 NHWC batches (4x smaller than float), which travel pinned and non-blocking; conversion and
normalization happen on the device, the NHWC layout becomes channels_last for free, and the
network runs under ``torch.inference_mode`` and autocast (bf16 where supported). With
``decode="gpu"`` the workers only read the files' bytes, and each batch is decoded, resized and
cropped on the device, one batch ahead of the network on a stream of its own
(:mod:`vsbench.runtime.feeder`, :mod:`vsbench.imaging.batched`; docs/fidelity.md bounds the
difference); ``auto`` takes the path measured faster (:data:`vsbench.imaging.modes.AUTO_DECODE`:
the workers, for embedding, also on CUDA). Images that
cannot be read are left out and listed in the manifest with the reason; the evaluator then
fails clearly on the missing ids instead of scoring a silently shrunken set.

Descriptors are written raw (no L2 normalization): normalization is a codec choice at search time.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from vsbench import __version__
from vsbench.imaging import batched, jpeg, limits
from vsbench.imaging.limits import open_image
from vsbench.io.digests import DigestMemo, combine, path_digest
from vsbench.io.features import (
    FeatureError,
    FeatureSet,
    ImageSet,
    load_features,
    save_features,
)
from vsbench.io.inputs import WordedInputError
from vsbench.io.progress import progress_bar
from vsbench.io.storage import atomic_write_json, file_sha256
from vsbench.models.cache import (
    WEIGHTS_OPTIONS,
    EmbeddingCache,
    cache_root,
    library_versions,
    model_key,
    weights_files,
)
from vsbench.models.registry import Embedder, PrecomputedFeatures, Preprocessing, build_model
from vsbench.models.weights import RANDOM_SEED, WeightsError, check_seed
from vsbench.retrieval.origin import _ids_digest, inputs_path
from vsbench.retrieval.shards import SET_NAME, read_manifest, shard_of, shard_stem
from vsbench.runtime.compile import compile_status, compile_wanted, network_for, use_inductor_cache
from vsbench.runtime.device import DeviceSetup, resolve_device, setup_device
from vsbench.runtime.feeder import Fed, Feeder, normalizer, to_host
from vsbench.runtime.loaders import loader_options, loader_workers
from vsbench.runtime.stages import Stages
from vsbench.runtime.throughput import Throughput, startup_line

logger = logging.getLogger(__name__)
RESAMPLE = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR,
            "bicubic": Image.Resampling.BICUBIC}


# --- decoding (runs in DataLoader workers) -------------------------------------------------------

_resized_size = batched.resized_size  # one rule for the Pillow path and the tensor path
_crop_box = batched.crop_box


def load_image(path: Path, preprocessing: Preprocessing) -> np.ndarray:
    """Decode, resize and center-crop one image to a uint8 (H, W, 3) array.

    JPEG draft mode lets libjpeg decode at 1/2, 1/4 or 1/8 scale when the image is at least
    that much larger than the resize target (the antialiased resize still follows), which
    makes large photos several times cheaper to decode.

    When no resize is needed (the image, or its draft-scale decode, already has the target
    size: ABID's 224x224 resized images under a 224 model, say), the JPEG is decoded by
    :func:`vsbench.imaging.jpeg.decode_rgb` straight into the array (libjpeg-turbo through
    simplejpeg, Pillow's pixels exactly) and cropped there: no Pillow image is made at all,
    which halves the cost. When a resize follows, Pillow decodes as before: getting an
    external array into a Pillow image costs as much as the faster decode saves, and the
    resize must stay Pillow's to keep the network's input the same. Either way the array is
    :func:`load_image_pillow`'s (tests/unit/test_jpeg_decode.py), so the embedding cache needs no
    new key; anything the fast decoder does not take (other formats, CMYK, files libjpeg-turbo
    complains about) goes on with Pillow on the same opened file, as before, so the reason
    listed for a bad file is word for word the old one.
    """
    return _load(path, preprocessing, fast=True)


def load_image_pillow(path: Path, preprocessing: Preprocessing) -> np.ndarray:
    """:func:`load_image` with Pillow's decoder for every image (as before the fast decoder)."""
    return _load(path, preprocessing, fast=False)


def load_image_bytes(data: bytes, preprocessing: Preprocessing) -> np.ndarray:
    """:func:`load_image` of a file already read: the CPU fallback of the batched device decode."""
    return _load(Path(), preprocessing, fast=True, data=data)


# A test seam (issue 56), None in a run: called with each image's path between the one read of its
# bytes and their hashing and decoding, so a test changes or removes the file at that very moment
# (tests/unit/test_embed_race.py; no sleeps): whatever happens there, the digest and the pixels are the bytes read.
after_read: Callable[[Path], None] | None = None


def read_image_file(path: Path) -> tuple[bytes, str]:
    """A file's bytes and the sha256 of exactly those bytes: the one read a worker decodes from."""
    data = Path(path).read_bytes()
    if after_read is not None:
        after_read(Path(path))
    return data, hashlib.sha256(data).hexdigest()


def load_image_file(path: Path, preprocessing: Preprocessing) -> tuple[np.ndarray, str]:
    """(:func:`load_image`'s array, the sha256 of the bytes it was decoded from): the file is read
    once, hashed and decoded from that one buffer, so the digest names the pixels whatever happens
    to the file meanwhile (issue 46). Same pixels as :func:`load_image` (tests/unit/test_jpeg_decode.py),
    and the same reason for a file that cannot be read or decoded."""
    data, digest = read_image_file(path)
    return _load(path, preprocessing, fast=True, data=data), digest


def _load(path: Path, preprocessing: Preprocessing, *, fast: bool, data: bytes | None = None) -> np.ndarray:
    source = path if data is None else io.BytesIO(data)
    named = path if data is not None and path.name else None  # a buffer's failure reasons name its file
    with open_image(source, name=named) as image:  # over the pixel cap: refused from its header
        target = _resized_size(*image.size, preprocessing)
        if fast:
            pixels = _decode_without_resize(Path(path), image, target, preprocessing, data)
            if pixels is not None:
                return pixels
        image.draft("RGB", target)
        rgb = image.convert("RGB")
        if image.format == "JPEG":  # Pillow fills a scan that ends early with grey; refuse it
            jpeg.check_complete(Path(path).read_bytes() if data is None else data)
    return _resize_and_crop(rgb, target, preprocessing)


def _decode_without_resize(path: Path, header: Image.Image, target: tuple[int, int],
                           preprocessing: Preprocessing, data: bytes | None = None) -> np.ndarray | None:
    """The finished array when the JPEG decodes at the target size and the crop lies inside it;
    else None: Pillow's path goes on with the same, still unloaded ``header`` (a Pillow image
    opened from the path decodes a little faster than one opened from bytes in memory)."""
    if header.format != "JPEG":
        return None
    scale = jpeg.draft_scale(header.size, target)
    if (-(-header.size[0] // scale), -(-header.size[1] // scale)) != target:
        return None  # a resize follows: Pillow's path is as fast
    left, top, right, bottom = _crop_box(target, preprocessing)
    if left < 0 or top < 0 or right > target[0] or bottom > target[1]:
        return None  # Pillow pads a crop that leaves the image; keep that to Pillow
    try:
        data = path.read_bytes() if data is None else data
    except OSError:
        return None
    pixels = jpeg.decode_rgb(data, header, target)
    if pixels is None:
        return None
    return np.ascontiguousarray(pixels[top:bottom, left:right])


def _resize_and_crop(rgb: Image.Image, target: tuple[int, int], preprocessing: Preprocessing) -> np.ndarray:
    if rgb.size != target:
        rgb = rgb.resize(target, RESAMPLE[preprocessing.interpolation])
    if preprocessing.crops:
        rgb = rgb.crop(_crop_box(target, preprocessing))
    return np.asarray(rgb, dtype=np.uint8)


class ImageFiles(Dataset):
    """Images by position, each as (position, array, reason, sha256 of the bytes read); an
    unreadable one yields ``None`` and the reason instead of raising, so one corrupt file is
    reported rather than stopping a shard. The digest is of the very bytes decoded
    (:func:`load_image_file`; None when the file could not be read at all)."""

    def __init__(self, paths: Sequence[Path], preprocessing: Preprocessing) -> None:
        self.paths = list(paths)
        self.preprocessing = preprocessing

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[int, np.ndarray | None, str, str | None]:
        path = self.paths[index]
        try:
            data, digest = read_image_file(path)
        except OSError as exc:
            return index, None, f"{type(exc).__name__}: {exc}", None
        try:
            return index, _load(path, self.preprocessing, fast=True, data=data), "", digest
        except Exception as exc:  # noqa: BLE001 - decoders raise many types; each becomes a reported failure
            return index, None, f"{type(exc).__name__}: {exc}", digest


class EncodedFiles(Dataset):
    """:class:`ImageFiles` for the batched device decode: a worker reads each file's bytes once,
    hashes them, reads its header from them (pixel cap, whether the device decodes it) and, for a
    JPEG, checks that its scan is whole (:func:`vsbench.imaging.batched.encoded_bytes`); nothing is
    decoded here, and the device decodes the bytes hashed."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[int, batched.Encoded | None, str, str | None]:
        path = self.paths[index]
        try:
            data, digest = read_image_file(path)
        except OSError as exc:
            return index, None, f"{type(exc).__name__}: {exc}", None
        try:
            array, decodable = batched.encoded_bytes(data, check_complete=True, name=path)
            return index, batched.Encoded((array,), (decodable,)), "", digest
        except Exception as exc:  # noqa: BLE001 - as ImageFiles: each becomes a reported failure
            return index, None, f"{type(exc).__name__}: {exc}", digest


Read = list[tuple[int, str | None]]  # (position, sha256 of the bytes read or None) of every item of a batch


def collate_encoded_files(
    items: list[tuple[int, batched.Encoded | None, str, str | None]],
) -> tuple[torch.Tensor, batched.EncodedBatch | None, list[tuple[int, str]], Read]:
    """(positions of the read files, their bytes packed in one buffer, the failures, the digests of
    the bytes read), in a worker."""
    kept = [(index, encoded) for index, encoded, _, _ in items if encoded is not None]
    failures = [(index, reason) for index, encoded, reason, _ in items if encoded is None]
    packed = batched.EncodedBatch.pack([e for _, e in kept]) if kept else None
    read = [(index, digest) for index, _, _, digest in items]
    return torch.tensor([i for i, _ in kept], dtype=torch.long), packed, failures, read


def decode_groups(
    decoder: batched.BatchDecoder, positions: torch.Tensor, packed: batched.EncodedBatch | None,
) -> tuple[list[Group], list[tuple[int, str]]]:
    """A batch of :func:`collate_encoded_files` decoded on the device: NHWC uint8 groups of one
    shape (channels_last views, as the CPU path's batches become on the device) and the failures."""
    if packed is None:
        return [], []
    images, reasons = decoder.decode(packed)
    where = positions.tolist()
    shapes: dict[tuple[int, ...], list[int]] = {}
    failures = []
    for n, (image, reason) in enumerate(zip(images, reasons)):
        if image is None:
            failures.append((where[n], reason))
        else:
            shapes.setdefault(tuple(image.shape), []).append(n)
    groups = [(positions[members], torch.stack([images[n] for n in members]).permute(0, 2, 3, 1))  # type: ignore[misc]
              for members in shapes.values()]
    return groups, failures


Group = tuple[torch.Tensor, torch.Tensor]  # (positions, uint8 NHWC images of one shape)


def collate_by_shape(
    items: list[tuple[int, np.ndarray | None, str, str | None]],
) -> tuple[list[Group], list[tuple[int, str]], Read]:
    """Stack images of equal shape (all of them, when the preprocessing crops to a square), set
    the failures aside and pass on the digests of the bytes read."""
    shapes: dict[tuple[int, ...], list[tuple[int, np.ndarray]]] = {}
    failures = []
    for index, array, reason, _ in items:
        if array is None:
            failures.append((index, reason))
        else:
            shapes.setdefault(array.shape, []).append((index, array))
    groups = [(torch.tensor([i for i, _ in members], dtype=torch.long),
               torch.from_numpy(np.stack([a for _, a in members]))) for members in shapes.values()]
    return groups, failures, [(index, digest) for index, _, _, digest in items]


# --- the embedding loop --------------------------------------------------------------------------

def device_decoder(setup: DeviceSetup, preprocessing: Preprocessing, decode: str) -> batched.BatchDecoder | None:
    """The batched device decoder ``decode`` asks for when embedding on this device
    (:func:`~vsbench.imaging.batched.decode_choice`), with the Pillow path as its one-by-one fallback;
    None: the workers decode with Pillow."""
    if not batched.uses_device_decode(decode, setup.device, "embed"):
        return None
    return batched.BatchDecoder(setup.device, preprocessing, lambda data: load_image_bytes(data, preprocessing))


def run_embedder(
    model: Embedder, ids: Sequence[str], paths: Sequence[Path], setup: DeviceSetup, *, use_amp: bool,
    batch_size: int, workers: int | None, progress: bool, desc: str = "embed", compile_mode: str = "off",
    meter: Throughput | None = None, decoder: batched.BatchDecoder | None = None, used: list[str | None] | None = None,
    stages: Stages | None = None,
) -> tuple[FeatureSet, list[dict[str, str]]]:
    """Descriptors for the images that could be read, in input order, and the failures.

    ``workers`` None: :func:`~vsbench.runtime.loaders.loader_workers` (the container's CPU quota).
    ``compile_mode``: :mod:`vsbench.runtime.compile`. ``meter`` gets a mark per batch out of the
    model (start-up and steady-state rate, :mod:`vsbench.runtime.throughput`). With a ``decoder``
    the workers only read bytes and the images are decoded in batches on the device. ``used``
    (as long as ``paths``) is filled with the sha256 of the bytes each image was decoded from
    (None where the file could not be read): what a descriptor may be keyed on. The copy or decode of
    each batch runs one batch ahead of the network (:class:`~vsbench.runtime.feeder.Feeder`); ``stages``
    gets every batch's read, copy, decode, network and write times (:mod:`vsbench.runtime.stages`)."""
    if decoder is None:
        dataset, collate = ImageFiles(paths, model.preprocessing), collate_by_shape
    else:
        dataset, collate = EncodedFiles(paths), collate_encoded_files
    # One pass over the images: persistent workers would only outlive the loop.
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate,
                        **loader_options(loader_workers(workers), cuda=setup.is_cuda))
    batches = iter(loader)  # workers start decoding (or reading) while the model moves to the device
    if setup.is_cuda:
        # cuDNN autotuning pays off for one fixed shape; aspect-preserving inputs come in many shapes.
        torch.backends.cudnn.benchmark = not model.preprocessing.preserve_aspect_ratio
    model = model.to(setup.device, memory_format=torch.channels_last).eval()
    network = network_for(model, compile_mode, setup.device)
    meter = meter if meter is not None else Throughput()
    stages = stages if stages is not None else Stages(setup.device)
    scale, shift = normalizer(model.preprocessing, setup.device)
    outputs: list[torch.Tensor] = []
    positions: list[torch.Tensor] = []
    failed: list[dict[str, str]] = []

    def prepare(batch: Any, stream: Any, index: int) -> Fed:
        """On the feeder's stream, one batch ahead of the network: NHWC uint8 -> an NCHW view with
        channels_last strides on the device, float and normalized there."""
        if decoder is None:
            groups, failures, read = batch
            with stages.span(index, "copy", stream):
                moved = [(where, images.to(setup.device, non_blocking=True)) for where, images in groups]
        else:
            with stages.span(index, "decode", stream):
                moved, refused = decode_groups(decoder, batch[0], batch[1])
            failures, read = batch[2] + refused, batch[3]
        with stages.span(index, "copy", stream):  # the device path's bytes were copied by its decoder
            inputs = [(where, images.permute(0, 3, 1, 2).float().mul_(scale).add_(shift)) for where, images in moved]
        return Fed(inputs, failures, read)

    autocast = setup.autocast() if use_amp else contextlib.nullcontext()
    with torch.inference_mode(), autocast, progress_bar(total=len(paths), desc=desc, unit="img",
                                                         disable=not progress) as bar:
        for fed in Feeder(batches, setup.device, prepare, stages):
            if used is not None:
                for i, digest in fed.read:
                    used[i] = digest
            failed.extend({"id": ids[i], "reason": reason} for i, reason in fed.failures)
            for where, x in fed.groups:
                with stages.span(fed.batch, "network"):
                    descriptors = network(x).float()
                if descriptors.shape[1] != model.dim:
                    raise ValueError(f"{model.name} returned {descriptors.shape[1]}-d descriptors, "
                                     f"expected {model.dim}")
                with stages.span(fed.batch, "write"):
                    outputs.append(to_host(descriptors, setup.is_cuda))
                positions.append(where)
                if meter.startup_seconds is None and setup.is_cuda:
                    torch.cuda.synchronize(setup.device)  # start-up ends when the first batch is out
                meter.batch_done(len(where))
            bar.update(sum(len(w) for w, _ in fed.groups) + len(fed.failures))
    if setup.is_cuda:
        torch.cuda.synchronize(setup.device)
    meter.pause()  # the last batch's results are on the host: the stopwatch stops here
    if not outputs:
        return FeatureSet(np.asarray([], dtype=str), np.zeros((0, model.dim), np.float32)), failed
    order = torch.cat(positions).numpy()
    features = torch.cat(outputs).numpy()
    ranked = np.argsort(order, kind="stable")  # images grouped by shape come back in input order
    bad = ~np.isfinite(features[ranked]).all(axis=1)
    if bad.any():
        first = int(order[ranked][np.flatnonzero(bad)[0]])
        raise FeatureError(f"{model.name} output NaN or infinite values for image {str(ids[first])!r} "
                           f"({paths[first]}); {int(bad.sum())} of {len(ranked)} images did")
    kept = FeatureSet(np.asarray([ids[i] for i in order[ranked]], dtype=str), features[ranked])
    return kept, failed


def _precision(setup: DeviceSetup, use_amp: bool) -> str:
    """Device type and arithmetic of a run: both change descriptors in the last bits or more."""
    dtype = str(setup.amp_dtype).removeprefix("torch.") if use_amp and setup.amp_dtype is not None else "float32"
    return f"{setup.device.type}:{dtype}"


class InputsChanged(WordedInputError):
    """Files that changed between the read that hashed them (the shard's key) and the one that
    decoded or loaded them: one line naming the first, and what to do (issue 46)."""

    one_line = True
    exit_code = 2

    def __init__(self, message: str, paths: Sequence[Path] = (), read: Sequence[str | None] = ()) -> None:
        super().__init__(message)
        self.paths = list(paths)
        self.read = list(read)  # the sha256 of the bytes the second read saw, per path (images only)


def changed_while_read(paths: Sequence[Path], hashed: Sequence[str | None], used: Sequence[str | None],
                       desc: str) -> InputsChanged | None:
    """The error to stop on when an image was decoded from other bytes than the key hashed, else None."""
    changed = [(p, h, u) for p, h, u in zip(paths, hashed, used) if h != u]
    if not changed:
        return None
    path, old, new = changed[0]
    more = f" (and {len(changed) - 1} more files, listed under 'changed' in the manifest)" if len(changed) > 1 else ""

    def said(digest: str | None) -> str:
        return f"sha256 {digest[:12]}" if digest else "unreadable"

    return InputsChanged(f"{path}: changed while {desc} read it (hashed as {said(old)}, then read as {said(new)})"
                         f"{more}; stopped: nothing was recorded or cached under the old bytes. Run again once the "
                         f"files stop changing (a sync still writing the dataset?)", [p for p, _, _ in changed],
                         [u for _, _, u in changed])


def embed_with_cache(
    model_name: str, options: dict[str, Any], model: Embedder, ids: Sequence[str], paths: Sequence[Path],
    setup: DeviceSetup, *, use_amp: bool, batch_size: int, workers: int | None, progress: bool, desc: str,
    digests: Sequence[str | None], seed: int = RANDOM_SEED, compile_mode: str = "off", meter: Throughput | None = None,
    decoder: batched.BatchDecoder | None = None, option_digests: dict[str, str | None] | None = None,
    stages: Stages | None = None,
) -> tuple[FeatureSet, list[dict[str, str]], dict[str, Any]]:
    """:func:`run_embedder` on the images the embedding cache does not hold; the rest come from it.

    ``digests`` are the images' sha256 (None where unreadable), as the shard's input key hashed
    them: the cache is looked up under them. Returns the descriptors in input order, the failures and what
    the manifest records about the cache (its key in full, the key's digest, hits and images embedded).
    The batched device decode (``decoder``) feeds the network other pixels (docs/fidelity.md), and a
    compiled network (``compile_mode``) sums in other orders: the descriptors of each are cached under
    a key of their own. ``option_digests``: :func:`option_file_digests` of ``options`` as the shard's key
    holds them (the cache key's file digests are taken from them instead of hashing the files again).

    A new descriptor is cached under the sha256 of the bytes the worker decoded it from, never under
    ``digests`` (issue 46): a file replaced between the hashing and the decoding (an rsync updating
    the dataset, by ``mv`` or in place) is cached under its new digest, and then the run stops with
    :class:`InputsChanged` naming it, so the shard is never recorded complete under a key naming
    bytes it was not computed from. Stopping rather than re-keying the shard on the digests used:
    the step's callers (the index, the score step, the pipeline's other sets) take the key to stand
    for the dataset as it is on disk, and a run that read half a sync is better run again on the
    whole; the next run hashes the new bytes and takes their descriptors from the cache.
    """

    root = cache_root()
    used: list[str | None] = [None] * len(paths)
    if root is None:
        features, failed = run_embedder(model, ids, paths, setup, use_amp=use_amp, batch_size=batch_size,
                                        workers=workers, progress=progress, desc=desc, compile_mode=compile_mode,
                                        meter=meter, decoder=decoder, used=used, stages=stages)
        changed = changed_while_read(paths, digests, used, desc)
        if changed is not None:
            raise changed
        return features, failed, {"enabled": False, "hits": 0, "embedded": len(features)}
    precision = (_precision(setup, use_amp) + ("+device-decode" if decoder is not None else "")
                 + ("+compiled" if compile_wanted(compile_mode, setup.device) else ""))  # Inductor's kernels: other last bits
    files = None if option_digests is None else weights_files(options, option_digests)
    cache = EmbeddingCache(root, model_key(model_name, options, model, precision, seed=seed, files=files))
    hits = cache.lookup(digests, model.dim)
    todo = [i for i, d in enumerate(digests) if d is None or d not in hits]
    used = [None] * len(todo)
    if todo:
        new, failed = run_embedder(model, [ids[i] for i in todo], [paths[i] for i in todo], setup, use_amp=use_amp,
                                   batch_size=batch_size, workers=workers, progress=progress, desc=desc,
                                   compile_mode=compile_mode, meter=meter, decoder=decoder, used=used, stages=stages)
    else:
        new, failed = FeatureSet(np.asarray([], dtype=str), np.zeros((0, model.dim), np.float32)), []
    digest_of = {ids[i]: used[n] for n, i in enumerate(todo)}  # of the bytes decoded, not of the bytes hashed
    new_ids = new.ids.tolist()
    cache.store([digest_of[i] for i in new_ids], new.features)  # type: ignore[misc]  # decoded: never None
    changed = changed_while_read([paths[i] for i in todo], [digests[i] for i in todo], used, desc)
    if changed is not None:
        raise changed
    row_of = {i: n for n, i in enumerate(new_ids)}
    kept_ids, rows = [], []
    for image_id, digest in zip(ids, digests):
        if digest is not None and digest in hits:
            kept_ids.append(image_id)
            rows.append(hits[digest])
        elif image_id in row_of:
            kept_ids.append(image_id)
            rows.append(new.features[row_of[image_id]])
    features = np.stack(rows).astype(np.float32) if rows else np.zeros((0, model.dim), np.float32)
    info = {"enabled": True, "root": str(root), "key": cache.key, "key_sha256": cache.digest,
            "hits": len(ids) - len(todo), "embedded": len(new_ids)}
    return FeatureSet(np.asarray(kept_ids, dtype=str), features), failed, info


# --- shards, manifests, resume -------------------------------------------------------------------

def option_file_digests(options: dict[str, Any], memo: DigestMemo) -> dict[str, str | None]:
    """sha256 of every file a model option names, and of every folder a ``weights``/``path``/
    ``checkpoint``/``config`` option names: a ``precomputed`` ``.npz`` or a TorchScript file
    replaced in place is other work. A plugin's option naming a file is covered whatever its name
    (any string option that is an existing file); folders only under the weights options, so an
    option that happens to name a large folder is not read whole."""
    found: dict[str, str | None] = {}
    for name, value in sorted(options.items()):
        if not isinstance(value, (str, Path)) or not str(value).strip():
            continue
        path = Path(value)
        try:
            if path.is_file() or (name in WEIGHTS_OPTIONS and path.is_dir()):
                found[name] = path_digest(path, memo)
        except OSError:
            continue
    return found


def input_key(images: Sequence[Path], ids: Sequence[str], options: dict[str, Any], memo: DigestMemo,
              threads: int = 4) -> tuple[dict[str, Any], list[str | None]]:
    """The content part of a shard's key and the images' digests (in order; None where unreadable).

    ``images_sha256`` is one sha256 over (id, image sha256) in shard order: an image replaced by
    other bytes (whatever its mtime), another ``--root`` with the same ids, two images swapped, a
    truncated one, all change it. ``option_files`` holds the digest of each file an option names.
    ``libraries`` the versions that compute a descriptor (a torch upgrade may move the last bits)."""
    digests = memo.digests(images, threads=threads)
    return {"images_sha256": combine(zip(ids, digests)), "option_files": option_file_digests(options, memo),
            "libraries": library_versions()}, digests


def _resume_key(model: str, options: dict[str, Any], ids: Sequence[str], amp: bool,
                seed: int = RANDOM_SEED, inputs: dict[str, Any] | None = None,
                device_decode: bool = False) -> dict[str, Any]:
    """What a finished shard must match to be reused (JSON-normalized: tuples become lists,
    paths strings, so a key read back from a manifest compares equal). The seed is in it whatever
    the weights: a plugin may draw more than its weights from it, and a changed seed costs only
    cache look-ups where it decides nothing. ``inputs`` is :func:`input_key`'s content part.
    ``device_decode`` (the batched device decode feeds other pixels) adds ``"decode": "device"``; the
    Pillow path's key is unchanged, so its finished shards stay finished."""
    key = {"model": model, "options": options, "ids_sha256": _ids_digest(ids), "count": len(ids), "amp": amp,
           "seed": seed, "inputs": inputs or {}}
    if device_decode:
        key["decode"] = "device"
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def _key_change(old: Any, new: dict[str, Any]) -> str:
    """Which part of a shard's key changed, in words, for the one line that says why it is redone."""
    if not isinstance(old, dict):
        return "no key"
    changed = [name for name in ("model", "options", "ids_sha256", "count", "amp", "seed") if old.get(name) != new[name]]
    old_inputs, new_inputs = old.get("inputs") if isinstance(old.get("inputs"), dict) else {}, new["inputs"]
    words = {"images_sha256": "the images' bytes", "option_files": "a file a model option names",
             "libraries": "library versions"}
    changed += [words[name] for name in words if old_inputs.get(name) != new_inputs.get(name)]
    if old.get("decode") != new.get("decode"):
        changed.append("the decoder (--decode)")
    return ", ".join(changed).replace("ids_sha256", "ids") + " changed" if changed else "its key differs"


def _is_complete(features_path: Path, manifest_path: Path, key: dict[str, Any], ids: Sequence[str]) -> str | None:
    """Whether a finished shard can be kept: None when it can, else why not.

    The manifest must be complete and for this exact work (the key: model, options, ids digest,
    count, amp, seed); the feature file it describes must be byte for byte the file written (size,
    then sha256), and its content must answer the inputs: ids in input order, every requested id
    either there or listed as failed, one finite row each, ``dim`` wide. A missing or unfinished
    manifest is the ordinary first or crashed run (returned as ``""``: recomputed without a word);
    anything else is a reason worth one line."""
    manifest = read_manifest(manifest_path)
    if not manifest or manifest.get("complete") is not True:
        return ""
    if manifest.get("key") != key:
        return f"its manifest is for other work ({_key_change(manifest.get('key'), key)})"
    try:
        size = features_path.stat().st_size
    except OSError as exc:
        return f"the feature file cannot be read ({exc.strerror or exc})"
    if size != manifest.get("features_bytes"):
        return f"the feature file has {size} bytes, its manifest says {manifest.get('features_bytes')}"
    if not manifest.get("features_sha256"):
        return "its manifest records no features_sha256 (written by an older vsbench)"
    if file_sha256(features_path) != manifest["features_sha256"]:
        return "the feature file's sha256 differs from the one its manifest recorded"
    try:
        features = load_features(features_path)
    except FeatureError as exc:
        return str(exc)
    failed = [f.get("id") for f in manifest.get("failed") or [] if isinstance(f, dict)]
    kept = features.ids.tolist()
    if len(kept) != manifest.get("count") or len(kept) + len(failed) != len(ids) or \
            set(kept) | set(failed) != set(ids):
        return (f"it holds {len(kept)} rows and {len(failed)} failed images, not the {len(ids)} images asked for "
                f"(manifest count {manifest.get('count')})")
    position = {image_id: n for n, image_id in enumerate(ids)}
    if any(position[a] >= position[b] for a, b in zip(kept, kept[1:])):
        return "its ids are not in input order"
    if features.features.dtype != np.float32 or features.dim != manifest.get("dim"):
        return f"its rows are {features.dim}-d {features.features.dtype}, the manifest says {manifest.get('dim')}-d float32"
    if not np.isfinite(features.features).all():
        return "it holds NaN or infinite values"
    return None


def _build(model: str, options: dict[str, Any], seed: int, option_files: dict[str, Any],
           reuse: dict[str, Any] | None) -> Any:
    """:func:`build_model`, or the network in ``reuse`` built for the same model, options, seed and
    option files (their digests). ``reuse`` is the caller's (an :class:`~vsbench.retrieval.engine.Engine`
    keeps one per run): the sets and shards one process embeds for a run share one network, so its
    weights load and its ``torch.compile`` runs once. It keeps the last network only."""
    key = json.dumps([model, options, seed, option_files], sort_keys=True, default=str)
    if reuse is not None and key in reuse:
        return reuse[key]
    if reuse is not None:
        reuse.clear()  # let the old network go before the new one is built
    built = build_model(model, seed=seed, **options)
    if reuse is not None and not isinstance(built, PrecomputedFeatures):
        reuse[key] = built
    return built


def _recheck_option_files(model: str, options: dict[str, Any], hashed: dict[str, str | None], memo: DigestMemo,
                          built: Any, reuse: dict[str, Any] | None) -> None:
    """Raise :class:`InputsChanged` when a file a model option names is not, now that the model is
    built, the bytes the shard's key hashed: the model would be another than the key says (issue 46).

    The loaders read the file again (``torch.load``, ``np.load``, a library's ``from_pretrained``),
    and most cannot be handed the bytes hashed, so each file is looked at again after the build: a
    ``stat`` where its record is the one hashed (any write or replacement since changes it), a hash
    where not. A TorchScript file is loaded from the very bytes its loader hashes
    (:func:`vsbench.models.backbones.torchscript`): that digest must be the key's."""
    now = option_file_digests(options, memo.remembered())
    loaded = getattr(built, "weights_digest", None) if model == "torchscript" else None
    if loaded is not None and hashed.get("path") is not None and loaded != hashed["path"]:
        now["path"] = loaded
    changed = sorted(name for name in set(hashed) | set(now) if hashed.get(name) != now.get(name))
    if not changed:
        return
    if reuse is not None:
        reuse.clear()  # the network kept for the next set may be of the other bytes
    name, named = changed[0], [n for n in changed if isinstance(options.get(n), (str, Path))]
    raise InputsChanged(f"{options.get(name)}: the file model option {name!r} names changed while the model was "
                        f"loaded from it (hashed as {str(hashed.get(name))[:12]}, now {str(now.get(name))[:12]}); "
                        "stopped: nothing was recorded under the old bytes. Run again once the file stops changing",
                        [Path(str(options[n])) for n in named], [now.get(n) for n in named])


def embed_image_set(
    model: str, images: ImageSet, out_dir: Path, *, set_name: str, shard: int = 0, num_shards: int = 1,
    batch_size: int = 64, device: str = "auto", workers: int | None = None, model_options: dict[str, Any] | None = None,
    progress: bool = True, amp: bool = True, max_failure_rate: float | None = None, seed: int = RANDOM_SEED,
    compile: str = "auto", reuse: dict[str, Any] | None = None, decode: str = "auto", verify_inputs: bool = False,
) -> Path:
    """Embed shard ``shard`` of ``num_shards`` of ``images`` with the registered ``model``.

    Writes ``out_dir/<set_name>.shard-<i>-of-<n>.npz`` and its manifest (model, options,
    preprocessing, dim, count, shard, seconds, images/s, device, failed images with reasons) and
    returns the feature file. A complete shard for the same model, options, ids, ``amp`` and
    ``seed`` is kept as it is. ``amp=False`` runs in strict float32 (no autocast, no TF32).
    ``seed`` draws ``{"weights": "random"}`` (see :func:`~vsbench.models.registry.build_model`).
    ``workers`` None sizes the DataLoader to the container's CPU quota
    (:func:`~vsbench.runtime.loaders.loader_workers`); ``compile`` is ``auto`` (on CUDA), ``on`` or
    ``off`` (:mod:`vsbench.runtime.compile`); ``reuse``: networks built before by this caller
    (:func:`_build`). The manifest's ``startup_seconds`` (model build to the
    first batch out of the model) and ``images_per_second_steady`` (after it) are
    :class:`~vsbench.runtime.throughput.Throughput`'s. ``decode``
    (:data:`~vsbench.imaging.modes.DECODE_MODES`): where the JPEGs are decoded; the manifest's
    ``decode`` says which path they took (``path``: device or workers), why (``reason``: for auto, the
    measurement :data:`~vsbench.imaging.modes.AUTO_DECODE` cites) and how many fell back to the CPU one by one.

    ``verify_inputs`` hashes every image whatever the shard's digest memo says. A memo found wrong
    (:meth:`~vsbench.io.digests.DigestMemo.stale`) is deleted with a warning naming it and the shard
    run again so: a damaged memo costs a hash of the shard, never an error blaming the dataset.

    Unreadable images are left out and listed; when their share passes ``max_failure_rate``
    (default :func:`vsbench.imaging.limits.max_failure_rate`: 1%) the manifest is written
    incomplete, with the failures, and :class:`~vsbench.imaging.limits.TooManyFailures` is raised.
    """
    rate = limits.max_failure_rate(max_failure_rate)
    if not SET_NAME.fullmatch(set_name):
        raise ValueError(f"set_name {set_name!r} must be letters, digits, '.', '_' or '-'")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    out_dir = Path(out_dir)
    part = shard_of(images.ids, shard, num_shards)
    ids, paths = list(images.ids[part]), list(images.paths[part])
    stem = shard_stem(set_name, shard, num_shards)
    features_path, manifest_path = out_dir / f"{stem}.npz", out_dir / f"{stem}.json"
    options = dict(model_options or {})
    if "seed" in options:
        raise WeightsError(f"model option 'seed' ({options['seed']!r}): the seed of random weights is the run's "
                           f"own setting (--seed, or the pipeline's seed parameter), not a model option")
    seed = check_seed(seed)
    choice = batched.decode_choice(decode, resolve_device(device), "embed")  # auto: the path measured faster
    device_decode = choice.on_device
    memo = DigestMemo(inputs_path(features_path), trust_stat=False if verify_inputs else None)
    workers = loader_workers(workers)
    inputs, digests = input_key(paths, ids, options, memo, threads=max(2, workers))
    key = _resume_key(model, options, ids, amp, seed, inputs, device_decode=device_decode)
    rejected = _is_complete(features_path, manifest_path, key, ids)
    memo.save()
    if rejected is None:
        if progress:
            print(f"[vsbench] {stem}: already complete, kept", file=sys.stderr, flush=True)
        return features_path
    if rejected:
        logger.warning("embed %s: %s not kept: %s; embedding the shard again", stem, features_path, rejected)

    manifest: dict[str, Any] = {"complete": False, "key": key, "set_name": set_name, "shard": shard,
                                "num_shards": num_shards, "model": model, "options": key["options"], "seed": seed,
                                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_json(manifest_path, manifest)  # a crashed shard is visible as incomplete
    meter = Throughput()  # start-up counts from here: the model's build is part of it
    started = time.perf_counter()
    try:
        built = _build(model, options, seed, inputs["option_files"], reuse)
        _recheck_option_files(model, options, inputs["option_files"], memo, built, reuse)
        build_seconds = time.perf_counter() - started
        started = time.perf_counter()
        if isinstance(built, PrecomputedFeatures):
            result, failed = built.select(ids), []
            run_info: dict[str, Any] = {"preprocessing": None, "device": None, "amp_dtype": None}
        else:
            setup = setup_device(device, amp)
            use_amp = amp and built.supports_autocast and setup.amp_dtype is not None
            inductor = use_inductor_cache(cache_root()) if compile_wanted(compile, setup.device) else None
            decoder = device_decoder(setup, built.preprocessing, decode) if device_decode else None
            stages = Stages(setup.device)
            result, failed, cache_info = embed_with_cache(
                model, options, built, ids, paths, setup, seed=seed, use_amp=use_amp, batch_size=batch_size,
                workers=workers, progress=progress, desc=f"embed {stem}", digests=digests, compile_mode=compile,
                meter=meter, decoder=decoder, option_digests=inputs["option_files"], stages=stages)
            run_info = {"preprocessing": asdict(built.preprocessing), "device": str(setup.device),
                        "amp_dtype": str(setup.amp_dtype).removeprefix("torch.") if use_amp else None,
                        "batch_size": batch_size, "workers": workers, "weights_source": built.weights_source,
                        "output": built.output, "cache": cache_info,
                        "compile": compile_status(built, compile, setup.device, inductor), **meter.as_dict(),
                        "decode": {**choice.as_dict(), **(decoder.stats() if decoder is not None else {})},
                        "stages": stages.summary()}
    except InputsChanged as exc:  # the manifest stays incomplete; the changed files are hashed again next time
        lied = memo.stale(exc.paths, exc.read)
        if lied:
            name, remembered, actual = lied[0]
            more = f" (and {len(lied) - 1} more)" if len(lied) > 1 else ""
            logger.warning("embed %s: %s is damaged: it remembers sha256 %s for %s%s, whose bytes, unchanged since, are "
                           "sha256 %s; deleted, and the shard's inputs hashed again", stem, memo.path, remembered[:12],
                           name, more, actual[:12])
            memo.discard()
            return embed_image_set(
                model, images, out_dir, set_name=set_name, shard=shard, num_shards=num_shards, batch_size=batch_size,
                device=device, workers=workers, model_options=model_options, progress=progress, amp=amp,
                max_failure_rate=max_failure_rate, seed=seed, compile=compile, reuse=reuse, decode=decode,
                verify_inputs=True)
        memo.forget(f for p in exc.paths for f in (sorted(p.rglob("*")) if p.is_dir() else [p]))
        memo.save()
        manifest.update({"stopped": str(exc), "changed": [str(p) for p in exc.paths]})
        atomic_write_json(manifest_path, manifest)
        raise
    seconds = time.perf_counter() - started
    save_features(features_path, result)
    manifest.update(run_info)
    manifest.update({
        "dim": built.dim, "requested": len(ids), "count": len(result), "failed": failed,
        "features": features_path.name, "features_bytes": features_path.stat().st_size,
        "features_sha256": file_sha256(features_path), "inputs_hashed": memo.hashed,
        "inputs_hashed_bytes": memo.hashed_bytes,
        "seconds": round(seconds, 3), "model_build_seconds": round(build_seconds, 3),
        "images_per_second": round(len(ids) / seconds, 2) if seconds > 0 else None,
        "torch": torch.__version__, "vsbench": __version__, "complete": True,
    })
    try:
        limits.check_failure_rate(f"embed {stem}", len(failed), len(ids), rate, manifest_path)
    except Exception as exc:
        manifest.update({"complete": False, "stopped": str(exc)})  # a re-run must not keep this shard
        atomic_write_json(manifest_path, manifest)
        raise
    atomic_write_json(manifest_path, manifest)
    if progress and manifest.get("startup_seconds") is not None:
        steady = manifest.get("images_per_second_steady")
        print(startup_line(stem, len(ids), manifest["startup_seconds"], steady), file=sys.stderr, flush=True)
    return features_path

