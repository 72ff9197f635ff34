"""Bench: what checking the features against the step's --root costs (issue 46), side by side.

Why: since issue 46 the index, search and score steps check that the shards they read were embedded
from the images of the ``--root`` they were given (:mod:`vsbench.retrieval.origin`: the image digests
from the shard's memo by stat record, combined, against the manifest's ``images_sha256``). A step
command or pipeline task pays one such check; ``similarity run --runner inline`` shares the embed
step's digests with its later steps and pays none. This measures, in one process, rounds alternating,
on a synthetic DISC (``generate_disc``) embedded once with a tiny TorchScript network:

* **check**: one check of every shard (what each step command or pipeline task adds), fresh memos;
* **score step**: ``similarity_score_step`` with a fresh engine, the check on and off;
* **unchanged re-run**: ``run_inline`` into the finished folder (every shard kept), as today (the
  check off: main before issue 46), shared (the default now) and per step (each step checking again,
  the choice not taken).

Run: ``python bench/step_inputs.py [--references 2000] [--queries 1000] [--train 2000] [--rounds 7]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_WORKDIR, log, machine_info, write_json


def _tiny_model(path: Path) -> Path:
    """A conv and a linear layer as TorchScript: the embed step's cost is not what is measured."""
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, stride=2)
            self.fc = nn.Linear(8, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    torch.manual_seed(0)
    torch.jit.script(Tiny().eval()).save(str(path))
    return path


def _timed(fn: Callable[[], Any], times: list[float]) -> None:
    started = time.perf_counter()
    fn()
    times.append(time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--references", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "step-inputs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import os

    os.environ["VSBENCH_EMBED_CACHE"] = "off"
    os.environ["VSBENCH_NO_TRACK"] = "1"
    from vsbench.benchmarks.disc.synth import generate_disc
    from vsbench.io.digests import RACY_NS
    from vsbench.retrieval import engine as engine_module
    from vsbench.retrieval.engine import FEATURES_DIR, Engine
    from vsbench.retrieval.origin import check_images
    from vsbench.runspec.run import BenchmarkRun, SimilarityRun
    from vsbench.steps.similarity import run_inline, similarity_score_step

    root = args.workdir / f"disc-{args.references}-{args.queries}-{args.train}"
    if not (root / ".complete").exists():
        log(f"generating {root} ...")
        generate_disc(root, references=args.references, queries=args.queries, train=args.train, seed=0)
        (root / ".complete").write_text("ok")
        time.sleep(RACY_NS / 1e9 + 0.1)  # settled: the memo remembers every image
    model = _tiny_model(args.workdir / "tiny.pt")
    out = args.workdir / "out"
    run = SimilarityRun.parse(benchmark="disc", root=str(root), model="torchscript",
                              model_options={"path": str(model)}, codecs="Flat")
    step_run = BenchmarkRun.parse(**run.model_dump(exclude={"model", "model_options", "seed"}))
    log("first run ...")
    run_inline(run, out, progress=False, device="cpu", batch_size=64)
    images = sum(len(s.ids) for s in Engine(run, out).bench.image_sets().values())

    real = engine_module.check_images

    def off(*_: Any, **__: Any) -> int:
        return 0

    def per_step(*a: Any, **k: Any) -> int:
        k["checked"] = None
        return real(*a, **k)

    times: dict[str, list[float]] = {name: [] for name in (
        "check", "score_on", "score_off", "rerun_today", "rerun_shared", "rerun_per_step")}
    for round_ in range(args.rounds + 1):
        keep = round_ > 0  # the first round warms up
        sink: dict[str, list[float]] = times if keep else {name: [] for name in times}
        sets = Engine(step_run, out).bench.image_sets()
        _timed(lambda sets=sets: check_images(out / FEATURES_DIR, sets, root), sink["check"])
        for name, patch in (("score_on", real), ("score_off", off)):
            engine_module.check_images = patch
            _timed(lambda: similarity_score_step(step_run, str(out), model="torchscript"), sink[name])
        for name, patch in (("rerun_today", off), ("rerun_shared", real), ("rerun_per_step", per_step)):
            engine_module.check_images = patch
            _timed(lambda: run_inline(run, out, progress=False, device="cpu", batch_size=64), sink[name])
        engine_module.check_images = real
        log(f"round {round_}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in sink.items()))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print("minimum (contention only adds) / median, seconds: " + ", ".join(
        f"{name} {min(values):.3f} / {medians[name]:.3f}" for name, values in times.items()))
    print(f"synthetic DISC, {images:,} images ({args.queries} queries, {args.references} references, "
          f"{args.train} training), median of {args.rounds} rounds:")
    print(f"  one check of every shard (a step command's or task's cost): {medians['check'] * 1000:.1f} ms "
          f"({medians['check'] / images * 1e6:.1f} us per image)")
    print(f"  score step: check off {medians['score_off']:.3f} s, on {medians['score_on']:.3f} s "
          f"({medians['score_on'] / medians['score_off'] - 1:+.1%})")
    print(f"  unchanged inline re-run: today {medians['rerun_today']:.3f} s, shared {medians['rerun_shared']:.3f} s "
          f"({medians['rerun_shared'] / medians['rerun_today'] - 1:+.1%}), per step {medians['rerun_per_step']:.3f} s "
          f"({medians['rerun_per_step'] / medians['rerun_today'] - 1:+.1%})")
    if args.json:
        write_json(args.json, {"images": images, "medians_s": medians, "rounds": times, "machine": machine_info()})


if __name__ == "__main__":
    main()
