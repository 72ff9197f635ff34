"""What the Kubeflow UI's run form says about each pipeline parameter.

KFP turns the "Args:" section of a pipeline function's docstring into each parameter's
``description`` in the compiled YAML, and the UI shows it under the field. The texts live here:
``PARAMETERS`` for the names that mean the same in every pipeline; ``ABID_PARAMETERS``,
``SIMILARITY_PARAMETERS`` and ``benchmark_options_text()`` for the names whose meaning or example
differs (the nightly pipeline's own are in ``pipelines/nightly.py``, which knows its suite). The keys
a JSON parameter takes are read from what parses it (the training profile model, the benchmark
loaders), so the form cannot drift from the code; the keys no model declares (``params_json``,
``model_options``) are checked by ``tests/pipelines/test_compile.py`` against the code that reads
them.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from vsbench.abid.profiles import TrainProfile
from vsbench.benchmarks.registry import builtin_specs

F = TypeVar("F", bound=Callable[..., Any])

# The keys of params_json that vsbench reads (tracking.runs: the parent run's tags and dataset input);
# any other key is logged as a param as it is.
PARAMS_JSON_KEYS = {
    "profile": "the training profile, tagged on the run",
    "train_profile": "the same, as the ABID CLI names it",
    "data": "what data the run used, in words, tagged on the run",
    "data_tags": "an object of extra tags for the run; the CLI puts the data's digest here",
    "benchmark": "the name of the run's dataset input",
}

# The options of each built-in model's builder and of each model family (models.registry; a plugin's
# model takes its builder's keyword arguments). Written out because reading the registry imports torch,
# which compiling a pipeline must not; the compile test checks it against the builders' signatures.
MODEL_OPTION_KEYS = {
    "efficientnet_lite0, resnet34, resnet50, timm:..., hf:...": ("weights",),
    "dino_vits16": ("weights", "weights_sha256"),
    "open_clip:...": ("weights", "config"),
    "torchscript": ("path", "input_size", "resize_size", "preserve_aspect_ratio", "mean", "std", "interpolation"),
    "precomputed": ("path", "dim"),
    "abid_trunk": ("run_id", "artifact", "checkpoint", "input_size"),
}


def _keys(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def loader_option_keys(loader_reference: str) -> list[str]:
    """The keys a benchmark loader ("module:function") takes as options: its keyword parameters after
    the root or, where it hands ``**options`` to the class it returns, that class's keyword parameters.

    Raises TypeError naming the loader when neither says, so a benchmark cannot reach the form with
    its options unlisted."""
    module, _, name = loader_reference.partition(":")
    loader = getattr(importlib.import_module(module), name)
    signature = inspect.signature(loader)
    parameters = list(signature.parameters.values())[1:]  # after the root
    keys = [p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        returned = signature.return_annotation
        if isinstance(returned, str):  # postponed annotations: the class named in the loader's module
            returned = loader.__globals__.get(returned)
        if returned is signature.empty or not inspect.isclass(returned):
            raise TypeError(f"benchmark loader {loader_reference} takes **options but names no class it returns; "
                            "annotate its return type so the run form can list the options")
        keys += [p.name for p in list(inspect.signature(returned.__init__).parameters.values())[2:]
                 if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return keys


def benchmark_option_keys() -> dict[str, list[str]]:
    """Each built-in benchmark's option keys, by name."""
    return {spec.name: loader_option_keys(spec.loader) for spec in builtin_specs()}


def benchmark_options_text() -> str:
    """The similarity pipeline's benchmark_options text. A function, not an entry of ``PARAMETERS``:
    listing the keys imports every benchmark's loader (pandas among them), which only the pipeline
    that takes the parameter should pay for."""
    return ("JSON object of the benchmark loader's options; keys by benchmark: "
            + "; ".join(f"{name}: {_keys(keys)}" for name, keys in benchmark_option_keys().items())
            + "; a plugin's benchmark: its loader's. A loader refuses keys it does not take. "
              "Example: {\"distractors\": \"/data/copydays/distractors\"}.")


def params_json_text(example: str) -> str:
    """The params_json text with a pipeline's own example."""
    return ("JSON object logged as params of the MLflow parent run; keys vsbench also reads: "
            + "; ".join(f"`{key}` ({text})" for key, text in PARAMS_JSON_KEYS.items())
            + f"; any other key is logged as it is. Example: {example}.")


PARAMETERS: dict[str, str] = {
    "data_root": "Folder (on the pipeline's data volume) that holds raw/, tasks/, bin-images-resize/ and runs/. "
                 "Example: /data/abid.",
    "source": "The ABID bucket, s3://bucket[/prefix]. Example: s3://aft-vbi-pds (the public one).",
    "endpoint_url": "S3 endpoint for a non-AWS store; empty for AWS. Example: http://minio.minio:9000.",
    "limit": "Download only the bins with the N smallest ids (0: every bin). Example: 2000.",
    "val_fraction": "Share of the eligible bins in the validation split, 0 to 1. Example: 0.1 (the challenge's).",
    "max_per_class": "Most questions of each answer (yes, no) in a verification file. Example: 20000 "
                     "(the challenge's).",
    "size": "Side in pixels of the resized images. Example: 224 (the challenge's).",
    "resize_decode": "How JPEGs are decoded before resizing: full (the challenge's pixels, byte-identical), "
                     "draft or fast (faster, a few levels off; docs/abid.md). Example: full.",
    "concurrency": "S3 requests in flight per download pod. Example: 64.",
    "workers": "Processes per resize pod; 0 uses every core the pod may use (its CPU limit). Example: 0.",
    "train_profile": "Training settings: full (the challenge's) or demo (minutes on 2 CPU cores). Example: full.",
    "train_overrides": "JSON object of training profile fields to change; keys: "
                       f"{_keys(TrainProfile.model_fields)}. Example: {{\"epochs\": 2, \"batch_size\": 32}}.",
    "train_backend": "How the two baselines train: pod (in the step's own pod, one device) or trainjob (a Kubeflow "
                     "Trainer v2 TrainJob of train_nodes nodes x train_gpus_per_node GPUs that the step submits, "
                     "follows and waits for; needs Trainer v2 and k8s/training/trainjob). Example: trainjob.",
    "train_nodes": "TrainJob nodes (train_backend trainjob); batch_size stays the global batch. Example: 2.",
    "train_gpus_per_node": "TrainJob GPUs (one process each) per node; 0 trains on CPU nodes with gloo. Example: 1.",
    "device": "Where steps compute: auto (a GPU when the pod has one), cpu, cuda or cuda:N. Example: auto.",
    "benchmark": "Benchmark name or alias (`vsbench benchmarks` lists them). Example: disc.",
    "root": "Folder holding the benchmark's files in its native layout (read only). Example: /data/disc2021.",
    "out": "Folder for the run's features, index, results and scores (reused when its inputs match). "
           "Example: /data/runs/disc-efficientnet_lite0.",
    "model": "Model name (efficientnet_lite0, resnet50, dino_vits16, timm:..., open_clip:..., hf:..., "
             "torchscript, precomputed, or a plugin's). Example: efficientnet_lite0.",
    "model_options": "JSON object of the model's options; keys by model: "
                     + "; ".join(f"{models}: {_keys(keys)}" for models, keys in MODEL_OPTION_KEYS.items())
                     + "; a plugin's model: its builder's arguments. `weights` is \"random\" for a seeded untrained "
                       "network or a local weights file; a model refuses keys it does not take. "
                       "Example: {\"weights\": \"random\"}.",
    "codecs": "FAISS index factory strings separated by ';', each scored. Example: Flat;PCAW512,L2norm,Flat.",
    "k": "Neighbours retrieved per query. Example: 10.",
    "global_cap": "Keep only the N best (query, reference) pairs over all queries (0: k per query). "
                  "Example: 0.",
    "score_norm": "Score normalization as SSCD writes it, weight[first,last] of the neighbours subtracted "
                  "(empty: unnormalized only). Example: 1.00[0,2].",
    "search_shards": "Query shards: search tasks run over query shards x reference shards. Example: 1.",
    "reference_shards": "Gallery shards, each searched by its own task and merged exactly. Example: 1.",
    "merge_ondisk": "IVF codecs only: merge the gallery shards into one on-disk index after filling them, so each "
                    "query shard is searched once (not once per gallery shard). Example: false.",
    "search_params": "FAISS search parameters, e.g. nprobe=16 (empty: the codec's defaults). Example: nprobe=16.",
    "batch_size": "Images per embedding batch. Example: 64.",
    "compile": "torch.compile the embedding network: auto (on when the step has a GPU), on or off; a network "
               "that fails to compile embeds eagerly, with one warning. Example: auto.",
    "decode": "Where the embedding step decodes JPEGs: auto (the path measured faster on the pod's device: Pillow "
              "in the loader's workers, also on a GPU, see bench/README.md), gpu (batched on the device with nvJPEG) "
              "or cpu (Pillow; docs/fidelity.md bounds the difference). Example: auto.",
    "verify_inputs": "How each step checks that an input is the one its reused work was made from: stat (an input "
                     "whose device, inode, size, mtime and ctime are the ones remembered is not read again) or full "
                     "(every input hashed again: for a volume edited offline, restored block by block, or a network "
                     "filesystem that caches attributes; docs/reliability.md). Example: stat.",
    "report_last": "How many recent runs the nightly comparison report covers. Example: 30.",
}

ABID_PARAMETERS: dict[str, str] = {
    "num_shards": "Pods the download and the resize steps are each split over, by bin id modulo. Example: 8.",
    "seed": "Seed of the split, the task files and the training: the same seed gives the same files and "
            "numbers. Example: 0.",
    "experiment": "MLflow experiment the run is logged in. Example: vsbench-abid.",
    "params_json": params_json_text('{"profile": "full", "data": "s3://aft-vbi-pds, every bin"}'),
}

SIMILARITY_PARAMETERS: dict[str, str] = {
    "num_shards": "Pods the embedding step is split over, each taking a contiguous slice of every image set. "
                  "Example: 4.",
    "seed": "Seed the model is built under: a {\"weights\": \"random\"} network is the same for the same seed. "
            "Example: 0.",
    "experiment": "MLflow experiment the run is logged in. Example: vsbench-similarity.",
    "params_json": params_json_text('{"benchmark": "disc", "data": "DISC2021 dev, 50k queries"}'),
}


def describe(summary: str, function: F, texts: dict[str, str] | None = None) -> F:
    """Give ``function`` a docstring with an "Args:" entry for each of its parameters (KFP reads it);
    ``texts`` (a pipeline's own) win over the shared ``PARAMETERS``.

    Raises KeyError naming a parameter without a text, so a new parameter cannot reach the form
    undescribed."""
    known = {**PARAMETERS, **(texts or {})}
    names = list(inspect.signature(function).parameters)
    missing = [name for name in names if name not in known]
    if missing:
        raise KeyError(f"pipeline parameters without a description in pipelines/form.py: {', '.join(missing)}")
    lines = [summary, "", "Args:"] + [f"    {name}: {known[name]}" for name in names]
    function.__doc__ = "\n".join(lines)
    return function
