"""Counting baseline: ResNet-34 classifier over bin quantities, trained from scratch.

Writes ``counting_result.txt`` in the challenge's format: one integer a line, in the order of
``counting_val.json``. A validation bin whose resized image is missing still gets a line (the
training set's most common class) so the file always lines up with the ground truth; such bins
are listed in the run summary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from vsbench.abid.checkpoints import MEMO_NAME, TrainingIdentity, check_inputs, checkpoint_dir, training_identity
from vsbench.abid.data import (
    BatchTransform,
    Images,
    LabelledImages,
    check_unreadable,
    collate_for,
    decode_metrics,
    decode_stats,
    flip_generator,
    image_path,
    split_available,
    training_decoder,
)
from vsbench.abid.distributed import SINGLE, Distributed, epoch_loader
from vsbench.abid.models import counting_network
from vsbench.abid.profiles import TrainProfile
from vsbench.abid.trainer import FitResult, fit, hold_out
from vsbench.imaging.batched import BatchDecoder
from vsbench.io.inputs import read_json
from vsbench.io.storage import atomic_write_json, atomic_write_text, file_sha256
from vsbench.runtime.device import DeviceSetup
from vsbench.runtime.loaders import loader_options, loader_workers

RESULT_NAME = "counting_result.txt"
CALIBRATION_NAME = "counting_calibration.json"  # predictions on training bins, for the quantity baseline's rule
CALIBRATION_FRACTION = 0.1
OLD_MAJORITY_KEY = "val_majority_rate"  # read as the validation set's own majority; it was not


@dataclass
class CountingRun:
    fit: FitResult
    predictions: list[int]
    result_path: Path
    missing_images: list[int]
    num_classes: int
    val_rate_of_train_majority: float  # accuracy of always answering the training set's commonest count
    val_own_majority_rate: float  # share of the validation set's own commonest count (not a usable answer)
    decode: dict[str, Any] = field(default_factory=dict)  # where the JPEGs were decoded (decode_stats)

    def summary_metrics(self) -> dict[str, float]:
        return {**decode_metrics(self.decode), "val_rate_of_train_majority": self.val_rate_of_train_majority,
                "val_own_majority_rate": self.val_own_majority_rate,
                # The name before the two above; it meant val_rate_of_train_majority. Kept one release
                # for readers of older runs.
                OLD_MAJORITY_KEY: self.val_rate_of_train_majority,
                "missing_val_images": float(len(self.missing_images))}


@dataclass(frozen=True)
class MajorityRates:
    """The trivial counting answers, named for what they are.

    ``val_rate_of_train_majority`` is what always answering the training set's commonest count
    scores on the validation questions: the baseline a network must beat. ``val_own_majority_rate``
    is the validation set's own commonest count's share: how skewed the questions are (no model
    could know that class without looking at the answers).
    """

    train_majority_class: int
    train_majority_rate: float
    val_rate_of_train_majority: float
    val_own_majority_rate: float

    @classmethod
    def of(cls, train_rows: list[list[int]], val_rows: list[list[int]]) -> MajorityRates:
        train_class, train_count = Counter(q for _, q in train_rows).most_common(1)[0]
        val_own_count = Counter(q for _, q in val_rows).most_common(1)[0][1]
        return cls(int(train_class), train_count / len(train_rows),
                   float(np.mean([q == train_class for _, q in val_rows])), val_own_count / len(val_rows))


def _calibration(model: torch.nn.Module, images_dir: Path, train_rows: list[list[int]], held_rows: list[list[int]],
                 profile: TrainProfile, device: DeviceSetup, context: Distributed, seed: int,
                 decoder: BatchDecoder | None = None) -> dict[str, Any]:
    """Predicted counts on training bins, so the quantity baseline can test its count cap without
    looking at the validation questions (:mod:`vsbench.abid.quantity`).

    The bins held out of training (``epoch_selection: holdout``) when there are any: the network
    never saw them. Otherwise a seeded tenth of the training bins, which it trained on (its counts
    there are better than on new bins, so the cap is judged a little kindly; ``trained_on`` says so).
    """
    rows = held_rows
    if not rows and len(train_rows) > 1:
        rows = hold_out(train_rows, CALIBRATION_FRACTION, seed + 1)[1]
    predicted = (predict_classes(model, images_dir, [i for i, _ in rows], profile, device, context, decoder)
                 if rows else [])
    return {"trained_on": not held_rows, "bins": [[int(i), int(p)] for (i, _), p in zip(rows, predicted)]}


def _loader(dataset, profile: TrainProfile, device: DeviceSetup, decoder: BatchDecoder | None = None) -> DataLoader:
    """Inference loader: in order, every image (training batches come from ``epoch_loader``)."""
    return DataLoader(dataset, batch_size=profile.batch_size, collate_fn=collate_for(decoder),
                      **loader_options(loader_workers(profile.workers), cuda=device.is_cuda))


def predict_classes(model: torch.nn.Module, images_dir: Path, indices: list[int], profile: TrainProfile,
                    device: DeviceSetup, context: Distributed = SINGLE, decoder: BatchDecoder | None = None) -> list[int]:
    """Predicted class of each image; under DDP each rank predicts its share and all get the whole list.
    With a ``decoder`` the images are decoded in batches on the device."""
    transform = BatchTransform(device.device, decoder=decoder)
    out: list[int] = []
    mine = context.shard(indices)
    if mine:
        images = Images(images_dir, mine, profile.image_size, encoded=decoder is not None)
        for batch in _loader(images, profile, device, decoder):
            out += model(transform(batch)).argmax(1).tolist()
    return context.gather(out)


def train_counting(
    tasks_dir: Path, images_dir: Path, out_dir: Path, profile: TrainProfile, device: DeviceSetup, *,
    seed: int = 0, hard: bool = False, on_epoch_end=None, progress: bool = True, context: Distributed = SINGLE,
    max_failure_rate: float | None = None, decode: str = "auto",
) -> CountingRun:
    """Train (resuming from ``out_dir/checkpoints/counting`` when it holds this run's checkpoint)
    and write the result file, the calibration and the summary.

    ``context``: this process's place in a torchrun job (every rank calls this with the same
    arguments; only rank 0 writes files). ``profile.batch_size`` is the global batch. Images that
    do not decode are left out like missing ones and listed in ``unreadable_images.json``; the run
    fails when their share passes ``max_failure_rate`` (:mod:`vsbench.imaging.limits`). ``decode``:
    where the JPEGs are decoded (:data:`vsbench.imaging.modes.DECODE_MODES`)."""
    decoder = training_decoder(device, profile.image_size, decode)
    suffix = "_hard" if hard else ""
    task_files = [tasks_dir / f"counting_train{suffix}.json", tasks_dir / f"counting_val{suffix}.json"]
    train_rows, val_rows = (read_json(path) for path in task_files)
    if not train_rows or not val_rows:
        raise ValueError(f"{tasks_dir}: counting_train{suffix}.json or counting_val{suffix}.json is empty")
    checkpoints = checkpoint_dir(out_dir, "counting")
    identity: TrainingIdentity = context.share(training_identity(
        "counting", profile, seed=seed, hard=hard, task_files=task_files,
        images=[image_path(images_dir, int(i)) for i in sorted({row[0] for row in train_rows + val_rows})],
        memo_path=checkpoints / MEMO_NAME) if context.is_main else None)
    num_classes = 6 if not hard else max(q for _, q in train_rows + val_rows) + 1
    unreadable: list[dict[str, Any]] = []  # corrupt, truncated or oversized: left out, listed, counted
    train_present, _ = split_available(images_dir, [i for i, _ in train_rows], unreadable)
    present = set(train_present)
    train_rows = [row for row in train_rows if row[0] in present]
    val_present, val_missing = split_available(images_dir, [i for i, _ in val_rows], unreadable)
    check_unreadable("train counting", out_dir, unreadable, len(present) + len(val_present) + len(unreadable),
                     max_failure_rate, context.is_main)
    truth = dict(map(tuple, val_rows))
    held_rows: list[list[int]] = []
    if profile.epoch_selection == "holdout":
        train_rows, held_rows = hold_out(train_rows, profile.holdout_fraction, seed)
    held_truth = dict(map(tuple, held_rows))

    torch.manual_seed(seed)  # the initial weights depend on the seed alone
    model = counting_network(num_classes, arch=profile.arch)
    transform = BatchTransform(device.device, (context.rank, context.world_size), decoder)
    dataset = LabelledImages(images_dir, train_rows, profile.image_size, encoded=decoder is not None)
    context.per_rank_batch(profile.batch_size, len(dataset))  # refuse a bad split before any work

    def batches(epoch: int):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        return epoch_loader(dataset, profile.batch_size, generator=generator, workers=profile.workers,
                            drop_last=len(dataset) > profile.batch_size, context=context, cuda=device.is_cuda,
                            collate_fn=collate_for(decoder))

    def step(model, batch, device, epoch, index):
        images, labels = batch
        logits = model(transform(images, flip_generator(seed, epoch, index)))
        labels = labels.to(device.device)
        return F.cross_entropy(logits, labels), int((logits.argmax(1) == labels).sum()), len(labels)

    def evaluate(model) -> dict[str, float]:
        predicted = predict_classes(model, images_dir, val_present, profile, device, context, decoder)
        accuracy = float(np.mean([p == truth[i] for i, p in zip(val_present, predicted)]))
        metrics = {"score": accuracy, "accuracy": accuracy}
        if held_rows:
            held = predict_classes(model, images_dir, list(held_truth), profile, device, context, decoder)
            metrics["holdout_score"] = float(np.mean([p == held_truth[i] for i, p in zip(held_truth, held)]))
        return metrics

    result = fit(model=model, make_batches=batches, step=step, evaluate=evaluate, profile=profile, device=device,
                 checkpoint_dir=checkpoints, seed=seed, identity=identity, images_per_batch=lambda b: len(b[1]),
                 on_epoch_end=on_epoch_end, progress=progress, context=context)

    model.eval()
    with torch.no_grad(), device.autocast():
        predicted = dict(zip(val_present, predict_classes(model, images_dir, val_present, profile, device, context,
                                                          decoder)))
        calibration = _calibration(model, images_dir, train_rows, held_rows, profile, device, context, seed, decoder)
    rates = MajorityRates.of(train_rows, val_rows)
    predictions = [predicted.get(idx, rates.train_majority_class) for idx, _ in val_rows]
    result_path = out_dir / RESULT_NAME
    run = CountingRun(result, predictions, result_path, val_missing, num_classes, rates.val_rate_of_train_majority,
                      rates.val_own_majority_rate, decode_stats(decoder))
    check_inputs(identity, context, result_path.name)  # the predictions read the images again
    if context.is_main:
        atomic_write_text(result_path, "".join(f"{p}\n" for p in predictions))
        # Keyed on the result it goes with: the quantity step uses it only beside that very result.
        calibration.update(counting_result_sha256=file_sha256(result_path), checkpoint_identity=identity.digest)
        atomic_write_json(out_dir / CALIBRATION_NAME, calibration)
        _write_summary(out_dir, run, rates.train_majority_class, rates.train_majority_rate)
    context.barrier()  # every rank returns once the files exist
    return run


def _write_summary(out_dir: Path, run: CountingRun, majority_class: int, train_majority: float) -> None:

    summary: dict[str, Any] = {
        "chosen_epoch": run.fit.best_epoch, "chosen_val_accuracy": run.fit.best_score,
        "epoch_choice": run.fit.describe_choice(),
        "majority_class": majority_class, "train_majority_rate": train_majority,
        "val_rate_of_train_majority": run.val_rate_of_train_majority,
        "val_own_majority_rate": run.val_own_majority_rate,
        OLD_MAJORITY_KEY: run.val_rate_of_train_majority,  # one release, for readers of older summaries
        "missing_val_images": run.missing_images,
        "decode": run.decode,
        "history": run.fit.history,
    }
    atomic_write_json(out_dir / "counting_summary.json", summary)
