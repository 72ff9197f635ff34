"""``make demo``: the ABID pipeline end to end on one machine, nothing downloaded from outside.

1. start a local S3 endpoint (moto) on 127.0.0.1 with a public bucket, like the real one;
2. generate a bin-image dataset in the exact ABID layout and upload it there;
3. run the ABID pipeline with ``kfp.local`` (anonymous S3 reads, MLflow on a local sqlite file);
4. print what each step did, where the files are, and how to open the MLflow UI.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from vsbench.io.locks import run_lease
from vsbench.io.storage import atomic_write_json, upload_tree
from vsbench.platform.local_run import ABID_FOLDERS, abid_ending, run_abid_pipeline_locally
from vsbench.platform.local_s3 import LocalS3
from vsbench.runtime.loaders import usable_cpus
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV, disable_tracking

BUCKET = "abid-demo"
EXPERIMENT = "vsbench-abid-demo"
DEFAULT_BINS = 2000


def _synthesize(out: Path, bins: int, seed: int) -> tuple[Path, float]:
    """Generate once per (bins, seed): a second demo run reuses the files (they are identical)."""
    from vsbench.abid.synth import generate_abid

    target = out / "synth"
    marker = out / "synth.json"
    wanted = {"bins": bins, "seed": seed}
    started = time.perf_counter()
    if marker.exists() and json.loads(marker.read_text()).get("params") == wanted:
        return target, 0.0
    summary = generate_abid(target, bins, seed, workers=usable_cpus())
    atomic_write_json(marker, {"params": wanted, "summary": summary.as_dict()})
    return target, time.perf_counter() - started


def run_demo(out: Path, *, bins: int = DEFAULT_BINS, seed: int = 0, profile: str = "demo",
             runner: str = "subprocess", image: str | None = None, track: bool = True, verbose: bool = False) -> int:
    """The demo; ``track`` False runs it without MLflow, ``verbose`` streams kfp.local's logs."""

    out.mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{out / 'mlflow.db'}"
    os.environ[ARTIFACT_LOCATION_ENV] = str(out / "mlartifacts")
    if not track:
        disable_tracking()

    print(f"[1/3] generating {bins} ABID bins (seed {seed}) ...", flush=True)
    synth_dir, synth_seconds = _synthesize(out, bins, seed)
    with LocalS3(log=out / "moto.log") as s3:
        print(f"[2/3] local S3 endpoint {s3.endpoint_url}: uploading to s3://{BUCKET} ...", flush=True)
        started = time.perf_counter()
        s3.public_bucket(BUCKET)
        uploaded = upload_tree(synth_dir, f"s3://{BUCKET}", s3.admin_client())
        upload_seconds = time.perf_counter() - started
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            os.environ.pop(key, None)  # the pipeline reads anonymously, as from the real public bucket
        where = "in the vsbench image" if runner == "container" else "as processes of this environment"
        print(f"[3/3] running the ABID pipeline with kfp.local, every step {where} ...", flush=True)
        with run_lease([out / "data" / name for name in ABID_FOLDERS], what=f"{out} (vsbench demo)"):
            report = _run_pipeline(out, s3.endpoint_url, bins=bins, seed=seed, profile=profile, runner=runner,
                                   image=image, verbose=verbose)

    print()
    print(f"generate  {synth_seconds:7.1f} s   {bins} bins" + ("" if synth_seconds else " (reused)"))
    print(f"upload    {upload_seconds:7.1f} s   {uploaded} objects")
    print(report.render())
    print(abid_ending(report, os.environ["MLFLOW_TRACKING_URI"] if track else "", EXPERIMENT))
    return 0 if report.succeeded else 1


def _run_pipeline(out: Path, endpoint_url: str, *, bins: int, seed: int, profile: str, runner: str,
                  image: str | None, verbose: bool):
    """The ABID pipeline on the demo's bucket, its data under ``out/data`` (held by the caller)."""
    return run_abid_pipeline_locally(
        data_root=out / "data", pipeline_root=out / "kfp",
        arguments={"source": f"s3://{BUCKET}", "endpoint_url": endpoint_url, "seed": seed,
                   "max_per_class": 20000, "experiment": EXPERIMENT, "train_profile": profile,
                   "params_json": json.dumps({"demo_bins": bins, "demo_seed": seed, "profile": profile,
                                              "data": f"generated ABID, {bins} bins, seed {seed}"})},
        runner=runner, image=image, verbose=verbose,
    )
