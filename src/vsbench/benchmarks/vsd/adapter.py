"""VSD, visual similarity discovery (seed 000; REFERENCE.md section 4), after y8ubj/vsd and
vsd-benchmark/vsd.

Native layout under ``root``::

    metadata.json                    {"images": [{id, path, phase, bbox?, category?, color?, ...}]}
    <images>/<path>                  image files; ``path`` is relative to the ``images`` option (root)
    gt_tagging/closed_catalog.json   [{"key": [seed path, candidate path], "value": 0|1}, ...]
    gt_tagging/in_the_wild.json      the same, with consumer photos as seeds

An image is known by its ``path`` (the tags name images by path, and so do the feature ids); its
``id`` is the *product* id that several views share (upstream's ``get_image_name_to_id_mapping``
maps path -> ``id``, and the unique-id filter and ``id_freq_threshold`` work on that field).

Protocols (y8ubj/vsd ``eval_closed_catalog.py`` and ``eval_wild.py``):

* ``closed`` (closed catalog): queries and gallery are the catalog, phases
  ``train, test, query, gallery`` with ``use_all_data`` (the default, as in the seed), else ``train``.
* ``wild`` (in the wild): queries are consumer photos (phase ``search``), the gallery the shop
  images, phases ``train, test`` with ``use_all_data``, else ``train``.

``id_freq_threshold`` drops, from the gallery, products with fewer views there (upstream filters
the catalog dataset, not the consumer photos). Each seed's ranking is the whole gallery by cosine,
computed as upstream computes it (float32 ``torch.mm`` of norm-divided rows, ``torch.topk``, the
seed's own cell set to -1 in the closed catalog), so tied scores break as upstream's do; HR and MRR
also carry their range over every order of tied scores (``hr_at_5_worst``...). With ``metadata_field`` it keeps only gallery
images whose value of that field equals the seed's (upstream ``filter_results_metadata_field``);
then the unique-id filter keeps the first image of each product and drops the seed's own product
(which also removes the seed's own image in the closed catalog). HR@k and MRR@k for k in {5, 9},
ROC-AUC and PR-AUC come from :mod:`vsbench.benchmarks.vsd.metrics`.

Decisions where upstream crashes or is silent (documented here and in the docs):

* ROC-AUC and PR-AUC score every tagged pair by the cosine of its two images, whatever the filters
  (upstream looks the candidate up in the metadata-filtered list and crashes when it is not there).
* A tag whose seed or candidate the protocol leaves out (another phase, a product under
  ``id_freq_threshold``) is skipped and counted in ``num_skipped_tags``; a tag naming an image the
  metadata does not list is an error, as are conflicting duplicate tags. Exact duplicates collapse
  (upstream keeps tags in a set).
* ``crop_bbox``: the feature extractor receives cropped copies, written once (PNG, lossless) under
  ``crop_dir`` (default ``<root>/crops_bbox``), named after the image path and the crop box so that
  a changed box never reuses a stale crop. ``bbox`` is ``[x, y, h, w]`` (the seed's order: height
  before width), or upstream code's ``{"x1", "y1", "x2", "y2"}``; an image without one is an error.
* ``settings.codecs``, ``k`` and ``score_norm`` are ignored: VSD is defined by exact cosine over
  the whole gallery. Only ``use_gpu`` is passed on.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.benchmarks.base import EvalResult, EvalSettings, Sheet, Units, option_path
from vsbench.benchmarks.ranked_failures import Pictures
from vsbench.benchmarks.vsd.failures import vsd_sheet
from vsbench.benchmarks.vsd.metrics import DEFAULT_KS, candidate_rank, unique_product_topk, vsd_metrics
from vsbench.benchmarks.vsd.units import vsd_units
from vsbench.io.features import FeatureSet, ImageSet
from vsbench.io.inputs import InputError, read_json
from vsbench.io.storage import atomic_write_bytes, safe_join

NAME = "vsd"
IMAGE_SET = "images"
PROTOCOLS = ("closed", "wild")
DEFAULT_TAGS = {"closed": "gt_tagging/closed_catalog.json", "wild": "gt_tagging/in_the_wild.json"}
CLOSED_PHASES = {True: ("train", "test", "query", "gallery"), False: ("train",)}
WILD_GALLERY_PHASES = {True: ("train", "test"), False: ("train",)}
WILD_QUERY_PHASES = ("search",)


@dataclass(frozen=True)
class VsdImage:
    path: str  # the image's identity: tags and feature ids use it
    product_id: str
    phase: str
    crop_box: tuple[int, int, int, int] | None  # PIL (left, upper, right, lower), from bbox
    entry: Mapping[str, Any]  # the metadata entry as given (metadata_field reads it)


@dataclass(frozen=True)
class Tag:
    seed: str
    candidate: str
    value: int


@dataclass(frozen=True)
class Protocol:
    """One protocol's query and gallery images (metadata order) and its tags."""

    name: str
    queries: tuple[str, ...]
    gallery: tuple[str, ...]
    tags: tuple[Tag, ...]  # those the protocol can score
    skipped_tags: int


def read_metadata(path: Path) -> list[VsdImage]:
    """``{"images": [...]}`` with mandatory ``id``, ``path``, ``phase``; paths unique and inside the root."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise InputError(path, 'expected an object with an "images" list')
    images, seen = [], set()
    for number, entry in enumerate(data["images"], start=1):
        if not isinstance(entry, dict):
            raise InputError(path, f"images entry {number}: expected an object")
        for key in ("id", "path", "phase"):
            if not isinstance(entry.get(key), str | int) or isinstance(entry.get(key), bool) or entry[key] == "":
                raise InputError(path, f"images entry {number}: missing or invalid {key!r}")
        image_path = str(entry["path"])
        safe_join(Path("."), image_path)  # refuse traversal when reading, not only when opening
        if image_path in seen:
            raise InputError(path, f"images entry {number}: path {image_path!r} listed twice")
        seen.add(image_path)
        box = _crop_box(path, number, entry["bbox"]) if entry.get("bbox") is not None else None
        images.append(VsdImage(image_path, str(entry["id"]), str(entry["phase"]), box, entry))
    return images


def _crop_box(path: Path, number: int, bbox: Any) -> tuple[int, int, int, int]:
    """``[x, y, h, w]`` -> (x, y, x + w, y + h); ``{"x1", "y1", "x2", "y2"}`` as upstream's loader reads it."""
    try:
        if isinstance(bbox, dict):
            x1, y1, x2, y2 = (int(bbox[key]) for key in ("x1", "y1", "x2", "y2"))
        elif isinstance(bbox, list) and len(bbox) == 4:
            x, y, h, w = (int(v) for v in bbox)
            x1, y1, x2, y2 = x, y, x + w, y + h
        else:
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise InputError(path, f"images entry {number}: bbox must be [x, y, h, w] or "
                               f'{{"x1", "y1", "x2", "y2"}}, got {bbox!r}') from None
    if x1 < 0 or y1 < 0 or x2 <= x1 or y2 <= y1:
        raise InputError(path, f"images entry {number}: bbox {bbox!r} is empty or negative")
    return x1, y1, x2, y2


def read_tags(path: Path, known: Mapping[str, VsdImage]) -> list[Tag]:
    """``[{"key": [seed, candidate], "value": 0|1}]``; exact duplicates collapse, conflicting ones are errors."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(path, "expected a list of tags")
    tags: dict[tuple[str, str], Tag] = {}
    for number, item in enumerate(data, start=1):
        key = item.get("key") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key)):
            raise InputError(path, f"entry {number}: key must be [seed image, candidate image]")
        if value not in (0, 1) or isinstance(value, bool | float):
            raise InputError(path, f"entry {number}: value must be 0 or 1, got {value!r}")
        for image in key:
            if image not in known:
                raise InputError(path, f"entry {number}: image {image!r} is not in the metadata")
        tag = Tag(key[0], key[1], int(value))
        earlier = tags.setdefault((tag.seed, tag.candidate), tag)
        if earlier.value != tag.value:
            raise InputError(path, f"entry {number}: pair {key} tagged both 0 and 1")
    if not tags:
        raise InputError(path, "no tags")
    return list(tags.values())


def frequent_products(images: Sequence[VsdImage], threshold: int) -> list[VsdImage]:
    """Images whose product has at least ``threshold`` views among ``images`` (upstream keeps ``>=``)."""
    views = Counter(image.product_id for image in images)
    return [image for image in images if views[image.product_id] >= threshold]


def build_protocol(name: str, images: Sequence[VsdImage], tags: Sequence[Tag], *, use_all_data: bool,
                   id_freq_threshold: int) -> Protocol:
    """Queries, gallery and the scorable tags of one protocol (see the module docstring)."""
    gallery_phases = CLOSED_PHASES[use_all_data] if name == "closed" else WILD_GALLERY_PHASES[use_all_data]
    gallery = [i.path for i in frequent_products([i for i in images if i.phase in gallery_phases],
                                                 id_freq_threshold)]
    if name == "closed":
        pool = set(gallery)
    else:
        pool = {i.path for i in images if i.phase in WILD_QUERY_PHASES}
    gallery_set = set(gallery)
    usable = tuple(t for t in tags if t.seed in pool and t.candidate in gallery_set)
    seeds = {t.seed for t in usable}
    queries = tuple(i.path for i in images if i.path in seeds)
    return Protocol(name, queries, tuple(gallery), usable, len(tags) - len(usable))


class VsdBenchmark:
    """Adapter: metadata + tags of one or both protocols; embeds the galleries and the seeds."""

    name = NAME

    def __init__(self, root: Path, *, protocol: str = "both", tags: str | Path | None = None,
                 metadata: str | Path = "metadata.json", images: str | Path = ".", id_freq_threshold: int = 1,
                 crop_bbox: bool = False, crop_dir: str | Path | None = None, use_all_data: bool = True,
                 metadata_field: str | None = None) -> None:
        names = PROTOCOLS if protocol == "both" else (protocol,)
        if any(n not in PROTOCOLS for n in names):
            raise ValueError(f"protocol must be 'closed', 'wild' or 'both', got {protocol!r}")
        if tags is not None and len(names) > 1:
            raise ValueError("tags names one file: give protocol='closed' or 'wild' with it")
        if isinstance(id_freq_threshold, bool) or not isinstance(id_freq_threshold, int) or id_freq_threshold < 1:
            raise ValueError(f"id_freq_threshold must be an integer >= 1, got {id_freq_threshold!r}")
        self.root = Path(root)
        self.images_dir = option_path(self.root, images)
        self.crop_bbox = crop_bbox
        self.crop_dir = option_path(self.root, crop_dir if crop_dir is not None else "crops_bbox")
        self.metadata_field = metadata_field
        self.images = read_metadata(option_path(self.root, metadata))
        self.by_path = {image.path: image for image in self.images}
        self.protocols = []
        for name in names:
            tag_file = option_path(self.root, tags if tags is not None else DEFAULT_TAGS[name])
            self.protocols.append(build_protocol(name, self.images, read_tags(tag_file, self.by_path),
                                                 use_all_data=use_all_data, id_freq_threshold=id_freq_threshold))
        needed = {p for protocol in self.protocols for p in (*protocol.gallery, *protocol.queries)}
        self._needed = [image for image in self.images if image.path in needed]
        if crop_bbox:
            missing = [image.path for image in self._needed if image.crop_box is None]
            if missing:
                raise ValueError(f"crop_bbox: {len(missing)} images have no bbox, e.g. {missing[:3]}")
        if metadata_field is not None:
            missing = [image.path for image in self._needed if metadata_field not in image.entry]
            if missing:
                raise ValueError(f"metadata_field {metadata_field!r}: {len(missing)} images lack it, "
                                 f"e.g. {missing[:3]}")

    def image_sets(self) -> dict[str, ImageSet]:
        """Every gallery image and every seed of the chosen protocols, once, in metadata order.

        With ``crop_bbox`` the paths are cropped copies, written here (existing ones are reused).
        """
        paths = [self._crop(image) if self.crop_bbox else safe_join(self.images_dir, image.path)
                 for image in self._needed]
        return {IMAGE_SET: ImageSet(tuple(image.path for image in self._needed), tuple(paths))}

    def _crop(self, image: VsdImage) -> Path:
        """The cropped copy's path; an image that cannot be read (corrupt, missing, over the pixel
        cap) keeps its own path, so the embed step lists it with its reason like any bad image
        instead of this one stopping the benchmark."""
        from vsbench.imaging.limits import open_image

        box = image.crop_box
        assert box is not None  # checked when loading
        original = safe_join(self.images_dir, image.path)
        target = safe_join(self.crop_dir, f"{image.path}.{'_'.join(map(str, box))}.png")
        if not target.is_file():
            try:
                with open_image(original) as source:
                    rgb = source.convert("RGB")
            except (OSError, ValueError):
                return original
            clipped = (box[0], box[1], min(box[2], rgb.width), min(box[3], rgb.height))
            if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
                raise ValueError(f"{image.path}: bbox {box} lies outside the {rgb.width}x{rgb.height} image")
            buffer = io.BytesIO()
            rgb.crop(clipped).save(buffer, format="PNG")
            atomic_write_bytes(target, buffer.getvalue())
        return target

    def evaluate(self, features: dict[str, FeatureSet], settings: EvalSettings) -> EvalResult:
        """One record per protocol: HR@5/9, MRR@5/9, ROC-AUC, PR-AUC and the counts behind them."""
        feats = features[IMAGE_SET]
        feats.check_finite(IMAGE_SET)
        records, units = [], []
        for protocol in self.protocols:
            record: dict[str, Any] = {"protocol": protocol.name}
            metrics, seeds = self._score(protocol, feats, settings.use_gpu)
            record.update(metrics)
            records.append(record)
            units.append(seeds)
        shared: list[Pictures] = []  # made once, for the first sheet (the images' paths: crops when cropped)

        def failure_sheet(index: int, rows: int) -> Sheet | None:
            if not shared:
                folder = self.crop_dir if self.crop_bbox else self.images_dir
                shared.append(Pictures({IMAGE_SET: (self.image_sets()[IMAGE_SET], folder)}))
            return vsd_sheet(units[index], shared[0].sets, rows=rows, pictures=shared[0])

        return EvalResult(records=records, units=units, failure_sheet=failure_sheet)

    def _score(self, protocol: Protocol, feats: FeatureSet, use_gpu: bool | None
               ) -> tuple[dict[str, float | int], Units]:
        """The protocol's record and its seeds (:func:`vsbench.benchmarks.vsd.units.vsd_units`)."""
        if not protocol.tags:
            raise ValueError(f"{protocol.name}: no tag has both images in this protocol "
                             f"({protocol.skipped_tags} skipped)")
        query_row = {path: n for n, path in enumerate(protocol.queries)}
        gallery_row = {path: n for n, path in enumerate(protocol.gallery)}
        similarity = cosine_matrix(feats.select(protocol.queries, IMAGE_SET).features,
                                   feats.select(protocol.gallery, IMAGE_SET).features, use_gpu)
        if protocol.name == "closed":  # upstream fills the seed's own cell (its diagonal) with -1
            own = [(n, gallery_row[path]) for n, path in enumerate(protocol.queries)]
            similarity[tuple(np.asarray(own).T)] = -1.0
        positives: dict[int, set[int]] = {}
        for tag in protocol.tags:
            if tag.value:
                positives.setdefault(query_row[tag.seed], set()).add(gallery_row[tag.candidate])
        k = max(DEFAULT_KS)
        orders = {"torch": None, "worst": False, "best": True}
        tops = {name: self._filtered_top(protocol, similarity, positives, k, first) for name, first in orders.items()}
        seeds, labels, scores = [], [], []
        ranks: dict[str, list[int]] = {name: [] for name in orders}
        for tag in protocol.tags:
            q, g = query_row[tag.seed], gallery_row[tag.candidate]
            seeds.append(tag.seed)
            labels.append(tag.value)
            scores.append(float(similarity[q, g]))  # upstream: the float32 score of the pair in its topk
            for name in orders:
                ranks[name].append(candidate_rank(tops[name][q], g))
        metrics = vsd_metrics(seeds, labels, ranks["torch"], scores, DEFAULT_KS,
                              tie_ranks=(ranks["worst"], ranks["best"])).as_dict()
        metrics["num_skipped_tags"] = protocol.skipped_tags
        gallery = np.asarray(protocol.gallery, dtype=object)
        neighbours = {path: ([str(g) for g in gallery[tops["torch"][q]]], similarity[q, tops["torch"][q]].tolist())
                      for q, path in enumerate(protocol.queries)}
        return metrics, vsd_units(seeds, labels, ranks["torch"], scores, DEFAULT_KS, variant=protocol.name,
                                  candidates=[tag.candidate for tag in protocol.tags], neighbours=neighbours)

    def _filtered_top(self, protocol: Protocol, similarity: np.ndarray, positives: Mapping[int, set[int]], k: int,
                      positives_first: bool | None) -> list[np.ndarray]:
        """Each seed's gallery rows after the metadata-field and unique-id filters, best first, at most k.

        ``positives_first=None`` ranks as upstream does (``torch.topk`` over the whole float32 row, its
        own order for tied scores); ``False``/``True`` order each group of equal scores with the seed's
        positive-tagged candidates last/first: the worst and the best HR and MRR that ties allow.
        """
        product = np.array([self.by_path[p].product_id for p in protocol.gallery], dtype=object)
        field = None
        if self.metadata_field is not None:
            field = np.array([self.by_path[p].entry[self.metadata_field] for p in protocol.gallery], dtype=object)
        ranked_rows = topk_order(similarity) if positives_first is None else None
        top = []
        for q, path in enumerate(protocol.queries):
            if ranked_rows is not None:
                ranked = ranked_rows[q]
            else:
                tagged = np.zeros(len(protocol.gallery), dtype=bool)
                tagged[list(positives.get(q, ()))] = True
                ranked = np.lexsort((~tagged if positives_first else tagged, -similarity[q]))
            seed = self.by_path[path]
            if field is not None:
                ranked = ranked[field[ranked] == seed.entry[self.metadata_field]]
            top.append(unique_product_topk(ranked, product, seed.product_id, k))
        return top


def cosine_matrix(queries: np.ndarray, gallery: np.ndarray, use_gpu: bool | None = None) -> np.ndarray:
    """Upstream's ``cosine_similarity``: float32 rows divided by their torch norms, then ``torch.mm``.

    The same float32 arithmetic as vsd-benchmark/vsd ``evaluation/metrics.py``, so that scores tie,
    and ties break, where upstream's do. (Upstream multiplies the whole query set by the gallery;
    vsbench multiplies the seeds only, and a BLAS may round a product of other shapes differently
    in the last bit: on such near-ties the reported tie range still covers upstream's value.)
    """
    import torch

    device = "cuda" if use_gpu and torch.cuda.is_available() else "cpu"
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(device)
    g = torch.from_numpy(np.ascontiguousarray(gallery, dtype=np.float32)).to(device)
    qn, gn = q.norm(p=2, dim=1, keepdim=True), g.norm(p=2, dim=1, keepdim=True)
    if (qn == 0).any() or (gn == 0).any():
        raise ValueError("a feature row is all zeros, which has no cosine (upstream divides by zero)")
    return torch.mm(q / qn, (g / gn).t()).cpu().numpy()


def topk_order(similarity: np.ndarray) -> np.ndarray:
    """Each row's gallery indices by ``torch.topk(row, n, largest=True)``, upstream's order for ties."""
    import torch

    matrix = torch.from_numpy(np.ascontiguousarray(similarity, dtype=np.float32))
    return torch.topk(matrix, matrix.shape[1], dim=1, largest=True).indices.numpy()


def load_vsd(root: Path, **options: Any) -> VsdBenchmark:
    """Options: ``protocol`` ("closed" | "wild" | "both"), ``tags`` (one protocol's tag file),
    ``metadata`` ("metadata.json"), ``images`` (folder the metadata paths are relative to; root),
    ``id_freq_threshold`` (1), ``crop_bbox`` (False), ``crop_dir`` ("crops_bbox"),
    ``use_all_data`` (True), ``metadata_field`` (None)."""
    return VsdBenchmark(Path(root), **options)
