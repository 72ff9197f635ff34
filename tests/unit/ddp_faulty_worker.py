"""A torchrun worker whose rank 1 is killed (SIGKILL, as the OOM killer would) right after epoch
``--die-after`` finished: tests/unit/test_distributed.py checks the job stops without hanging and
that the next run resumes from the last checkpoint. Not a test module (no ``test_`` prefix).

    python -m torch.distributed.run --standalone --nproc-per-node 2 ddp_faulty_worker.py \\
        TASKS IMAGES OUT OVERRIDES_JSON SEED DIE_AFTER
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from vsbench.abid import distributed
from vsbench.abid.counting import train_counting
from vsbench.abid.profiles import get_profile


def main(tasks: str, images: str, out: str, overrides: str, seed: str, die_after: str) -> None:
    profile = get_profile("demo", **json.loads(overrides))
    with distributed.session("cpu", profile.amp) as (context, device):
        def die(record: dict[str, float]) -> None:
            if context.rank == 1 and record["epoch"] == int(die_after):
                os.kill(os.getpid(), signal.SIGKILL)

        train_counting(Path(tasks), Path(images), Path(out), profile, device, seed=int(seed), on_epoch_end=die,
                       progress=False, context=context)


if __name__ == "__main__":
    main(*sys.argv[1:])
