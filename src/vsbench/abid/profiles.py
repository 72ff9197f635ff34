"""Training profiles: the challenge's settings (``full``) and a CPU-sized ``demo``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrainProfile(BaseModel):
    """Hyper-parameters of one baseline run. Frozen and strict: a typo is an error, not a default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epochs: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    lr: float = Field(gt=0)
    momentum: float = Field(ge=0, lt=1)
    weight_decay: float = Field(ge=0)
    lr_step_epochs: int = Field(ge=1, description="multiply the lr by lr_gamma every this many epochs")
    lr_gamma: float = Field(gt=0, le=1)
    image_size: int = Field(ge=32, description="side fed to the network (images are stored at 224)")
    workers: int | None = Field(default=None, ge=0, description="DataLoader worker processes; None: the cores of "
                                "the container's CPU quota less one (vsbench.runtime.loaders)")
    max_targets: int = Field(ge=1, description="train images paired with a validation question")
    pos_prob: float = Field(gt=0, lt=1, description="probability of a positive training pair")
    pairs_per_row: int = Field(default=1, ge=1, description="siamese pairs drawn per training row per epoch")
    siamese_lr: float | None = Field(default=None, gt=0, description="the siamese run's lr; None: lr")
    dropout: float = Field(ge=0, lt=1)
    optimizer: Literal["sgd", "adamw"] = "sgd"
    siamese_trunk_init: Literal["scratch", "counting"] = Field(
        default="scratch", description="start the siamese trunk from the trained counting network's trunk")
    siamese_freeze_trunk: bool = Field(default=False, description="train only the siamese head (needs a trunk init)")
    amp: bool = True
    epoch_selection: Literal["val", "holdout", "last"] = Field(
        default="val", description="which epoch's weights answer: best on the validation questions (upstream's "
        "practice; the reported score is then optimistic), best on a part of train held out of training, or the last")
    holdout_fraction: float = Field(default=0.1, gt=0, lt=1,
                                    description="share of the training bins held out when epoch_selection='holdout'")
    siamese_pair_features: Literal["concat", "symmetric"] = Field(
        default="concat", description="the head's input: the challenge's concat(a, b), or concat(|a - b|, a * b)")
    siamese_head_width: int = Field(default=4096, ge=16, description="width of the head's two hidden layers "
                                    "(the challenge's: 4096)")
    arch: Literal["resnet34", "resnet18"] = Field(
        default="resnet34", description="trunk of both baselines (the challenge's: resnet34)")

    @model_validator(mode="after")
    def _whole_rows_per_batch(self) -> TrainProfile:
        """A siamese batch holds whole rows (each row's pairs share its image's trunk pass)."""
        if self.batch_size % self.pairs_per_row:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of pairs_per_row {self.pairs_per_row}: "
                             "a siamese batch holds whole rows of pairs")
        return self


PROFILES: dict[str, TrainProfile] = {
    # silverbottlep/abid_challenge: ResNet-34 from scratch, SGD 0.1 / 0.9 / 1e-4, batch 128,
    # 40 epochs, lr x0.1 every 10, 224 px, 20 training images per verification question.
    "full": TrainProfile(epochs=40, batch_size=128, lr=0.1, momentum=0.9, weight_decay=1e-4, lr_step_epochs=10,
                         lr_gamma=0.1, image_size=224, workers=None, max_targets=20, pos_prob=0.5, dropout=0.5),
    # Minutes on 2 CPU cores (docs/abid.md, "Why the demo's settings differ"): ResNet-18 trunks at
    # 48 px (a third of ResNet-34's compute at 64 px, and on the demo data no worse), AdamW
    # (converges in a few epochs from scratch where SGD at this data size needs dozens), 5 epochs
    # with the lr cut after 4. The siamese run draws 4 pairs per row per epoch (each row's image
    # embedded once for its 4 pairs) at lr 3e-4, and its head sees (|a - b|, a * b): with the
    # challenge's concat(a, b) it needed about three times the compute to leave chance. Its hidden
    # layers are 1024 wide, not 4096: at 48 px the 21 M-parameter head was a third of a step.
    "demo": TrainProfile(epochs=5, batch_size=32, lr=1e-3, momentum=0.9, weight_decay=0.05, lr_step_epochs=4,
                         lr_gamma=0.1, image_size=48, workers=2, max_targets=20, pos_prob=0.5, dropout=0.2,
                         optimizer="adamw", pairs_per_row=4, siamese_lr=3e-4, siamese_pair_features="symmetric",
                         siamese_head_width=1024, arch="resnet18"),
}


def get_profile(name: str, **overrides: object) -> TrainProfile:
    if name not in PROFILES:
        raise ValueError(f"unknown training profile {name!r}; choose from {sorted(PROFILES)}")
    return TrainProfile(**{**PROFILES[name].model_dump(), **overrides})  # validated, unlike model_copy


def profile_problems(name: str, overrides: Any, *, profile_option: str = "--profile",
                     overrides_option: str = "--overrides") -> list[str]:
    """Every problem of a training profile and its overrides, one line each naming the option: an
    unknown profile (with the ones there are), overrides that are not a JSON object, a key that is no
    profile field (with the nearest one and the list), a value a field refuses (what it must be).

    Why: ``abid train`` and ``abid run-local`` (and a submitted pipeline) must refuse these before
    any step starts; pydantic's own message ("TrainProfile: epoch: Extra inputs are not permitted")
    names neither the option nor the keys a person could have meant."""
    import difflib
    import json

    from pydantic import ValidationError

    problems: list[str] = []
    if name not in PROFILES:
        problems.append(f"{profile_option} {name!r}: not a training profile; choose {' or '.join(sorted(PROFILES))}")
    if isinstance(overrides, str):
        try:
            overrides = json.loads(overrides or "{}")
        except ValueError as exc:
            return [*problems, f"{overrides_option}: not JSON ({exc}); give an object of profile fields, "
                               f'e.g. \'{{"epochs": 2}}\'']
    if not isinstance(overrides, dict):
        return [*problems, f"{overrides_option}: must be a JSON object of profile fields, e.g. '{{\"epochs\": 2}}'"]
    fields = list(TrainProfile.model_fields)
    for key in overrides:
        if key not in fields:
            near = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append(f"{overrides_option}: {key!r} is not a profile field{hint}; the fields are "
                            f"{', '.join(fields)}")
    known = {k: v for k, v in overrides.items() if k in fields}
    if name in PROFILES:
        try:
            get_profile(name, **known)
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(part) for part in error["loc"]) or "the profile"  # pydantic's ErrorDetails
                given = f" (got {error['input']!r})" if "input" in error and where != "the profile" else ""
                problems.append(f"{overrides_option}: {where}: {error['msg']}{given}")
    return problems
