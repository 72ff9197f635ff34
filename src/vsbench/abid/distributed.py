"""Data-parallel training of the ABID baselines under ``torchrun`` (DistributedDataParallel).

One process per device (``torchrun --nproc-per-node N``; on Kubeflow a PyTorchJob, see
docs/scale.md). The design goal is that N processes compute what one process would with the same
**global** batch, so a run's result does not depend on how many machines trained it:

* The sample order of an epoch is the single-process order (the same seeded DataLoader machinery
  over the indices); global batch ``k`` is cut into ``world_size`` consecutive slices and rank
  ``r`` loads slice ``r`` only. Each rank reads its own part of the data, nothing more.
* The random flip of a batch is drawn for the whole global batch and sliced the same way.
* BatchNorm statistics are computed over the global batch (SyncBatchNorm on CUDA; on the CPU,
  where torch's SyncBatchNorm refuses to run, :class:`GlobalBatchNorm`), so ResNet's BN layers
  see what they see in one process.
* DDP averages the gradients; train loss and accuracy are summed over ranks; validation is split
  over ranks and gathered, so every rank sees the same score and takes the same decisions.
* Only rank 0 writes checkpoints and result files (atomically), and it alone holds the output
  folder's lock for the job (:func:`writer_lock`, its outcome shared with the others); every rank
  loads the same ``last.pt`` on resume, when rank 0 found it to be this run's. Randomness that is per rank (dropout on ranks > 0) is reseeded from
  (seed, rank, epoch) at each epoch start, so a resumed run repeats an uninterrupted one.

What still differs from one process is the order of floating-point sums (gradient all-reduce,
the BN statistics): results agree to rounding, not bit for bit (tests/unit/test_distributed.py
states the tolerance). Outside ``torchrun`` (no ``WORLD_SIZE`` > 1 in the environment) nothing
here changes the single-process code path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from vsbench.io.locks import InputBusy, OutputBusy, output_lock, reading_lock
from vsbench.runtime.device import DeviceSetup, setup_device
from vsbench.runtime.loaders import loader_options, loader_workers

T = TypeVar("T")

# How long a collective may wait for a peer before the survivors fail instead of hanging. A rank
# that dies outright is noticed at once (torchrun stops the others; gloo sees the closed socket);
# this bounds the case of a peer that hangs. Override with VSBENCH_DIST_TIMEOUT_S.
DEFAULT_TIMEOUT_S = 900


@dataclass(frozen=True)
class Distributed:
    """Where this process stands in a data-parallel job; the default is the single process."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes checkpoints, result files, manifests and MLflow records."""
        return self.rank == 0

    def per_rank_batch(self, global_batch: int, samples: int, bound: str = "") -> int:
        """The batch each rank loads: the profile's ``batch_size`` is the global batch, so that
        a run's optimisation does not depend on the number of processes. ``bound``: ``samples`` is
        an upper bound, from where it says (a launcher's check before any process starts)."""
        if global_batch % self.world_size:
            raise ValueError(f"batch_size {global_batch} (the global batch) is not divisible by the "
                             f"world size {self.world_size}: choose a batch_size that is a multiple of it")
        if self.enabled and samples < global_batch:
            has = f"at most {samples} samples ({bound})" if bound else f"{samples} samples"
            raise ValueError(f"the training set has {has}, fewer than the global batch "
                             f"(batch_size {global_batch}); with {self.world_size} processes every rank "
                             "needs a full share: lower batch_size or train in one process")
        return global_batch // self.world_size

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's part of ``items`` (every ``world_size``-th item, from ``rank``): balanced to one item."""
        return list(items[self.rank::self.world_size])

    def gather(self, part: Sequence[T]) -> list[T]:
        """Inverse of :meth:`shard`: every rank's part, back in the original order, on every rank."""
        if not self.enabled:
            return list(part)
        parts: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(parts, list(part))
        total = sum(len(p) for p in parts)
        return [parts[i % self.world_size][i // self.world_size] for i in range(total)]

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks (float64, so counts stay exact)."""
        if not self.enabled:
            return [float(v) for v in values]
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._collective_device())
        torch.distributed.all_reduce(tensor)
        return tensor.cpu().tolist()

    def share(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (pickled; small things only): one decision, taken on
        the rank that writes, for all (whether to resume, whether the output folder is free)."""
        if not self.enabled:
            return value
        box = [value if self.is_main else None]
        torch.distributed.broadcast_object_list(box, src=0, device=self._collective_device())
        return box[0]  # type: ignore[return-value]

    def barrier(self) -> None:
        if self.enabled:
            if torch.distributed.get_backend() == "nccl":
                torch.distributed.barrier(device_ids=[self.local_rank])
            else:
                torch.distributed.barrier()

    def reseed(self, seed: int, epoch: int) -> None:
        """Reseed the global torch RNG of ranks > 0 from (seed, rank, epoch).

        Rank 0 keeps the single-process stream (saved in ``last.pt``, as without DDP). The other
        ranks' streams (dropout) are not in the checkpoint, so they restart from a seed at each
        epoch: a resumed run draws what an uninterrupted one drew, and ranks draw different masks.
        """
        if self.rank > 0:
            torch.manual_seed(int(np.random.SeedSequence([seed, self.rank, epoch]).generate_state(1)[0]))

    def wrap(self, model: nn.Module, device: DeviceSetup) -> nn.Module:
        """The module the training steps call: the model itself in one process; under DDP the
        model with BatchNorm made global, wrapped in DistributedDataParallel (which broadcasts
        rank 0's weights, so every rank starts equal)."""
        if not self.enabled:
            return model
        if device.is_cuda:
            nn.SyncBatchNorm.convert_sync_batchnorm(model)  # in place: ResNet's root is no BN layer
            return nn.parallel.DistributedDataParallel(model, device_ids=[device.device.index])
        convert_to_global_batchnorm(model)
        return nn.parallel.DistributedDataParallel(model)

    def _collective_device(self) -> torch.device:
        if torch.distributed.get_backend() == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")


SINGLE = Distributed()


def from_env() -> Distributed:
    """The job's shape from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK); one process
    when they are absent. Inconsistent values are an error naming the variable."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", rank)
    if world < 1:
        raise ValueError(f"WORLD_SIZE={world}: must be at least 1")
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
    if local < 0:
        raise ValueError(f"LOCAL_RANK={local}: must be >= 0")
    return Distributed(rank, world, local)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer (set by torchrun; unset it to train in one process)") from None


@contextlib.contextmanager
def session(device_name: str = "auto", amp: bool = True) -> Iterator[tuple[Distributed, DeviceSetup]]:
    """Join the job torchrun started (gloo on the CPU, nccl on CUDA, one GPU per process: the
    ``LOCAL_RANK``-th), yield (context, device), and leave the process group however the body
    ends. In one process: (SINGLE, setup_device(...)), no process group."""
    context = from_env()
    device = setup_device(device_name, amp)
    if not context.enabled:
        yield SINGLE, device
        return
    if device.is_cuda:
        if context.local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK={context.local_rank} but only {torch.cuda.device_count()} CUDA devices "
                               "are visible: --nproc-per-node must not exceed the GPUs per node")
        torch.cuda.set_device(context.local_rank)
        device = replace(device, device=torch.device("cuda", context.local_rank))
    timeout = timedelta(seconds=_env_int("VSBENCH_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    torch.distributed.init_process_group("nccl" if device.is_cuda else "gloo", timeout=timeout)
    try:
        yield context, device
    finally:
        torch.distributed.destroy_process_group()


@contextlib.contextmanager
def writer_lock(folder: str | os.PathLike[str], context: Distributed, *, what: str = "") -> Iterator[None]:
    """One writer per output folder, for a job of any size: rank 0 (the one rank that writes)
    holds :func:`vsbench.io.locks.output_lock` on ``folder`` for the block; the other ranks share
    its outcome, so a busy folder stops every rank at once with the same line instead of leaving
    them waiting on a collective. Launchers (``--nproc``, a TrainJob's submitter) do not hold it:
    a lock held by a parent would block its own rank 0 (flock is per open file)."""
    with _held_by_rank0(context, lambda stack: stack.enter_context(output_lock(folder, what=what)), OutputBusy):
        yield


@contextlib.contextmanager
def inputs_lock(folders: dict[str, str | os.PathLike[str]], context: Distributed) -> Iterator[None]:
    """The training's inputs held as one of their readers (:func:`vsbench.io.locks.reading_lock`)
    for the block, so that ``abid resize`` and ``abid prepare`` do not rewrite them while it reads:
    rank 0 holds them for the job (its outcome shared, as :func:`writer_lock`'s). ``folders``: the
    option that names each folder (``--images``) -> the folder."""
    def hold(stack: contextlib.ExitStack) -> None:
        for option, folder in folders.items():
            stack.enter_context(reading_lock(folder, what=f"{option} {folder}"))

    with _held_by_rank0(context, hold, InputBusy):
        yield


@contextlib.contextmanager
def _held_by_rank0(context: Distributed, hold: Callable[[contextlib.ExitStack], Any],
                   busy: type[OutputBusy]) -> Iterator[None]:
    """Rank 0 takes the locks (``hold`` enters them on a stack) for the block; its refusal is shared,
    so every rank stops at once with rank 0's line (``busy`` on the others) instead of waiting on a
    collective that rank 0 never reaches."""
    with contextlib.ExitStack() as stack:
        failure: BaseException | None = None
        if context.is_main:
            try:
                hold(stack)
            except Exception as exc:  # noqa: BLE001 - told to the other ranks, then raised here
                failure = exc
        refusal = context.share("" if failure is None else (str(failure) or type(failure).__name__))
        if failure is not None:
            raise failure
        if refusal:
            raise busy(refusal)
        yield


class RankBatches(Sampler[list[int]]):
    """This rank's slice of every global batch of the single-process epoch order.

    The global order comes from the same DataLoader machinery a one-process run uses (a
    DataLoader over ``range(len(dataset))`` with the same generator, batch size and drop_last),
    so it is that run's order exactly, whatever torch does inside its RandomSampler."""

    def __init__(self, samples: int, global_batch: int, generator: torch.Generator, drop_last: bool,
                 context: Distributed) -> None:
        self.samples, self.global_batch, self.generator = samples, global_batch, generator
        self.drop_last, self.context = drop_last, context
        self.per_rank = context.per_rank_batch(global_batch, samples)

    def global_batches(self) -> Iterator[list[int]]:
        plan = DataLoader(range(self.samples), batch_size=self.global_batch, shuffle=True, generator=self.generator,
                          drop_last=self.drop_last, collate_fn=list)
        yield from plan

    def __iter__(self) -> Iterator[list[int]]:
        start = self.context.rank * self.per_rank
        for batch in self.global_batches():
            yield batch[start:start + self.per_rank]

    def __len__(self) -> int:
        return self.samples // self.global_batch if self.drop_last else -(-self.samples // self.global_batch)


def epoch_loader(dataset: Dataset, global_batch: int, *, generator: torch.Generator, drop_last: bool,
                 workers: int | None, context: Distributed = SINGLE, cuda: bool | None = None,
                 collate_fn: Any = None) -> DataLoader:
    """The shuffled training loader of one epoch: in one process exactly the loader the
    baselines always used; under DDP the same order, this rank's slice of each global batch.

    ``workers`` None: from the container's CPU quota (vsbench.runtime.loaders); memory is pinned
    only for a CUDA device (``cuda`` None: when one is visible). Not persistent: a loader lives one
    epoch, because the siamese dataset draws its pairs per epoch (``dataset.epoch``), which workers
    kept from the last epoch would not see, and the epoch's order and worker seeds come from the
    epoch's own generator (exact resume). ``collate_fn``: None for pixels, the decoder's for bytes
    (vsbench.abid.data.collate_for)."""
    options = loader_options(loader_workers(workers), cuda=torch.cuda.is_available() if cuda is None else cuda)
    if not context.enabled:
        return DataLoader(dataset, batch_size=global_batch, shuffle=True, generator=generator, drop_last=drop_last,
                          collate_fn=collate_fn, **options)
    sampler = RankBatches(len(dataset), global_batch, generator, drop_last, context)  # type: ignore[arg-type]
    # The loader draws its workers' base seed from its own generator, not from the global RNG
    # (rank 0's global stream is checkpointed; nothing but the model should move it).
    own = torch.Generator().manual_seed(generator.initial_seed())
    return DataLoader(dataset, batch_sampler=sampler, generator=own, collate_fn=collate_fn, **options)


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks whose gradient is the sum of the ranks' gradients (each rank's loss depends
    on every rank's inputs through the global statistics)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.clone()
        torch.distributed.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        total = grad.clone()
        torch.distributed.all_reduce(total)
        return total


class GlobalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm whose training statistics are those of the global batch, for the CPU (gloo).

    torch's SyncBatchNorm runs on CUDA only. This one all-reduces per-channel (count, sum, sum of
    squares) in float64 with a differentiable all_reduce, so the backward pass sends the gradient
    of the statistics to every rank, as SyncBatchNorm does. In eval mode, or in
    one process, it is plain BatchNorm. Same parameters and buffers as the layer it replaces, so
    checkpoints load either way.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if not (self.training and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1):
            return super().forward(input)
        channels = input.shape[1]
        dims = [d for d in range(input.dim()) if d != 1]
        wide = input.double()
        local = torch.cat([wide.sum(dims), (wide * wide).sum(dims),
                           torch.full((1,), input.numel() / channels, dtype=torch.float64, device=input.device)])
        total = _AllReduceSum.apply(local)
        count = total[-1]
        mean = total[:channels] / count
        var = (total[channels:2 * channels] / count - mean * mean).clamp_min(0)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                self.num_batches_tracked += 1  # type: ignore[operator]
                factor = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                unbiased = var * count / (count - 1).clamp_min(1)
                self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)
        shape = [1, channels] + [1] * (input.dim() - 2)
        scale = torch.rsqrt(var + self.eps).to(input.dtype).view(shape)
        out = (input - mean.to(input.dtype).view(shape)) * scale
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out


def convert_to_global_batchnorm(module: nn.Module) -> nn.Module:
    """Replace every BatchNorm layer of ``module`` (in place) by a :class:`GlobalBatchNorm` that
    shares its parameters and buffers; returns ``module`` (or the new layer if it is one)."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, GlobalBatchNorm):
        layer = GlobalBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                module.track_running_stats)
        if module.affine:
            layer.weight, layer.bias = module.weight, module.bias
        layer.running_mean, layer.running_var = module.running_mean, module.running_var
        layer.num_batches_tracked = module.num_batches_tracked
        layer.train(module.training)
        return layer
    for name, child in module.named_children():
        module.add_module(name, convert_to_global_batchnorm(child))
    return module
