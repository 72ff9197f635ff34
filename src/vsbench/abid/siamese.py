"""Siamese verification baseline: "is this asin in the bin?" answered by comparing the bin with
training images known to hold the asin.

At test time each question pairs the validation image with up to ``max_targets`` (20) training
images holding the asin and answers by strict majority: yes iff ``#{p > 0.5} / n > 0.5`` (a tie
is "no"). Upstream draws the n training images with replacement; we draw them without
replacement from a generator seeded by (seed, question), so a question's answer is reproducible.
Each image goes through the trunk once; only the cheap head runs per pair. Training does the
same for a row's ``pairs_per_row`` pairs: they all start from the row's image (``SiameseRowPairs``),
which is embedded once for all of them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from vsbench.abid.checkpoints import MEMO_NAME, TrainingIdentity, check_inputs, checkpoint_dir, training_identity
from vsbench.abid.coverage import MODERATE_MAX_QUANTITY
from vsbench.abid.data import (
    BatchTransform,
    Images,
    SiameseRowPairs,
    check_unreadable,
    collate_for,
    decode_metrics,
    decode_stats,
    flat_pairs,
    flip_generator,
    image_path,
    split_available,
    training_decoder,
)
from vsbench.abid.distributed import SINGLE, Distributed, epoch_loader
from vsbench.abid.models import SiameseNetwork, arch_of_trunk
from vsbench.abid.pairs import SiamesePairSampler
from vsbench.abid.profiles import TrainProfile
from vsbench.abid.trainer import FitResult, fit, hold_out, load_state
from vsbench.imaging.batched import BatchDecoder
from vsbench.io.inputs import read_index_list, read_json
from vsbench.io.storage import atomic_write_json, atomic_write_text
from vsbench.runtime.device import DeviceSetup
from vsbench.runtime.loaders import loader_options, loader_workers

RESULT_NAME = "obj_verification_result.txt"


@dataclass
class SiameseRun:
    fit: FitResult
    predictions: list[int]
    result_path: Path
    unanswerable: list[int]  # question numbers whose images were all missing: answered "no"
    decode: dict[str, Any] = field(default_factory=dict)  # where the JPEGs were decoded (decode_stats)

    def summary_metrics(self) -> dict[str, float]:
        return {"unanswerable_questions": float(len(self.unanswerable)), **decode_metrics(self.decode)}


def majority_vote(probabilities: np.ndarray) -> int:
    """The challenge's decision rule: 1 iff strictly more than half of the pairs say p > 0.5."""
    if probabilities.size == 0:
        return 0
    return int(np.count_nonzero(probabilities > 0.5) / probabilities.size > 0.5)


def choose_targets(targets: list[int], available: set[int], limit: int, seed: int, question: int) -> list[int]:
    usable = [t for t in targets if t in available]
    if len(usable) <= limit:
        return usable
    rng = np.random.default_rng([seed, question])
    return sorted(usable[i] for i in rng.choice(len(usable), size=limit, replace=False))


def _asins_by_index(metadata: list[dict[str, Any]], indices: list[int]) -> dict[int, frozenset[str]]:
    return {i: frozenset(e["asin"] for e in metadata[i]["BIN_FCSKU_DATA"].values()
                         if isinstance(e, dict) and isinstance(e.get("asin"), str)) for i in indices}


class VerificationScorer:
    """Answers verification questions with a (trained) siamese network."""

    def __init__(self, questions: list[list[Any]], images_dir: Path, profile: TrainProfile, device: DeviceSetup,
                 seed: int, checked: Collection[int] = (), decoder: BatchDecoder | None = None) -> None:
        """``checked``: images already found readable (the training candidates), not decoded again;
        ``decoder``: decode the images in batches on the device."""
        available = set(split_available(images_dir, sorted({q[0] for q in questions} | {
            t for q in questions for t in q[3]}), checked=checked)[0])
        self.pairs: list[tuple[int, list[int]]] = []
        self.unanswerable: list[int] = []
        for number, question in enumerate(questions):
            chosen = choose_targets(question[3], available, profile.max_targets, seed, number)
            if question[0] not in available or not chosen:
                self.unanswerable.append(number)
                chosen = []
            self.pairs.append((question[0], chosen))
        self.images_dir, self.profile, self.device, self.decoder = images_dir, profile, device, decoder
        self.labels = np.array([int(q[2]) for q in questions])

    def probabilities(self, model: SiameseNetwork,
                      pairs: list[tuple[int, list[int]]] | None = None) -> list[np.ndarray]:
        """p(same object) of each (question image, target) pair of ``pairs`` (default: all questions)."""
        pairs = self.pairs if pairs is None else pairs
        needed = sorted({i for i, targets in pairs if targets} | {t for _, ts in pairs for t in ts})
        transform = BatchTransform(self.device.device, decoder=self.decoder)
        loader = DataLoader(Images(self.images_dir, needed, self.profile.image_size, encoded=self.decoder is not None),
                            batch_size=self.profile.batch_size, collate_fn=collate_for(self.decoder),
                            **loader_options(loader_workers(self.profile.workers), cuda=self.device.is_cuda))
        features = torch.cat([model.embed(transform(batch)).float() for batch in loader]) if needed else None
        row = {idx: n for n, idx in enumerate(needed)}
        out = []
        for idx, targets in pairs:
            if not targets:
                out.append(np.zeros(0))
                continue
            first = features[row[idx]].expand(len(targets), -1)
            second = features[[row[t] for t in targets]]
            out.append(torch.sigmoid(model.compare(first, second).float()).cpu().numpy())
        return out

    def answers(self, model: SiameseNetwork, context: Distributed = SINGLE) -> list[int]:
        """One answer per question; under DDP each rank answers its share (embedding only the images
        those questions need) and every rank gets all the answers."""
        return context.gather([majority_vote(p) for p in self.probabilities(model, context.shard(self.pairs))])


def _usable_rows(train_rows: list[list[Any]], available: set[int]) -> list[list[Any]]:
    """Rows ``[idx, [[asin, [targets]], ...]]`` with only ``available`` targets, objects and rows
    left empty by that dropped."""
    rows = [[idx, [[asin, [t for t in ts if t in available]] for asin, ts in objects]] for idx, objects in train_rows]
    rows = [[idx, [o for o in objects if o[1]]] for idx, objects in rows]
    return [row for row in rows if row[1]]


def _held_out_pairs(held_rows: list[list[Any]], asins: dict[int, frozenset[str]], pool: list[int],
                    profile: TrainProfile, seed: int) -> tuple[list[tuple[int, list[int]]], np.ndarray]:
    """Fixed pairs of each held-out bin with training images, drawn as training draws them
    (``pairs_per_row`` of them, at least 4): (bin, partners) groups and their 0/1 labels."""
    if not held_rows:
        return [], np.zeros(0)
    sampler = SiamesePairSampler(held_rows, asins, pos_prob=profile.pos_prob, pool=pool)
    groups, labels = [], []
    for number in range(len(held_rows)):
        rng = np.random.default_rng([seed, 0x401D, number])
        pairs = [sampler.sample(number, rng) for _ in range(max(profile.pairs_per_row, 4))]
        groups.append((pairs[0].first, [pair.second for pair in pairs]))
        labels += [pair.label for pair in pairs]
    return groups, np.array(labels)


def load_counting_trunk(model: SiameseNetwork, checkpoint: Path) -> None:
    """Start the shared trunk from a trained counting network (everything but its classifier).

    Counting teaches the trunk what an item looks like; on a small data budget that is a far better
    start for "do these two bins share an item?" than random weights."""

    if not checkpoint.exists():
        raise FileNotFoundError(f"{checkpoint}: no counting checkpoint to start the siamese trunk from "
                                "(train the counting baseline first, into this --out or its sibling counting/, "
                                "or set siamese_trunk_init='scratch')")
    saved = load_state(checkpoint)
    identity = saved.get("identity")  # absent from checkpoints written before they were keyed
    task = identity.get("task", "counting") if isinstance(identity, dict) else "counting"
    if task != "counting":
        raise ValueError(f"{checkpoint}: a {task} checkpoint, not a counting one, cannot start the siamese trunk")
    state = {k: v for k, v in saved["model"].items() if not k.startswith("fc.")}
    missing, unexpected = model.trunk.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.startswith("fc.")]:
        trunk = arch_of_trunk(model.trunk.state_dict())
        raise ValueError(f"{checkpoint}: not a counting checkpoint of this {trunk} trunk (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]})")


def train_siamese(
    tasks_dir: Path, images_dir: Path, out_dir: Path, profile: TrainProfile, device: DeviceSetup, *,
    seed: int = 0, hard: bool = False, on_epoch_end=None, progress: bool = True,
    trunk_checkpoint: Path | None = None, context: Distributed = SINGLE, max_failure_rate: float | None = None,
    decode: str = "auto",
) -> SiameseRun:
    """Train (resuming from ``out_dir/checkpoints/siamese`` when it holds this run's checkpoint)
    and write the result file and summary.

    ``context``: this process's place in a torchrun job (every rank calls this with the same
    arguments; only rank 0 writes files). ``profile.batch_size`` is the global batch of pairs.
    ``decode``: where the JPEGs are decoded (:data:`vsbench.imaging.modes.DECODE_MODES`)."""
    decoder = training_decoder(device, profile.image_size, decode)
    suffix = "_hard" if hard else ""
    if profile.siamese_lr is not None:  # the 4096-wide head from scratch wants a gentler lr than counting
        profile = profile.model_copy(update={"lr": profile.siamese_lr})
    task_files = [tasks_dir / f"obj_verification_train{suffix}.json", tasks_dir / f"obj_verification_val{suffix}.json",
                  tasks_dir / "metadata.json", tasks_dir / "random_train.txt"]
    train_rows, questions, metadata = (read_json(path) for path in task_files[:3])
    train_ids = read_index_list(task_files[3])
    if not train_rows or not questions:
        raise ValueError(f"{tasks_dir}: obj_verification_train{suffix}.json or _val{suffix}.json is empty")

    def holds_items(i: int) -> bool:
        quantity = metadata[i].get("EXPECTED_QUANTITY", 0)
        return quantity > 0 and (hard or quantity <= MODERATE_MAX_QUANTITY)

    unreadable: list[dict[str, Any]] = []  # corrupt, truncated or oversized: left out, listed, counted
    wanted = [i for i in train_ids if metadata[i] and holds_items(i)]
    checkpoints = checkpoint_dir(out_dir, "siamese")
    read = sorted(set(wanted) | {q[0] for q in questions} | {t for q in questions for t in q[3]})
    identity: TrainingIdentity = context.share(training_identity(
        "siamese", profile, seed=seed, hard=hard, task_files=task_files,
        images=[image_path(images_dir, int(i)) for i in read], memo_path=checkpoints / MEMO_NAME,
        trunk=trunk_checkpoint) if context.is_main else None)
    candidates, _ = split_available(images_dir, wanted, unreadable)
    check_unreadable("train siamese", out_dir, unreadable, len(candidates) + len(unreadable), max_failure_rate,
                     context.is_main)
    available = set(candidates)
    held_rows: list[list[Any]] = []
    if profile.epoch_selection == "holdout":  # held-out bins are never trained on, not even as partners
        kept, held = hold_out(sorted(available), profile.holdout_fraction, seed)
        available = set(kept)
        held_rows = _usable_rows([row for row in train_rows if row[0] in set(held)], available)
    rows = _usable_rows([row for row in train_rows if row[0] in available], available)
    asins = _asins_by_index(metadata, candidates)
    sampler = SiamesePairSampler(rows, asins, pos_prob=profile.pos_prob, pool=sorted(available))
    held_pairs, held_labels = _held_out_pairs(held_rows, asins, sorted(available), profile, seed)
    dataset = SiameseRowPairs(images_dir, sampler, profile.image_size, seed, profile.pairs_per_row,
                              encoded=decoder is not None)
    rows_per_batch = profile.batch_size // profile.pairs_per_row  # the profile checks that it divides
    scorer = VerificationScorer(questions, images_dir, profile, device, seed, checked=set(candidates), decoder=decoder)
    torch.manual_seed(seed)  # the initial weights depend on the seed alone
    if profile.siamese_freeze_trunk and trunk_checkpoint is None:
        raise ValueError("siamese_freeze_trunk needs a trained trunk (siamese_trunk_init='counting')")
    model = SiameseNetwork(profile.dropout, freeze_trunk=profile.siamese_freeze_trunk, arch=profile.arch,
                           pair_features=profile.siamese_pair_features, head_width=profile.siamese_head_width)
    if trunk_checkpoint is not None:
        load_counting_trunk(model, trunk_checkpoint)
    transform = BatchTransform(device.device, (context.rank, context.world_size), decoder)
    context.per_rank_batch(rows_per_batch, len(dataset))  # refuse a bad split before any work

    def batches(epoch: int):
        dataset.epoch = epoch
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        return epoch_loader(dataset, rows_per_batch, generator=generator, workers=profile.workers,
                            drop_last=len(dataset) > rows_per_batch, context=context, cuda=device.is_cuda,
                            collate_fn=collate_for(decoder))

    def step(model, batch, device, epoch, index):
        anchors, partners, labels = batch  # (B, C, H, W), (B, pairs_per_row, C, H, W), (B, pairs_per_row)
        logits = model(transform(anchors, flip_generator(seed, epoch, 2 * index)),
                       transform(flat_pairs(partners), flip_generator(seed, epoch, 2 * index + 1)))
        labels = labels.flatten().to(device.device, dtype=logits.dtype)
        loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return loss, int(((logits > 0) == (labels > 0.5)).sum()), len(labels)

    def evaluate(model) -> dict[str, float]:
        accuracy = float(np.mean(np.array(scorer.answers(model, context)) == scorer.labels))
        metrics = {"score": accuracy, "accuracy": accuracy}
        if held_pairs:  # pair accuracy on the held-out bins (every rank computes it whole: it is small)
            said = np.concatenate(scorer.probabilities(model, held_pairs)) > 0.5
            metrics["holdout_score"] = float(np.mean(said == held_labels))
        return metrics

    result = fit(model=model, make_batches=batches, step=step, evaluate=evaluate, profile=profile, device=device,
                 checkpoint_dir=checkpoints, seed=seed, identity=identity, images_per_batch=lambda b: len(b[0]) + b[1].shape[0] * b[1].shape[1],
                 on_epoch_end=on_epoch_end, progress=progress, context=context)
    model.eval()
    with torch.no_grad(), device.autocast():
        predictions = scorer.answers(model, context)
    result_path = out_dir / RESULT_NAME
    check_inputs(identity, context, result_path.name)  # the answers read the images again
    if context.is_main:
        atomic_write_text(result_path, "".join(f"{p}\n" for p in predictions))
        atomic_write_json(out_dir / "siamese_summary.json", {
            "chosen_epoch": result.best_epoch, "chosen_val_accuracy": result.best_score,
            "epoch_choice": result.describe_choice(), "train_rows": len(rows),
            "unanswerable_questions": scorer.unanswerable, "decode": decode_stats(decoder), "history": result.history})
    context.barrier()  # every rank returns once the files exist
    return SiameseRun(result, predictions, result_path, scorer.unanswerable, decode_stats(decoder))
