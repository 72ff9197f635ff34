"""What the Kubeflow UI's run form says about each pipeline parameter.

KFP turns the "Args:" section of a pipeline function's docstring into each parameter's
``description`` in the compiled YAML, and the UI shows it under the field. The texts live here,
one per parameter name (the three pipelines share names, so a name means one thing everywhere), and
the keys a JSON parameter takes are read from the models that parse it, so the form cannot drift
from the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from vsbench.abid.profiles import TrainProfile

F = TypeVar("F", bound=Callable[..., Any])

# The keys of params_json that vsbench reads (any other key is logged as a param as it is).
PARAMS_JSON_KEYS = {
    "profile": "a training profile name, shown as the run's profile",
    "train_profile": "the same, as the ABID CLI names it",
    "data": "where the data lies, shown as the run's data",
    "data_tags": "an object of tags for the run (the CLI puts the data digest here)",
    "benchmark": "the benchmark name the run's dataset input is named after",
}


def _keys(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


PARAMETERS: dict[str, str] = {
    "data_root": "Folder (on the pipeline's data volume) that holds raw/, tasks/, bin-images-resize/ and runs/. "
                 "Example: /data/abid.",
    "source": "The ABID bucket, s3://bucket[/prefix]. Example: s3://aft-vbi-pds (the public one).",
    "endpoint_url": "S3 endpoint for a non-AWS store; empty for AWS. Example: http://minio.minio:9000.",
    "limit": "Download only the bins with the N smallest ids (0: every bin). Example: 2000.",
    "num_shards": "Pods the download and resize steps (or the embedding step) are split over, by id modulo. "
                  "Example: 8.",
    "seed": "Seed of the split, the training and random weights: the same seed gives the same files and "
            "numbers. Example: 0.",
    "val_fraction": "Share of the eligible bins in the validation split, 0 to 1. Example: 0.1 (the challenge's).",
    "max_per_class": "Most questions of each answer (yes, no) in a verification file. Example: 20000 "
                     "(the challenge's).",
    "size": "Side in pixels of the resized images. Example: 224 (the challenge's).",
    "resize_decode": "How JPEGs are decoded before resizing: full (the challenge's pixels, byte-identical), "
                     "draft or fast (faster, a few levels off; docs/abid.md). Example: full.",
    "concurrency": "S3 requests in flight per download pod. Example: 64.",
    "workers": "Processes per resize pod; 0 uses every core of the node. Example: 0.",
    "train_profile": "Training settings: full (the challenge's) or demo (minutes on 2 CPU cores). Example: full.",
    "train_overrides": "JSON object of training profile fields to change; keys: "
                       f"{_keys(TrainProfile.model_fields)}. Example: {{\"epochs\": 2, \"batch_size\": 32}}.",
    "device": "Where steps compute: auto (a GPU when the pod has one), cpu, cuda or cuda:N. Example: auto.",
    "experiment": "MLflow experiment the run is logged in. Example: vsbench-abid.",
    "params_json": "JSON object logged as params of the MLflow parent run; keys vsbench reads: "
                   + "; ".join(f"`{key}` ({text})" for key, text in PARAMS_JSON_KEYS.items())
                   + ". Example: {\"profile\": \"full\"}.",
    "benchmark": "Benchmark name or alias (`vsbench benchmarks` lists them). Example: disc.",
    "root": "Folder holding the benchmark's files in its native layout (read only). Example: /data/disc2021.",
    "out": "Folder for the run's features, index, results and scores (reused when its inputs match). "
           "Example: /data/runs/disc-efficientnet_lite0.",
    "model": "Model name (efficientnet_lite0, resnet50, dino_vits16, timm:..., open_clip:..., hf:..., "
             "torchscript, precomputed, or a plugin's). Example: efficientnet_lite0.",
    "model_options": "JSON object of the model's options, e.g. `weights` (\"random\" for a seeded untrained "
                     "network, or a local weights file), `path`, `checkpoint` or `config` for file-based models; "
                     "a model refuses keys its builder does not take. Example: {\"weights\": \"random\"}.",
    "benchmark_options": "JSON object of the benchmark loader's options (e.g. Copydays' `distractors`, DISC's "
                         "`query_dir`); a loader refuses keys it does not take. Example: {}.",
    "codecs": "FAISS index factory strings separated by ';', each scored. Example: Flat;PCAW512,L2norm,Flat.",
    "k": "Neighbours retrieved per query. Example: 10.",
    "global_cap": "Keep only the N best (query, reference) pairs over all queries (0: k per query). "
                  "Example: 0.",
    "score_norm": "Score normalization as SSCD writes it, weight[first,last] of the neighbours subtracted "
                  "(empty: unnormalized only). Example: 1.00[0,2].",
    "search_shards": "Query shards: search tasks run over query shards x reference shards. Example: 1.",
    "reference_shards": "Gallery shards, each searched by its own task and merged exactly. Example: 1.",
    "search_params": "FAISS search parameters, e.g. nprobe=16 (empty: the codec's defaults). Example: nprobe=16.",
    "batch_size": "Images per embedding batch. Example: 64.",
    "report_last": "How many recent runs the nightly comparison report covers. Example: 30.",
}


def describe(summary: str, function: F, extra: dict[str, str] | None = None) -> F:
    """Give ``function`` a docstring with an "Args:" entry for each of its parameters (KFP reads it).

    Raises KeyError naming a parameter without a text, so a new parameter cannot reach the form
    undescribed."""
    import inspect

    texts = {**PARAMETERS, **(extra or {})}
    names = list(inspect.signature(function).parameters)
    missing = [name for name in names if name not in texts]
    if missing:
        raise KeyError(f"pipeline parameters without a description in pipelines/form.py: {', '.join(missing)}")
    lines = [summary, "", "Args:"] + [f"    {name}: {texts[name]}" for name in names]
    function.__doc__ = "\n".join(lines)
    return function
