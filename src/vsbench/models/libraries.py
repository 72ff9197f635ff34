"""The models people bring: ``timm:<name>``, ``open_clip:<arch>/<pretrained>`` and ``hf:<repo-or-path>``.

Each family builds the network with its own library, reads that library's *own* preprocessing
(timm's data config, open_clip's preprocess config, the Hugging Face image processor) into a
:class:`~vsbench.models.registry.Preprocessing`, and returns the layer users compare with:

* timm: pooled features (``num_classes=0``: the classifier removed, pre-logits kept);
* open_clip: the CLIP image tower's projected embedding (``encode_image`` without normalization);
* Hugging Face: ``get_image_features`` for two-tower models (CLIP, SigLIP), else ``pooler_output``
  (DINOv2's normed CLS token, ConvNeXt's pooled map), else the CLS token (ViT, whose pooler is an
  extra dense+tanh layer that the checkpoints people use for retrieval never trained).

Options (the ``--model-options`` JSON): ``weights`` is ``"pretrained"`` (default: the library's
cache, downloading only when not offline), ``"random"`` (initialization seeded with the run's ``--seed``) or a local path:
a ``.safetensors`` file (preferred) or a ``torch.save`` state dict (read with
``weights_only=True``), or for ``hf:`` a ``save_pretrained`` folder. open_clip also takes
``config``, a local model-config JSON registered under its file name (custom or tiny
architectures). Images are decoded and resized by vsbench's loader with Pillow, as the libraries'
PIL paths do, so the network sees the same pixels (tests/unit/test_model_libraries.py checks it).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vsbench.models.registry import Embedder, Preprocessing, close_names, register_family
from vsbench.models.weights import (
    WeightsError,
    is_offline,
    load_checked,
    offline_error,
    random_source,
    read_state_dict,
    seeded,
    weights_choice,
)

EXTRA_HINT = "install the optional extra: pip install 'vsbench[models]'"
PIL_INTERPOLATIONS = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL.Image.Resampling values


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{module} is not installed ({exc}); {EXTRA_HINT}") from None


def _interpolation(value: Any, where: str) -> str:
    name = PIL_INTERPOLATIONS.get(value, value) if isinstance(value, int) else str(value).lower()
    if name not in ("nearest", "bilinear", "bicubic"):
        raise ValueError(f"{where}: interpolation {value!r} is not supported (nearest, bilinear, bicubic)")
    return name


def _square(size: Any, where: str) -> int:
    sizes = (size, size) if isinstance(size, int) else tuple(size)
    if len(sizes) != 2 or sizes[0] != sizes[1]:
        raise ValueError(f"{where}: input size {size} is not square; vsbench batches square inputs")
    return int(sizes[0])


class _Output(nn.Module):
    """Calls a network and keeps the one output users embed with (first of a tuple)."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = self.network(images)
        return out[0] if isinstance(out, (tuple, list)) else out


def _probe_dim(network: nn.Module, size: int) -> int:
    with torch.inference_mode():
        out = network.eval()(torch.zeros(1, 3, size, size))
    if out.ndim < 2:
        raise ValueError(f"expected (N, D) descriptors, got shape {tuple(out.shape)}")
    return int(out.flatten(1).shape[1])


# --- timm --------------------------------------------------------------------------------------

def timm_names() -> list[str]:
    return _require("timm").list_models()


def timm_preprocessing(net: nn.Module) -> Preprocessing:
    """timm's eval transform (``resolve_model_data_config`` + ``create_transform``) as a
    :class:`Preprocessing`: resize to ``floor(size / crop_pct)`` (shorter side for crop_mode
    ``center``, both sides for ``squash``), then a center crop of ``size``."""
    data = _require("timm.data")
    config = data.resolve_model_data_config(net)
    where = f"timm data config {config}"
    size = _square(config["input_size"][-2:], where)
    crop_pct = config.get("crop_pct") or data.DEFAULT_CROP_PCT
    mode = config.get("crop_mode", "center")
    if mode not in ("center", "squash"):
        raise ValueError(f"{where}: crop_mode {mode!r} (padding) is not supported")
    return Preprocessing(size, math.floor(size / crop_pct), tuple(config["mean"]), tuple(config["std"]),
                         _interpolation(config["interpolation"], where),
                         resize_mode="shorter" if mode == "center" else "square")


def _timm_hub_file(net: nn.Module, name: str) -> str:
    """The pretrained weights file of a timm model, from the Hugging Face cache (downloaded there
    first unless offline)."""
    cfg = net.pretrained_cfg
    hub_id = cfg.get("hf_hub_id")
    if not hub_id:
        raise WeightsError(f"timm:{name}: timm knows these weights only by URL ({cfg.get('url')}); download "
                           f"the file yourself and pass {{\"weights\": \"PATH\"}}")
    from huggingface_hub import hf_hub_download

    filenames = [cfg["hf_hub_filename"]] if cfg.get("hf_hub_filename") else ["model.safetensors", "pytorch_model.bin"]
    last: Exception | None = None
    for filename in filenames:
        try:
            return hf_hub_download(hub_id, filename, local_files_only=is_offline())
        except Exception as exc:  # noqa: BLE001 - hub errors differ by version; the last one is reported
            last = exc
    raise offline_error(f"timm:{name} pretrained weights ({hub_id})", last)


def timm_weights_source(spec: str, weights: str = "pretrained") -> str:
    choice = weights_choice(weights)
    if choice != "pretrained":
        return random_source() if choice == "random" else f"local file {weights}"
    timm = _require("timm")
    with torch.device("meta"):
        net = timm.create_model(spec, pretrained=False, num_classes=0)
    hub_id = net.pretrained_cfg.get("hf_hub_id")
    if not hub_id:
        return f"URL {net.pretrained_cfg.get('url')} (not on the Hugging Face Hub)"
    from huggingface_hub import try_to_load_from_cache

    for filename in ("model.safetensors", "pytorch_model.bin"):
        cached = try_to_load_from_cache(hub_id, filename)
        if isinstance(cached, str):
            return f"Hugging Face cache: {cached}"
    return f"Hugging Face Hub {hub_id} (not cached: downloaded on first use unless offline)"


@register_family("timm", weights_source=timm_weights_source, names=timm_names, pattern="timm:<name>",
                 example="timm:vit_small_patch14_dinov2.lvd142m")
def timm_model(spec: str, weights: str = "pretrained") -> Embedder:
    """A timm model's pooled features (``num_classes=0``), with timm's eval preprocessing for the
    pretrained tag in the name (``resnet50.a1_in1k``; without a tag, timm's default one)."""
    timm = _require("timm")
    if not timm.is_model(spec):
        close = close_names(spec, timm.list_models())
        raise ValueError(f"unknown timm model {spec!r}; close names: {[f'timm:{c}' for c in close]}")
    choice = weights_choice(weights)
    if choice == "pretrained":
        with torch.device("meta"):  # the pretrained config only: an unavailable file fails before any work
            path = _timm_hub_file(timm.create_model(spec, pretrained=False, num_classes=0), spec)
        # timm's own loader for its hub files: it applies the architecture's checkpoint filter
        # (layout conversions) and drops the classifier; it reads with weights_only=True.
        net = timm.create_model(spec, pretrained=True, num_classes=0, pretrained_cfg_overlay={"file": path})
        source = f"timm pretrained {path}"
    else:
        with seeded():
            net = timm.create_model(spec, pretrained=False, num_classes=0)
        source = random_source()
    if choice == "path":
        state = read_state_dict(weights)
        heads = net.pretrained_cfg.get("classifier") or ()
        heads = (heads,) if isinstance(heads, str) else tuple(heads)
        state = {k: v for k, v in state.items() if not any(k.startswith(f"{h}.") for h in heads)}
        load_checked(net, state, f"weights file {weights}")
        source = f"local file {weights}"
    preprocessing = timm_preprocessing(net)
    # The pretrained config decides the network beside the name (timm's version is in the key too);
    # "file" is where this machine's copy of the weights lies, which their digest covers.
    config = {"timm_pretrained_cfg": {k: v for k, v in dict(net.pretrained_cfg).items() if k != "file"}}
    return Embedder(f"timm:{spec}", net, int(net.num_features), preprocessing, weights_source=source,
                    output="pooled features (timm num_classes=0)", config=config)


# --- open_clip ---------------------------------------------------------------------------------

def open_clip_names() -> list[str]:
    open_clip = _require("open_clip")
    return [f"{arch}/{tag}" for arch, tag in open_clip.list_pretrained()] + open_clip.list_models()


def _open_clip_parse(spec: str, config: str | None) -> tuple[str, str]:
    open_clip = _require("open_clip")
    arch, _, tag = spec.partition("/")
    if config is not None:
        path = Path(config)
        if not path.is_file():
            raise FileNotFoundError(f"open_clip model config not found: {path}")
        if path.stem != arch:
            raise ValueError(f"open_clip config {path} registers architecture {path.stem!r}, the name says {arch!r}")
        open_clip.add_model_config(path)
    if arch not in open_clip.list_models():
        close = close_names(spec, open_clip_names())
        raise ValueError(f"unknown open_clip architecture {arch!r}; close names: {[f'open_clip:{c}' for c in close]}")
    if tag and not open_clip.get_pretrained_cfg(arch, tag):
        raise ValueError(f"open_clip has no pretrained tag {tag!r} for {arch}; it has "
                         f"{open_clip.list_pretrained_tags_by_model(arch)}")
    return arch, tag


def open_clip_preprocessing(model: nn.Module, arch: str, tag: str) -> Preprocessing:
    """open_clip's eval transform (``image_transform_v2``) for the architecture's preprocess
    config with the pretrained tag's overrides (SigLIP's mean/std and squash resize, say)."""
    open_clip = _require("open_clip")
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict

    merged = merge_preprocess_dict(model.visual.preprocess_cfg, open_clip.get_pretrained_cfg(arch, tag) if tag else {})
    cfg = PreprocessCfg(**merged)
    where = f"open_clip preprocess config {merged}"
    size = _square(cfg.size, where)
    if cfg.resize_mode not in ("shortest", "squash"):
        raise ValueError(f"{where}: resize_mode {cfg.resize_mode!r} (padding) is not supported")
    return Preprocessing(size, size, tuple(cfg.mean), tuple(cfg.std), _interpolation(cfg.interpolation, where),
                         resize_mode="shorter" if cfg.resize_mode == "shortest" else "square")


def _open_clip_pretrained_file(arch: str, tag: str) -> str:
    """The tag's weights file from the Hugging Face cache (downloaded there first unless offline;
    safetensors preferred, as open_clip does), or open_clip's URL download when online."""
    open_clip = _require("open_clip")
    from open_clip.pretrained import HF_WEIGHTS_NAME, _get_safe_alternatives, download_pretrained

    cfg = open_clip.get_pretrained_cfg(arch, tag)
    hub = cfg.get("hf_hub", "")
    what = f"open_clip:{arch}/{tag} pretrained weights"
    if not hub:
        if is_offline():
            raise offline_error(f"{what} (a URL download, {cfg.get('url')})")
        try:
            return download_pretrained(cfg)
        except Exception as exc:  # noqa: BLE001 - urllib errors; reported with the option to use
            raise offline_error(what, exc) from None
    from huggingface_hub import hf_hub_download

    model_id, filename = os.path.split(hub)
    filename = filename or HF_WEIGHTS_NAME
    last: Exception | None = None
    for candidate in [*_get_safe_alternatives(filename), filename]:
        try:  # local_files_only explicitly: huggingface_hub reads HF_HUB_OFFLINE only when imported
            return hf_hub_download(model_id, candidate, local_files_only=is_offline())
        except Exception as exc:  # noqa: BLE001 - hub errors differ by version; the last one is reported
            last = exc
    raise offline_error(what, last)


def open_clip_weights_source(spec: str, weights: str = "pretrained", config: str | None = None) -> str:
    choice = weights_choice(weights)
    if choice != "pretrained":
        return random_source() if choice == "random" else f"local file {weights}"
    arch, tag = _open_clip_parse(spec, config)
    if not tag:
        return "none: name a pretrained tag (open_clip:<arch>/<tag>) or pass weights"
    cfg = _require("open_clip").get_pretrained_cfg(arch, tag)
    hub = cfg.get("hf_hub", "")
    if hub:
        from huggingface_hub import try_to_load_from_cache

        repo, filename = hub.rstrip("/").rsplit("/", 1) if not hub.endswith("/") else (hub.rstrip("/"), "")
        names = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        cached = [c for c in (try_to_load_from_cache(repo, n) for n in names) if isinstance(c, str)]
        return f"Hugging Face Hub {hub} ({'cached: ' + cached[0] if cached else 'not cached: downloaded unless offline'})"
    return f"URL {cfg.get('url')}"


@register_family("open_clip", weights_source=open_clip_weights_source, names=open_clip_names,
                 pattern="open_clip:<arch>/<pretrained>", example="open_clip:ViT-B-32/laion2b_s34b_b79k")
def open_clip_model(spec: str, weights: str = "pretrained", config: str | None = None) -> Embedder:
    """The image tower of an open_clip model: ``encode_image`` (projected, not normalized), with
    open_clip's eval preprocessing for that architecture and pretrained tag."""
    open_clip = _require("open_clip")
    arch, tag = _open_clip_parse(spec, config)
    choice = weights_choice(weights)
    if choice == "pretrained" and not tag:
        raise WeightsError(f"open_clip:{arch} names no pretrained tag ({open_clip.list_pretrained_tags_by_model(arch)}); "
                           "use open_clip:<arch>/<tag>, or pass {\"weights\": \"PATH\"} or {\"weights\": \"random\"}")
    path = _open_clip_pretrained_file(arch, tag) if choice == "pretrained" else ""  # fail before building
    with seeded():
        model = open_clip.create_model(arch, pretrained=None, device="cpu")
    if choice == "pretrained":
        state, source = open_clip.factory.load_state_dict(path, weights_only=True), f"open_clip {arch}/{tag}: {path}"
        state = open_clip.factory.convert_state_dict(model, state)
        load_checked(model, state, f"{source}", allow_unexpected=True)
    elif choice == "path":
        state = open_clip.factory.convert_state_dict(model, read_state_dict(weights))
        load_checked(model, state, f"weights file {weights}")
        source = f"local file {weights}"
    else:
        source = random_source()
    preprocessing = open_clip_preprocessing(model, arch, tag)
    network = _Output(model.visual)  # the text tower is dropped: only the image tower embeds
    # The model config (a local one can be edited between runs) and the tag's config shape the tower.
    config = {"open_clip_model_cfg": open_clip.get_model_config(arch),
              "open_clip_pretrained_cfg": open_clip.get_pretrained_cfg(arch, tag) if tag else {}}
    return Embedder(f"open_clip:{spec}", network, _probe_dim(network, preprocessing.input_size), preprocessing,
                    weights_source=source, output="CLIP image embedding (encode_image, unnormalized)", config=config)


# --- Hugging Face transformers -----------------------------------------------------------------

CLS_TOKEN_MODELS = ("vit", "deit")  # their pooler is an untrained dense+tanh in retrieval checkpoints


def hf_preprocessing(processor: Any) -> Preprocessing:
    """A Hugging Face image processor (its PIL backend, the reference implementation) as a
    :class:`Preprocessing`: resize (shortest edge, or height x width), optional center crop with
    Hugging Face's floor rounding, rescale by 1/255, normalize."""
    where = type(processor).__name__
    size = processor.size
    resample = _interpolation(getattr(processor, "resample", 2), where)
    if not getattr(processor, "do_resize", True):
        raise ValueError(f"{where}: do_resize=False (images at their own size) is not supported")
    if abs(float(getattr(processor, "rescale_factor", 1 / 255)) - 1 / 255) > 1e-9 or not getattr(processor, "do_rescale", True):
        raise ValueError(f"{where}: only a rescale by 1/255 is supported")
    if getattr(processor, "do_normalize", True):
        mean, std = tuple(processor.image_mean), tuple(processor.image_std)
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    crop_pct = getattr(processor, "crop_pct", None)
    if getattr(size, "shortest_edge", None) and crop_pct is not None:  # ConvNeXt's processor
        edge = int(size.shortest_edge)
        if edge < 384:
            return Preprocessing(edge, int(edge / crop_pct), mean, std, resample, resize_mode="shorter",
                                 crop_offset="floor")
        return Preprocessing(edge, edge, mean, std, resample, resize_mode="square", crop_offset="floor")
    if getattr(size, "shortest_edge", None):
        resize, mode = int(size.shortest_edge), "shorter"
    elif getattr(size, "height", None) and getattr(size, "width", None):
        resize, mode = _square((size.height, size.width), where), "square"
    else:
        raise ValueError(f"{where}: size {size} is not supported (shortest_edge, or height and width)")
    if getattr(processor, "do_center_crop", False):
        crop = _square((processor.crop_size.height, processor.crop_size.width), where)
        return Preprocessing(crop, resize, mean, std, resample, resize_mode=mode, crop_offset="floor")
    if mode == "shorter":
        return Preprocessing(resize, resize, mean, std, resample, preserve_aspect_ratio=True)
    return Preprocessing(resize, resize, mean, std, resample, resize_mode="square", crop_offset="floor")


class _HFImageFeatures(nn.Module):
    """pixel_values -> the image embedding users expect from a transformers model."""

    def __init__(self, model: nn.Module, kind: str) -> None:
        super().__init__()
        self.model = model
        self.kind = kind

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.kind == "image_features":
            out = self.model.get_image_features(pixel_values=images)
            return out if isinstance(out, torch.Tensor) else out.pooler_output
        out = self.model(pixel_values=images)
        if self.kind == "cls":
            return out.last_hidden_state[:, 0]
        return out.pooler_output.flatten(1)


def _hf_load(spec: str, what: str, loader: Any, **kwargs: Any) -> Any:
    try:  # local_files_only explicitly: huggingface_hub reads HF_HUB_OFFLINE only when imported
        return loader(spec, local_files_only=is_offline(), **kwargs)
    except OSError as exc:
        if Path(spec).exists():
            raise ValueError(f"hf:{spec}: cannot read the {what} from this folder ({exc})") from None
        raise offline_error(f"hf:{spec} {what}", exc) from None


def hf_weights_source(spec: str, weights: str = "pretrained") -> str:
    choice = weights_choice(weights)
    if choice == "random":
        return random_source()
    if choice == "path":
        return f"local {'folder' if Path(weights).is_dir() else 'file'} {weights}"
    if Path(spec).is_dir():
        return f"local folder {spec}"
    from huggingface_hub import try_to_load_from_cache

    cached = [f for f in ("model.safetensors", "pytorch_model.bin") if isinstance(try_to_load_from_cache(spec, f), str)]
    return f"Hugging Face Hub {spec} ({'cached: ' + cached[0] if cached else 'not cached: downloaded unless offline'})"


@register_family("hf", weights_source=hf_weights_source, names=lambda: [], pattern="hf:<repo-or-path>",
                 example="hf:facebook/dinov2-small")
def hf_model(spec: str, weights: str = "pretrained") -> Embedder:
    """A Hugging Face transformers vision model from a Hub repository (through the cache) or a
    local folder holding ``config.json`` and ``preprocessor_config.json``."""
    transformers = _require("transformers")
    config = _hf_load(spec, "config", transformers.AutoConfig.from_pretrained)
    processor = _hf_load(spec, "image processor", transformers.AutoImageProcessor.from_pretrained, backend="pil")
    kwargs = {"add_pooling_layer": False} if config.model_type in CLS_TOKEN_MODELS else {}
    choice = weights_choice(weights)
    if choice == "random" or (choice == "path" and Path(weights).is_file()):
        with seeded():
            model = transformers.AutoModel.from_config(config, **kwargs)
        if choice == "path":
            state = read_state_dict(weights)
            prefix = f"{model.base_model_prefix}."
            if state and not any(k in model.state_dict() for k in state) and any(k.startswith(prefix) for k in state):
                state = {k.removeprefix(prefix): v for k, v in state.items()}
            load_checked(model, state, f"weights file {weights}", allow_unexpected=True)
        source = random_source() if choice == "random" else f"local file {weights}"
    else:
        location = spec if choice == "pretrained" else weights
        model, info = _hf_load(location, "weights", transformers.AutoModel.from_pretrained, config=config,
                               output_loading_info=True, **kwargs)
        problems = [f"tensor {k!r} is missing from it" for k in info.get("missing_keys", [])]
        problems += [f"tensor {m[0]!r} has a shape the architecture does not expect ({m[1:]})" if isinstance(m, tuple)
                     else f"tensor {m!r} has a shape the architecture does not expect"
                     for m in info.get("mismatched_keys", [])]
        if problems:
            raise WeightsError(f"hf:{spec} weights from {location} do not fit {type(model).__name__}: {problems[0]}")
        source = f"Hugging Face {location}"
    model.eval()
    kind = "image_features" if hasattr(model, "get_image_features") else (
        "cls" if config.model_type in CLS_TOKEN_MODELS else "pooler")
    preprocessing = hf_preprocessing(processor)
    network = _HFImageFeatures(model, kind)
    output = {"image_features": "image embedding (get_image_features)", "cls": "CLS token of the last layer",
              "pooler": "pooler_output"}[kind]
    config_files = {"hf_config": _public(config.to_dict()), "hf_image_processor": _public(processor.to_dict())}
    return Embedder(f"hf:{spec}", network, _probe_dim(network, preprocessing.input_size), preprocessing,
                    weights_source=source, output=output, config=config_files)


def _public(settings: dict[str, Any]) -> dict[str, Any]:
    """A config as loaded, less the keys that say where it was read from (``_name_or_path``,
    ``_commit_hash``): config.json edited in place (``hidden_act`` gelu -> relu) is another model,
    the same folder moved is not."""
    return {k: v for k, v in settings.items() if not k.startswith("_")}

