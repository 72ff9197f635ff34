"""A small, exact-resume training loop shared by the ABID baselines.

After every epoch the whole state (model, optimizer, scheduler, grad scaler, torch RNG, history,
best score) is checkpointed atomically. Everything random in an epoch is seeded by
(seed, epoch, ...), so a run interrupted after epoch k and resumed ends in exactly the state of
an uninterrupted run. The best model by validation score is kept apart (``best.pt``).
Checkpoints are loaded with ``weights_only=True``: no pickle code runs. Each carries the run's
identity (task, profile, seed, digests of what it reads: vsbench.abid.checkpoints), and only a
checkpoint of this very run is resumed; any other is moved aside, with one line saying why. Before
each checkpoint the inputs' digests are checked again (a ``stat`` a file): an image rewritten while
the epoch read it stops the run in one line, with nothing written under the old identity.

Under torchrun (``context``, see vsbench.abid.distributed) the same loop runs data-parallel: the
steps call the DDP-wrapped model, the epoch's counts are summed over ranks, only rank 0 writes
checkpoints (the others wait at the epoch-end barrier), and every rank resumes from the same
``last.pt``. The checkpoint holds the plain model's weights, so one process can resume what N
processes started and the other way round.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from vsbench.abid.checkpoints import BEST, LAST, TrainingIdentity, check_best, check_inputs, load_state, resume_state
from vsbench.abid.distributed import SINGLE, Distributed
from vsbench.abid.profiles import TrainProfile
from vsbench.io.progress import progress_bar
from vsbench.io.storage import atomic_write_bytes
from vsbench.runtime.device import DeviceSetup
from vsbench.runtime.throughput import Throughput

T = TypeVar("T")
__all__ = ["BEST", "LAST", "FitResult", "fit", "hold_out", "load_state", "save_state"]

# (model, batch, device) -> (loss, correct, count): one optimisation step's forward pass.
StepFn = Callable[[nn.Module, Any, DeviceSetup, int, int], tuple[torch.Tensor, int, int]]
# (model) -> metrics with a "score" key (the validation score, higher is better) and, when the
# profile chooses its epoch on held-out training data, a "holdout_score" key.
EvalFn = Callable[[nn.Module], dict[str, float]]

SELECTION_KEYS = {"val": "score", "holdout": "holdout_score", "last": None}
SELECTION_WORDS = {"val": "best on the validation questions (optimistic: chosen on what it reports)",
                   "holdout": "best on training bins held out of training", "last": "the last epoch"}


@dataclass
class FitResult:
    history: list[dict[str, float]]
    best_score: float  # the validation score of the chosen epoch
    best_epoch: int  # the chosen epoch (1-based), by ``selection``
    resumed_from: int
    checkpoint_dir: Path
    seconds: float = 0.0
    images_per_second: float = 0.0  # every trained image over the whole fit (start-up, validation included)
    extra: dict[str, Any] = field(default_factory=dict)
    # vsbench.runtime.throughput: fit() start to the first batch out of the model, and the images
    # after it over the seconds spent in the epochs' batch loops after it (validation and
    # checkpoints paused); None when nothing trained, or one batch only.
    startup_seconds: float | None = None
    steady_images_per_second: float | None = None
    world_size: int = 1
    selection: str = "val"

    def chosen_metrics(self) -> dict[str, float]:
        """The chosen epoch's held-out score, when the epoch was chosen on one."""
        if not 0 < self.best_epoch <= len(self.history):
            return {}
        record = self.history[self.best_epoch - 1]
        return {"chosen_holdout_accuracy": record["holdout_score"]} if "holdout_score" in record else {}

    def describe_choice(self) -> str:
        """How the reported epoch was chosen, in words (for summaries and logs)."""
        return f"epoch {self.best_epoch} of {len(self.history)}, {SELECTION_WORDS[self.selection]}"


def hold_out(items: list[T], fraction: float, seed: int) -> tuple[list[T], list[T]]:
    """(kept, held out): ``fraction`` of ``items`` (at least one) drawn by ``seed``, both in the
    original order. The held-out part chooses the epoch (``epoch_selection: holdout``), so the
    validation score stays a fresh measurement instead of the best of several looks at it."""
    held = max(round(fraction * len(items)), 1)
    if held >= len(items):
        raise ValueError(f"cannot hold out {fraction:.0%} of {len(items)} training items and still train: "
                         "use epoch_selection 'val' or 'last', or more data")
    chosen = set(np.random.default_rng([seed, 0x401D]).choice(len(items), size=held, replace=False).tolist())
    return ([x for i, x in enumerate(items) if i not in chosen], [x for i, x in enumerate(items) if i in chosen])


def save_state(path: Path, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def make_optimizer(model: nn.Module, profile: TrainProfile) -> torch.optim.Optimizer:
    """SGD with momentum is the challenge's; AdamW converges in far fewer epochs from scratch on
    small data, which is what a CPU demo can afford.

    AdamW runs fused (one kernel over all parameters) on the CPU and CUDA: the per-tensor loop
    took 172 ms a step for the siamese network's 42 M parameters on 2 cores, 14% of a demo step;
    fused takes 31 ms, to rounding the same update.
    """
    parameters = [p for p in model.parameters() if p.requires_grad]  # a frozen trunk is not optimized
    if profile.optimizer == "adamw":
        fused = bool(parameters) and all(p.device.type in ("cpu", "cuda") and p.dtype == torch.float32
                                         for p in parameters)
        return torch.optim.AdamW(parameters, lr=profile.lr, weight_decay=profile.weight_decay, fused=fused or None)
    return torch.optim.SGD(parameters, lr=profile.lr, momentum=profile.momentum, weight_decay=profile.weight_decay)


def fit(
    *,
    model: nn.Module,
    make_batches: Callable[[int], DataLoader],
    step: StepFn,
    evaluate: EvalFn,
    profile: TrainProfile,
    device: DeviceSetup,
    checkpoint_dir: Path,
    seed: int,
    identity: TrainingIdentity,
    images_per_batch: Callable[[Any], int],
    on_epoch_end: Callable[[dict[str, float]], None] | None = None,
    progress: bool = True,
    context: Distributed = SINGLE,
) -> FitResult:
    """Train for ``profile.epochs`` epochs, resuming from ``checkpoint_dir/last.pt`` when it is
    this run's (its ``identity``; another is moved aside: vsbench.abid.checkpoints.resume_state).

    ``step`` receives the module to train (DDP-wrapped under torchrun); ``evaluate`` receives
    the plain model and must return the same metrics on every rank. ``make_batches`` yields this
    rank's part of each global batch. ``progress`` draws the per-batch bar; the line per epoch
    (loss, accuracies, time, ``*`` on the epoch chosen so far) is printed on rank 0 either way, so
    a pipeline step's log shows how training goes."""

    meter = Throughput()  # start-up: moving the model, the first epoch's workers, the first batch
    torch.manual_seed(seed)
    model.to(device.device).to(memory_format=torch.channels_last)
    progress = progress and context.is_main
    optimizer = make_optimizer(model, profile)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=profile.lr_step_epochs, gamma=profile.lr_gamma)
    scaler = torch.amp.GradScaler("cuda", enabled=device.needs_grad_scaler())
    history: list[dict[str, float]] = []
    best_score, best_epoch, start = -math.inf, 0, 0
    selection_key = SELECTION_KEYS[profile.epoch_selection]
    best_selection = -math.inf  # the chosen epoch's selection score (its validation score under "val")

    last = checkpoint_dir / LAST
    keyed = {"identity": identity.fields, "identity_sha256": identity.digest}
    state = resume_state(checkpoint_dir, identity, profile.epochs, context)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        history, best_score, best_epoch, start = state["history"], state["best_score"], state["best_epoch"], state["epoch"]
        best_selection = state.get("best_selection", best_score)
    resumed_from = start
    if start >= profile.epochs and context.is_main:  # a re-run of a finished training: say so, train nothing
        print(f"already trained: {last} holds epoch {start} of {profile.epochs}; nothing to train (the chosen "
              f"epoch {best_epoch} answers; remove {checkpoint_dir} to train again)", flush=True)
    trained = context.wrap(model, device)  # after the load: DDP starts every rank from rank 0's weights

    started = time.perf_counter()
    images_seen = 0
    for epoch in range(start, profile.epochs):
        meter.resume()  # a new epoch's loader starting its workers is training time
        context.reseed(seed, epoch)
        trained.train()
        epoch_started = time.perf_counter()
        loss_sum, correct, count, images = 0.0, 0, 0, 0
        batches = make_batches(epoch)
        # The bar only counts: tqdm.auto wrapping the loader would iterate it twice (its async
        # wrapper calls iter() once more), starting a second set of workers and drawing one more
        # seed from the epoch's generator, so the order would not be the loader's own.
        bar = progress_bar(total=len(batches), desc=f"epoch {epoch + 1}/{profile.epochs}", unit="batch", disable=not progress,
                   leave=False)
        for batch_index, batch in enumerate(batches):
            optimizer.zero_grad(set_to_none=True)
            with device.autocast():
                loss, batch_correct, batch_count = step(trained, batch, device, epoch, batch_index)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_sum += float(loss.detach()) * batch_count
            correct, count = correct + batch_correct, count + batch_count
            done = images_per_batch(batch)
            images += done
            meter.batch_done(done * context.world_size)  # float(loss) above waited for the step
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum / max(count, 1):.3f}")
        bar.close()
        meter.pause()  # validation and checkpoints are not training time
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        train_seconds = time.perf_counter() - epoch_started
        if context.enabled:  # every rank records the global figures
            loss_sum, correct, count, images = context.sum([loss_sum, correct, count, images])
            correct, count, images = int(correct), int(count), int(images)
        images_seen += images
        model.eval()
        with torch.no_grad(), device.autocast():
            metrics = evaluate(model)
        record = {"epoch": float(epoch + 1), "lr": lr, "train_loss": loss_sum / max(count, 1),
                  "train_accuracy": correct / max(count, 1), "train_images_per_second": images / max(train_seconds, 1e-9),
                  "epoch_seconds": time.perf_counter() - epoch_started}
        record.update({k if k.startswith("holdout_") else f"val_{k}": float(v) for k, v in metrics.items()})
        history.append(record)
        # The epoch read its images again (workers, validation): written only if they are still the
        # bytes its identity names, else one line and nothing under that identity (issue 46).
        check_inputs(identity, context, f"epoch {epoch + 1}'s checkpoint")
        chosen = selection_key is None or metrics[selection_key] > best_selection
        if chosen:
            best_selection = float(epoch + 1) if selection_key is None else float(metrics[selection_key])
            best_score, best_epoch = float(metrics["score"]), epoch + 1
            if context.is_main:
                save_state(checkpoint_dir / BEST, {"model": model.state_dict(), "epoch": epoch + 1, "score": best_score,
                                                   **keyed})
        if context.is_main:
            save_state(last, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                              "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                              "torch_rng": torch.get_rng_state(), "history": history, "best_score": best_score,
                              "best_selection": best_selection, "best_epoch": best_epoch, "epoch": epoch + 1,
                              **keyed})
        context.barrier()  # no rank starts the next epoch (or finishes) before last.pt is written
        if context.is_main:  # one line an epoch, bars or not: a pipeline step's log shows it too
            held_out = f" held-out {metrics['holdout_score']:.4f}" if "holdout_score" in metrics else ""
            print(f"epoch {epoch + 1}/{profile.epochs}: loss {record['train_loss']:.4f} "
                  f"train acc {record['train_accuracy']:.3f} val {metrics['score']:.4f}{held_out} "
                  f"({record['epoch_seconds']:.1f} s){' *' if chosen else ''}", flush=True)
        if on_epoch_end is not None:
            on_epoch_end(record)

    seconds = time.perf_counter() - started
    if (checkpoint_dir / BEST).exists():
        model.load_state_dict(check_best(checkpoint_dir / BEST, identity)["model"])
    return FitResult(history, best_score, best_epoch, resumed_from, checkpoint_dir, seconds,
                     images_seen / seconds if seconds > 0 and images_seen else 0.0, world_size=context.world_size,
                     selection=profile.epoch_selection,
                     extra={"identity_sha256": identity.digest, "inputs_hashed": identity.hashed},
                     startup_seconds=meter.startup_seconds, steady_images_per_second=meter.steady_images_per_second)
