"""How images are turned into a network's input (:class:`Preprocessing`): the resize, crop and
normalization a model states.

It lives in :mod:`vsbench.imaging` because both sides need it and must not import each other upward:
the decoders (:mod:`vsbench.imaging.batched`, the Pillow path) carry it out, the models
(:mod:`vsbench.models.registry`, which re-exports it) state it. Pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = ("nearest", "bilinear", "bicubic")
RESIZE_MODES = ("shorter", "square")
CROP_OFFSETS = ("round", "floor")


@dataclass(frozen=True)
class Preprocessing:
    """How images are turned into the network's input.

    The shorter side is resized to ``resize_size`` (antialiased, with ``interpolation``), then a
    center crop of ``input_size`` x ``input_size`` is taken. ``resize_size == input_size`` means a
    plain resize to a square (no crop; the aspect ratio is not kept, as ABID's 224x224 images and
    SSCD's "skew" setting do). ``preserve_aspect_ratio`` resizes the shorter side only and crops
    nothing (SSCD's evaluation default); images then differ in size and are batched by shape.
    ``mean``/``std`` apply to pixel values scaled to [0, 1].

    ``resize_mode`` makes the resize explicit where the sizes alone cannot say it: ``"shorter"``
    (aspect kept, then the crop: timm's ``crop_pct=1.0`` resizes the shorter side to 224 *and*
    crops 224) or ``"square"`` (both sides to ``resize_size``, then the crop: timm's and
    open_clip's "squash"). Left empty it follows the sizes as above. ``crop_offset`` is how the
    crop's top-left corner is rounded when the margin is odd: torchvision (and so timm and
    open_clip) rounds half to even, Hugging Face's image processors floor; one pixel of shift is
    enough to change a descriptor, so each adapter states its library's rule.
    """

    input_size: int
    resize_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"
    preserve_aspect_ratio: bool = False
    resize_mode: str = ""
    crop_offset: str = "round"

    def __post_init__(self) -> None:
        if not self.resize_mode:  # frozen: the derived default is written once, here
            derived = "shorter" if self.preserve_aspect_ratio or self.resize_size != self.input_size else "square"
            object.__setattr__(self, "resize_mode", derived)
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(f"resize_mode must be one of {RESIZE_MODES}, got {self.resize_mode!r}")
        if self.crop_offset not in CROP_OFFSETS:
            raise ValueError(f"crop_offset must be one of {CROP_OFFSETS}, got {self.crop_offset!r}")
        if self.input_size < 1 or self.resize_size < 1:
            raise ValueError(f"image sizes must be positive, got input {self.input_size}, "
                             f"resize {self.resize_size}")
        if self.preserve_aspect_ratio and self.resize_size != self.input_size:
            raise ValueError("preserve_aspect_ratio resizes the shorter side only: "
                             "input_size must equal resize_size")
        if self.resize_size < self.input_size:
            raise ValueError(f"resize_size {self.resize_size} is smaller than the crop "
                             f"input_size {self.input_size}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"mean and std need 3 values each, std positive; got {self.mean}, {self.std}")

    @property
    def crops(self) -> bool:
        """Whether a center crop follows the resize (a square resize to the input size needs none)."""
        if self.preserve_aspect_ratio:
            return False
        return self.resize_mode == "shorter" or self.resize_size != self.input_size
