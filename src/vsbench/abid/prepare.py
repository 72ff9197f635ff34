"""Split and task metadata for the ABID challenge, in the challenge's exact file formats.

This reproduces ``random_split.py``, ``make_metadata.py``, ``make_counting_data.py`` and
``make_obj_verification_data.py`` of silverbottlep/abid_challenge, with these deliberate
differences (each also in docs/abid.md):

* **Seeded.** Upstream shuffles with an unseeded RNG; here every random choice comes from one
  ``numpy.random.default_rng(seed)`` in a fixed order, so the same inputs and seed give
  byte-identical files.
* **Split eligibility.** Upstream draws the split among ids that have a metadata file, even when
  the image is missing (such a bin then enters the counting files with quantity 0 and no
  picture). Here an id is eligible only when both its image and a valid metadata file exist.
  The validation size is ``round(val_fraction * eligible)``, rounding halves up (Python 2's rule).
* **Negative questions.** Upstream picks a random asin for a negative question without checking
  that the bin does not hold it, so some "no" answers are wrong. Here the asin is redrawn until
  it is absent from the bin, from the asins that appear in at least one training image.
* **One bin counts once.** When a bin lists the same asin under two keys, ``instances.json``
  counts the bin once in ``repeat`` and ``bin_list`` (upstream appended it twice); quantities add.
* **Quantity verification.** No public generator exists for ``obj_num_verification_val.json``:
  each (validation bin, asin with training images) becomes a positive (ask the true quantity) or
  a negative (ask another quantity, uniform over ``1..max(5, true + 1)``) with probability 1/2;
  then equal numbers of each are sampled.

Malformed metadata never stops the step: the file is reported with its id and the reason, and
the bin is treated as having no metadata (as upstream treats a missing file).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence, Set
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.abid.coverage import MODERATE_MAX_QUANTITY, explain_all, warning_line
from vsbench.abid.ids import IMAGES_DIR, METADATA_DIR, parse_name
from vsbench.io.inputs import InputError, WordedInputError, read_json
from vsbench.io.locks import writing_lock
from vsbench.io.progress import progress_iter
from vsbench.io.storage import atomic_write_chunks, atomic_write_json, is_temporary

REPORT_NAME = "prepare_report.json"
DEFAULT_MAX_PER_CLASS = 20_000


@dataclass(frozen=True, slots=True)
class BinItem:
    """One asin of one bin (entries with the same asin under different keys merged).

    Slotted, with interned strings (:func:`bin_items`): full ABID holds ~1.3 M of these at once.
    """

    asin: str
    quantity: int
    name: str


@dataclass(frozen=True)
class Problem:
    bin_id: int
    file: str
    reason: str


@dataclass
class PrepareSummary:
    """What ``prepare`` read and wrote; every count names what it counts (issue 18: ``ids`` was the
    largest id, read as a count). Ids are bin ids; two spellings of one id count once."""

    data: str
    out: str
    seed: int
    max_id: int = 0  # the largest bin id seen: metadata.json has this many entries
    distinct_ids: int = 0  # bin ids with an image or a metadata file (or both)
    ids_with_image: int = 0
    ids_with_metadata: int = 0  # ids with a metadata file, valid or not
    eligible: int = 0  # bins with an image and a valid metadata file: the ones split
    train: int = 0  # bins in random_train.txt
    val: int = 0  # bins in random_val.txt
    distinct_asins: int = 0  # asins in instances.json
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    empty_files: list[dict[str, str]] = field(default_factory=list)  # file, reason, needed
    warning: str = ""  # one line naming every empty task file, as the CLI and the step print it
    problems: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The counts printed by the CLI and logged as MLflow metrics, in this order.
PREPARE_COUNTS = ("max_id", "distinct_ids", "ids_with_image", "ids_with_metadata", "eligible", "train", "val",
                  "distinct_asins")

# Names of PrepareSummary counts before issue 18, as they appear in older prepare_report.json files
# and manifests: read_counts() maps them to today's names.
RENAMED_COUNTS = {"ids": "max_id", "images": "ids_with_image", "metadata_files": "ids_with_metadata",
                  "instances": "distinct_asins"}


def tasks_dataset(tasks: Path) -> tuple[str, str, str] | None:
    """(name, digest, location) of a folder of task files, from its prepare report; None without one.

    The digest covers every task file's sha256 (as prepare wrote them), so two runs on the same split
    and questions show the same dataset in MLflow, wherever the folder lies."""
    try:
        report = json.loads((tasks / REPORT_NAME).read_text(encoding="utf-8"))
        files = report["files"]
        lines = "".join(f"{name}\0{files[name]['sha256']}\n" for name in sorted(files))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return "abid-tasks", hashlib.sha256(lines.encode()).hexdigest(), str(tasks.resolve())


# The task files each reader of a --tasks folder needs (the training's identity names the same ones).
TASK_FILES_READ = {
    "counting": ("counting_train.json", "counting_val.json"),
    "siamese": ("obj_verification_train.json", "obj_verification_val.json", "metadata.json", "random_train.txt"),
    "quantity": ("obj_num_verification_val.json", "metadata.json", "random_train.txt", "counting_val.json"),
    "score": ("counting_val.json", "obj_verification_val.json", "obj_num_verification_val.json"),
}


def require_task_files(tasks: Path, reader: str, option: str = "--tasks") -> None:
    """Refuse, in one line saying how to make them, a task folder without the files ``reader``
    reads (a folder that does not exist, an empty one, the images folder given by mistake): a bare
    "counting_train.json: file not found" did not say that `abid prepare` writes them."""
    missing = [name for name in TASK_FILES_READ[reader] if not (tasks / name).is_file()]
    if not missing:
        return
    if not tasks.exists():
        what = "no such folder"
    elif not tasks.is_dir():
        what = "not a folder"
    elif not (tasks / REPORT_NAME).is_file() and len(missing) == len(TASK_FILES_READ[reader]):
        what = "holds no ABID task files"
    else:
        what = f"has no {missing[0]}" + (f" (nor {len(missing) - 1} more task files)" if len(missing) > 1 else "")
    raise WordedInputError(f"{option} {tasks}: {what}; write the task files with `vsbench abid prepare --data DATA "
                           f"--out {tasks}` (DATA: the folder holding bin-images/ and metadata/)")


def read_counts(report: dict[str, Any]) -> dict[str, Any]:
    """A prepare report (today's or one written before issue 18) with today's count names."""
    return {RENAMED_COUNTS.get(key, key): value for key, value in report.items()}


def round_half_up(value: float) -> int:
    """Python 2's ``round``: halves go away from zero (upstream's split size used it)."""
    return math.floor(value + 0.5)


def scan_ids(directory: Path, kind: str) -> dict[int, Path]:
    """Map bin id -> file for ``<digits>.<ext>`` names; both spellings of one id count once."""
    found: dict[int, Path] = {}
    if not directory.is_dir():
        return found
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if is_temporary(entry.name) or not entry.is_file():
            continue
        bin_id = parse_name(entry.name, kind)  # type: ignore[arg-type]
        if bin_id is not None:
            found.setdefault(bin_id, Path(entry.path))
    return found


def load_metadata(path: Path, bin_id: int) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Parse and check one metadata file; None (with problems) when it cannot be used."""
    name = f"{METADATA_DIR}/{path.name}"
    try:
        raw = read_json(path)
    except InputError as exc:  # too large, not UTF-8, not JSON, unreadable: a listed problem, never a stop
        return None, [Problem(bin_id, name, f"malformed JSON: {str(exc).removeprefix(f'{path}: ')}")]
    if not isinstance(raw, dict):
        return None, [Problem(bin_id, name, "top level is not an object")]
    quantity = raw.get("EXPECTED_QUANTITY")
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 0:
        return None, [Problem(bin_id, name, f"EXPECTED_QUANTITY is {quantity!r}, not a count")]
    if not isinstance(raw.get("BIN_FCSKU_DATA"), dict):
        return None, [Problem(bin_id, name, "BIN_FCSKU_DATA is missing or not an object")]
    return raw, []


def bin_items(raw: dict[str, Any], bin_id: int, file: str) -> tuple[list[BinItem], list[Problem]]:
    """The distinct asins of a bin in file order, using each entry's ``asin`` field (not its key)."""
    merged: dict[str, list[Any]] = {}
    problems: list[Problem] = []
    for key, entry in raw["BIN_FCSKU_DATA"].items():
        asin = entry.get("asin") if isinstance(entry, dict) else None
        if not isinstance(asin, str) or not asin:
            problems.append(Problem(bin_id, file, f"entry {key!r} has no asin; skipped"))
            continue
        quantity = entry.get("quantity")
        if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
            problems.append(Problem(bin_id, file, f"entry {key!r} quantity {quantity!r}; counted as 1"))
            quantity = 1
        name = entry.get("name") if isinstance(entry.get("name"), str) else ""
        if asin in merged:
            merged[asin][0] += quantity
        else:
            merged[asin] = [quantity, name]
    # One string object per distinct asin and name across all bins: a popular product's name would
    # otherwise be held once per bin that lists it.
    return [BinItem(sys.intern(asin), q, sys.intern(n)) for asin, (q, n) in merged.items()], problems


class AbidTasks:
    """Everything derived from metadata and a split; the writers below only serialize it.

    ``quantities[idx]`` is bin ``idx + 1``'s ``EXPECTED_QUANTITY`` (0 without usable metadata);
    the raw metadata itself is not kept: ``metadata.json`` is written while the files are read.
    """

    def __init__(self, quantities: Sequence[int], items: list[list[BinItem]]) -> None:
        self.quantities = quantities
        self.items = items
        self.n = len(quantities)
        self.instances = self._build_instances()

    def quantity(self, idx: int) -> int:
        return self.quantities[idx]

    def _build_instances(self) -> dict[str, dict[str, Any]]:
        instances: dict[str, dict[str, Any]] = {}
        for idx in range(self.n):
            if self.quantity(idx) <= 0:
                continue
            for item in self.items[idx]:
                entry = instances.get(item.asin)
                if entry is None:
                    instances[item.asin] = {"repeat": 1, "quantity": item.quantity, "name": item.name,
                                            "bin_list": [idx]}
                else:
                    entry["repeat"] += 1
                    entry["quantity"] += item.quantity
                    entry["bin_list"].append(idx)
        return instances

    def counting(self, split: list[int], hard: bool) -> list[list[int]]:
        rows = [[idx, self.quantity(idx)] for idx in split]
        return rows if hard else [row for row in rows if row[1] < 6]

    def candidates(self, split: list[int], hard: bool) -> np.ndarray:
        mask = np.zeros(self.n, dtype=bool)
        for idx in split:
            quantity = self.quantity(idx)
            if quantity > 0 and (hard or quantity <= MODERATE_MAX_QUANTITY):
                mask[idx] = True
        return mask

    def _targets(self, asin: str, train_mask: np.ndarray, idx: int) -> list[int]:
        return [t for t in self.instances[asin]["bin_list"] if train_mask[t] and t != idx]

    def verification_train(self, train_mask: np.ndarray) -> list[list[Any]]:
        rows: list[list[Any]] = []
        for idx in np.flatnonzero(train_mask).tolist():
            objects = []
            for item in self.items[idx]:
                targets = self._targets(item.asin, train_mask, idx)
                if len(targets) > 1:
                    objects.append([item.asin, targets])
            if objects:
                rows.append([idx, objects])
        return rows

    def verification_val(
        self, train_mask: np.ndarray, val_mask: np.ndarray, rng: np.random.Generator, max_per_class: int
    ) -> list[list[Any]]:
        positives: list[list[Any]] = []
        for idx in np.flatnonzero(val_mask).tolist():
            for item in self.items[idx]:
                targets = self._targets(item.asin, train_mask, idx)
                if targets:
                    positives.append([idx, item.asin, 1, targets])
        negatives = self._negatives(train_mask, val_mask, rng)
        return _balanced_sample(positives, negatives, rng, max_per_class)

    def _negatives(self, train_mask: np.ndarray, val_mask: np.ndarray, rng: np.random.Generator) -> list[list[Any]]:
        pool = [asin for asin, inst in self.instances.items() if any(train_mask[t] for t in inst["bin_list"])]
        negatives: list[list[Any]] = []
        for idx in np.flatnonzero(val_mask).tolist():
            present = {item.asin for item in self.items[idx]}
            asin = draw_absent(pool, present, rng)
            if asin is not None:
                negatives.append([idx, asin, 0, self._targets(asin, train_mask, idx)])
        return negatives

    def quantity_verification_val(
        self, train_mask: np.ndarray, val_mask: np.ndarray, rng: np.random.Generator, max_per_class: int
    ) -> list[list[Any]]:
        positives: list[list[Any]] = []
        negatives: list[list[Any]] = []
        for idx in np.flatnonzero(val_mask).tolist():
            for item in self.items[idx]:
                targets = self._targets(item.asin, train_mask, idx)
                if not targets:
                    continue
                if rng.random() < 0.5:
                    positives.append([idx, item.asin, 1, item.quantity, item.quantity, targets])
                else:
                    choices = [q for q in range(1, max(MODERATE_MAX_QUANTITY, item.quantity + 1) + 1)
                               if q != item.quantity]
                    asked = int(choices[int(rng.integers(len(choices)))])
                    negatives.append([idx, item.asin, 0, item.quantity, asked, targets])
        return _balanced_sample(positives, negatives, rng, max_per_class)


def draw_absent(pool: Sequence[str], present: Set[str], rng: np.random.Generator, tries: int = 64) -> str | None:
    """A uniformly drawn asin of ``pool`` that is not in ``present`` (None when none exists)."""
    if not pool:
        return None
    for _ in range(tries):
        asin = pool[int(rng.integers(len(pool)))]
        if asin not in present:
            return asin
    remaining = [asin for asin in pool if asin not in present]
    return remaining[int(rng.integers(len(remaining)))] if remaining else None


def _balanced_sample(
    positives: list[list[Any]], negatives: list[list[Any]], rng: np.random.Generator, max_per_class: int
) -> list[list[Any]]:
    """Equal numbers of each class (as upstream's 20,000 + 20,000), shuffled together."""
    k = min(max_per_class, len(positives), len(negatives))
    chosen = [positives[i] for i in rng.permutation(len(positives))[:k]]
    chosen += [negatives[i] for i in rng.permutation(len(negatives))[:k]]
    return [chosen[i] for i in rng.permutation(len(chosen))]


def split_ids(eligible: Iterable[int], rng: np.random.Generator, val_fraction: float) -> tuple[list[int], list[int]]:
    """Random train/val split of 1-based ids; both lists ascending."""
    ids = sorted(eligible)
    n_val = min(len(ids), round_half_up(val_fraction * len(ids)))
    shuffled = [ids[i] for i in rng.permutation(len(ids))]
    val = sorted(shuffled[:n_val])
    val_set = set(val)
    return [i for i in ids if i not in val_set], val


def _dumps(obj: Any) -> str:
    """Upstream's ``json.dump`` formatting: default separators, ASCII escapes."""
    return json.dumps(obj)


CHUNK_PIECES = 4096  # top-level elements joined into one write


def json_chunks(content: list[Any] | dict[str, Any]) -> Iterator[str]:
    """``_dumps(content)`` in pieces, element by element, so the whole text never sits in memory.

    Joining the elements' own dumps with ``", "`` (and ``": "`` after a key) is exactly what
    ``json.dumps`` writes with its default separators, so the bytes are the same.
    """
    pieces = ((f"{_dumps(key)}: {_dumps(value)}" for key, value in content.items()) if isinstance(content, dict)
              else (_dumps(item) for item in content))
    yield from _joined(pieces, "{" if isinstance(content, dict) else "[", "}" if isinstance(content, dict) else "]")


def _joined(pieces: Iterable[str], opening: str, closing: str) -> Iterator[str]:
    batch: list[str] = []
    first = True
    for piece in pieces:
        batch.append(piece)
        if len(batch) == CHUNK_PIECES:
            yield (opening if first else ", ") + ", ".join(batch)
            first, batch = False, []
    if batch:
        yield (opening if first else ", ") + ", ".join(batch)
    elif first:
        yield opening
    yield closing


def _write_output(path: Path, content: list[Any] | dict[str, Any]) -> dict[str, Any]:
    """Write one split (``.txt``: an id a line) or task file; its entry count and sha256."""
    chunks = iter(["".join(f"{i}\n" for i in content)]) if path.suffix == ".txt" else json_chunks(content)
    return {"entries": len(content), "sha256": _HashedWriter(path).write(chunks)}


class _HashedWriter:
    """Writes text chunks atomically to a file and keeps their sha256 and the entry count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sha256 = hashlib.sha256()

    def write(self, chunks: Iterable[str]) -> str:
        def encoded() -> Iterator[bytes]:
            for chunk in chunks:
                data = chunk.encode("utf-8")
                self.sha256.update(data)
                yield data

        atomic_write_chunks(self.path, encoded())
        return self.sha256.hexdigest()


def prepare_abid(
    data: Path,
    out: Path,
    *,
    seed: int = 0,
    val_fraction: float = 0.1,
    max_per_class: int = DEFAULT_MAX_PER_CLASS,
    progress: bool = True,
) -> PrepareSummary:
    """Write the challenge's split and task files for the dataset under ``data`` into ``out``.

    Every file is written, even with 0 entries; each empty one is listed in the summary's
    ``empty_files`` with the reason and the size that would fill it (:mod:`vsbench.abid.coverage`).
    It holds ``out`` as one of its writers (:func:`vsbench.io.locks.writing_lock`): a training reading
    the task files stops it, in one line.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    images = scan_ids(data / IMAGES_DIR, "image")
    meta_files = scan_ids(data / METADATA_DIR, "metadata")
    if not images and not meta_files:
        raise FileNotFoundError(f"no ABID images or metadata under {data} (expected {IMAGES_DIR}/ and {METADATA_DIR}/)")
    # As one of the task folder's writers: no training reads the task files while they change (issue 46).
    with writing_lock(out, what=f"the task files' folder {out}"):
        return _write_tasks(data, out, images, meta_files, seed=seed, val_fraction=val_fraction,
                            max_per_class=max_per_class, progress=progress)


def _write_tasks(data: Path, out: Path, images: dict[int, Path], meta_files: dict[int, Path], *, seed: int,
                 val_fraction: float, max_per_class: int, progress: bool) -> PrepareSummary:
    """:func:`prepare_abid`'s work, once the inputs are found and the folder is held."""

    n = max([*images, *meta_files])
    summary = PrepareSummary(data=str(data), out=str(out), seed=seed, max_id=n,
                             distinct_ids=len(set(images) | set(meta_files)), ids_with_image=len(images),
                             ids_with_metadata=len(meta_files))

    quantities = [0] * n
    items: list[list[BinItem]] = [[] for _ in range(n)]
    eligible_mask = [False] * n
    problems: list[Problem] = []

    def metadata_entries() -> Iterator[str]:
        """``metadata.json``'s entries in bin order, read once from the files; fills the lists above."""
        next_id = 1
        for bin_id, path in progress_iter(sorted(meta_files.items()), total=len(meta_files), desc="metadata",
                                          unit="file", disable=not progress):
            raw, found = load_metadata(path, bin_id)
            problems.extend(found)
            if raw is not None and bin_id not in images:
                problems.append(Problem(bin_id, f"{METADATA_DIR}/{path.name}", "no image for this metadata; left out"))
                raw = None
            if raw is not None:
                bin_list, found = bin_items(raw, bin_id, f"{METADATA_DIR}/{path.name}")
                problems.extend(found)
                quantities[bin_id - 1] = int(raw["EXPECTED_QUANTITY"])
                items[bin_id - 1] = bin_list
                eligible_mask[bin_id - 1] = True
            yield from ("{}" for _ in range(bin_id - next_id))
            yield _dumps(raw) if raw is not None else "{}"
            next_id = bin_id + 1
        yield from ("{}" for _ in range(n + 1 - next_id))

    metadata_sha256 = _HashedWriter(out / "metadata.json").write(_joined(metadata_entries(), "[", "]"))
    for bin_id in sorted(set(images) - set(meta_files)):
        problems.append(Problem(bin_id, f"{IMAGES_DIR}/{images[bin_id].name}", "no metadata for this image; left out"))

    rng = np.random.default_rng(seed)
    eligible = [i + 1 for i in range(n) if eligible_mask[i]]
    train_ids, val_ids = split_ids(eligible, rng, val_fraction)
    train = [i - 1 for i in train_ids]
    val = [i - 1 for i in val_ids]
    tasks = AbidTasks(quantities, items)

    summary.files["random_train.txt"] = _write_output(out / "random_train.txt", train_ids)
    summary.files["random_val.txt"] = _write_output(out / "random_val.txt", val_ids)
    summary.files["metadata.json"] = {"entries": n, "sha256": metadata_sha256}
    summary.files["instances.json"] = _write_output(out / "instances.json", tasks.instances)
    # Each task file is made, written and dropped before the next (the random draws keep their order),
    # so at most one of them is in memory.
    for hard, suffix in ((False, ""), (True, "_hard")):
        summary.files[f"counting_train{suffix}.json"] = _write_output(
            out / f"counting_train{suffix}.json", tasks.counting(train, hard))
        summary.files[f"counting_val{suffix}.json"] = _write_output(
            out / f"counting_val{suffix}.json", tasks.counting(val, hard))
        train_mask, val_mask = tasks.candidates(train, hard), tasks.candidates(val, hard)
        summary.files[f"obj_verification_train{suffix}.json"] = _write_output(
            out / f"obj_verification_train{suffix}.json", tasks.verification_train(train_mask))
        summary.files[f"obj_verification_val{suffix}.json"] = _write_output(
            out / f"obj_verification_val{suffix}.json",
            tasks.verification_val(train_mask, val_mask, rng, max_per_class))
        if not hard:
            summary.files["obj_num_verification_val.json"] = _write_output(
                out / "obj_num_verification_val.json",
                tasks.quantity_verification_val(train_mask, val_mask, rng, max_per_class))
    summary.eligible, summary.train, summary.val = len(eligible), len(train_ids), len(val_ids)
    summary.distinct_asins = len(tasks.instances)
    counts = {name: info["entries"] for name, info in summary.files.items()}
    empty = explain_all(counts, tasks, train, val, val_fraction=val_fraction)
    summary.empty_files, summary.warning = [asdict(item) for item in empty], warning_line(empty)
    summary.problems = [asdict(p) for p in problems]
    atomic_write_json(out / REPORT_NAME, summary.as_dict())
    return summary
