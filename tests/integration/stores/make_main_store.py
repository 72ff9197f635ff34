"""How ``main-fb103dd.mlflow.db.gz`` was made: with main's code at fb103dd (before issue 38), a
`vsbench similarity run` command (patch pairs, random weights: its numbers on the command's run
under long names) and a nightly pipeline's parent run with long names, in experiment ``legacy``.

Run it from an empty folder with that checkout on PYTHONPATH, then ``VACUUM`` and gzip ``mlflow.db``.
tests/integration/test_mlflow_evaluations.py reads the store with today's code (after
``mlflow db upgrade``), so runs logged before the evaluation layout stay readable.
"""

import os
import subprocess
import sys
from pathlib import Path

here = Path.cwd()
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{here / 'mlflow.db'}"
os.environ["VSBENCH_MLFLOW_ARTIFACT_LOCATION"] = str(here / "artifacts")

from vsbench.benchmarks.registry import generate  # noqa: E402
from vsbench.tracking.runs import close_parent_run, log_to_parent, open_parent_run  # noqa: E402

generate("patch-pairs", here / "pairs", seed=0)
subprocess.run([sys.executable, "-m", "vsbench", "similarity", "run", "--benchmark", "patch_pairs", "--root",
                str(here / "pairs"), "--out", str(here / "out-efficientnet_lite0"), "--model", "efficientnet_lite0",
                "--model-options", '{"weights": "random"}', "--experiment", "legacy"], check=True)
run_id = open_parent_run("legacy", "kfp-legacy-night", "vsbench-nightly", {"suite": "disc-efficientnet_lite0"})
log_to_parent(run_id, {"disc__efficientnet_lite0__Flat__none__uap": 0.5,
                       "disc__efficientnet_lite0__Flat__none__accuracy_at_1": 0.6,
                       "abid__baselines__counting_rmse": 1.0})
close_parent_run("legacy", "kfp-legacy-night", True)
