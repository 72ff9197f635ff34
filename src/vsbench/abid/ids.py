"""ABID object keys and image ids.

The public bucket holds ``bin-images/<id>.jpg`` and ``metadata/<id>.json`` where ``<id>`` is
an integer written either plainly (``523``) or zero-padded (``00523``); both spellings of one id
are the same bin. Locally vsbench always stores the challenge's own spelling, ``'%05d'``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

IMAGES_DIR = "bin-images"
METADATA_DIR = "metadata"
RESIZED_DIR = "bin-images-resize"

Kind = Literal["image", "metadata"]
_KIND_BY_DIR: dict[str, Kind] = {IMAGES_DIR: "image", METADATA_DIR: "metadata"}
_EXT_BY_KIND: dict[Kind, str] = {"image": ".jpg", "metadata": ".json"}
_NAME = re.compile(r"^(\d{1,9})\.(jpg|json)$")


@dataclass(frozen=True)
class AbidKey:
    """One object of the dataset: which bin, which kind, and how its key spells the id."""

    bin_id: int
    kind: Kind
    key: str
    padded: bool


def parse_name(name: str, kind: Kind) -> int | None:
    """``'00523.jpg'`` -> 523 for an image; None for anything that is not ``<digits>.<ext>``."""
    match = _NAME.match(name)
    if not match or f".{match.group(2)}" != _EXT_BY_KIND[kind]:
        return None
    value = int(match.group(1))
    return value if value > 0 else None


def parse_key(key: str, prefix: str = "") -> AbidKey | None:
    """Parse a bucket key under ``prefix``; None for keys that are not ABID objects.

    Refusing everything but ``<dir>/<digits>.<ext>`` also refuses path traversal: a key such as
    ``bin-images/../../etc/x.jpg`` can never become a local path.
    """
    if not key.startswith(prefix):
        return None
    relative = key[len(prefix) :]
    directory, _, name = relative.partition("/")
    kind = _KIND_BY_DIR.get(directory)
    if kind is None or "/" in name:
        return None
    bin_id = parse_name(name, kind)
    if bin_id is None:
        return None
    stem = name.rsplit(".", 1)[0]
    return AbidKey(bin_id=bin_id, kind=kind, key=key, padded=stem != str(bin_id))


def bin_stem(bin_id: int) -> str:
    """The challenge's spelling of a bin id, ``'%05d'``: the stem of its image and metadata files, so
    the name a person reads is the file they would open."""
    return f"{bin_id:05d}"


def local_name(bin_id: int, kind: Kind) -> str:
    """The challenge's file name for a bin: ``'%05d.jpg'`` or ``'%05d.json'``."""
    return f"{bin_stem(bin_id)}{_EXT_BY_KIND[kind]}"


def relative_path(bin_id: int, kind: Kind) -> str:
    directory = IMAGES_DIR if kind == "image" else METADATA_DIR
    return f"{directory}/{local_name(bin_id, kind)}"
