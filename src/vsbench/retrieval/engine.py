"""One similarity engine for every benchmark: embed, index, search, score.

An :class:`Engine` is one run (a :class:`~vsbench.runspec.run.BenchmarkRun` and its output folder) in
one process: it reads the benchmark's native files once, opens the embed step's feature shards once
(memory-mapped, read a slice at a time), and builds the search requests once, whichever of its steps
run. The steps are separable so that a pipeline can fan each out over shards and nodes:

* :meth:`Engine.embed_shard`: shard i of n of every image set of the benchmark;
* :meth:`Engine.index`: build and persist each FAISS index the benchmark's searches need
  (:class:`vsbench.index.plan.SearchRequest`), its references split into ``reference_shards``
  indexes (reused shard by shard when built before for the same inputs), in three stages that a
  pipeline runs as separate tasks: ``train`` (each codec trained once), ``fill`` (one task per
  reference shard, reading its rows in place from the embed step's files) and ``finish``
  (``index.json``; with ``merge_ondisk``, IVF shards merged into one on-disk index first); ``all``
  runs the three here;
* :meth:`Engine.search`: one (query shard, reference shard) task of ``search_shards x reference_shards``,
  or with ``merge_ondisk`` one query shard in the merged index (``search_shards`` tasks);
* :meth:`Engine.score`: merge the tasks' results into each query's global top k and score them with
  the benchmark's own metrics.

:meth:`Engine.evaluate` does index, search and score in memory: same numbers
(tests/unit/test_sharded_search.py). Benchmarks that rank without FAISS (VSD's float32 cosine as its
original, patch pairs, product search) have no index to build or search; their score step evaluates.
The original benchmark's table (``disc_metrics.csv``, ``copydays_metrics.csv``, ...) is written beside
``metrics.json``, which holds the flat records that also go to MLflow and KFP.
"""

from __future__ import annotations

import csv
import io
from functools import cached_property
from pathlib import Path
from typing import Any

from vsbench.benchmarks.base import Benchmark, EvalResult
from vsbench.benchmarks.registry import load_benchmark
from vsbench.index.plan import SearchRequest
from vsbench.index.results import collect, search_merged, search_shard
from vsbench.index.store import build_index, fill_shard, finish_index, train_index
from vsbench.io.features import FeatureSet
from vsbench.io.inputs import read_json
from vsbench.io.storage import atomic_write_json, atomic_write_text
from vsbench.retrieval.origin import check_images, recorded_images
from vsbench.retrieval.shards import embedding_identity, open_embeddings, shard_stem
from vsbench.runspec.run import BenchmarkRun

FEATURES_DIR = "features"
INDEX_DIR = "index"
SEARCH_DIR = "search"
INDEX_MANIFEST = "manifest.json"
INDEX_STAGES = ("all", "train", "fill", "finish")


class Engine:
    """One run's benchmark, features and searches, each loaded once in this process."""

    def __init__(self, run: BenchmarkRun, out: Path, *, model: str = "", bench: Benchmark | None = None,
                 model_options: dict[str, Any] | None = None, seed: int | None = None) -> None:
        if bench is not None:  # read already (the run's checks before any work): not read twice
            self.__dict__["bench"] = bench
        self.run = run
        self.out = Path(out)
        # The model the features must come from: the run's own (a SimilarityRun), or the one a
        # pipeline step names (index, search and score take a BenchmarkRun and the model's name,
        # and the step commands its options and seed where given: None is not checked).
        self.model = getattr(run, "model", "") or model
        self.model_options: dict[str, Any] | None = getattr(run, "model_options", None)
        if self.model_options is None:
            self.model_options = model_options
        self.seed: int | None = getattr(run, "seed", None)
        if self.seed is None:
            self.seed = seed
        self.settings = run.settings()
        self._features: dict[str, FeatureSet] | None = None
        self._networks: dict[str, Any] = {}  # the embedding network, built (and compiled) once per run
        # Shard stem -> the image digest its manifest records, known to be this run's --root's: embedded
        # from it by this engine, or checked against it (vsbench.retrieval.origin): checked once per process.
        self._root_checked: dict[str, str] = {}

    @cached_property
    def bench(self) -> Benchmark:
        """The benchmark's native files, read once."""
        return load_benchmark(self.run.benchmark, Path(self.run.root), **self.run.benchmark_options)

    @property
    def features(self) -> dict[str, FeatureSet]:
        """The features of every image set, read in place from the embed step's shard files
        (memory-mapped; each file verified against its recorded sha256 before its rows are first
        read), opened once. No step merges them into one file: a fill task reads its reference
        shard's rows, a search task its queries, and the gallery passes whole through none."""
        if self._features is None:
            sets = self.bench.image_sets()
            features = open_embeddings(self.out / FEATURES_DIR, list(sets), model=self.model,
                                       model_options=self.model_options, seed=self.seed)
            # Embedded from the images of the --root this step was given (issue 46), not another's.
            check_images(self.out / FEATURES_DIR, sets, self.run.root, checked=self._root_checked)
            self._features = features
        return self._features

    def embedding(self) -> dict[str, Any]:
        """What the features under ``out`` were embedded with (:func:`~vsbench.retrieval.shards.embedding_identity`
        of the first image set; :attr:`features` checks that every set agrees)."""
        return embedding_identity(self.out / FEATURES_DIR, next(iter(self.bench.image_sets())))

    @cached_property
    def requests(self) -> list[SearchRequest]:
        """The benchmark's FAISS searches; none for benchmarks that rank otherwise."""
        ask = getattr(self.bench, "search_requests", None)
        return [] if ask is None else ask(self.features, self.settings)

    def embed_shard(self, model: str, *, shard: int = 0, num_shards: int = 1,
                    model_options: dict[str, Any] | None = None, batch_size: int = 64, device: str = "auto",
                    workers: int | None = None, progress: bool = True, seed: int = 0,
                    compile: str = "auto", decode: str = "auto") -> dict[str, str]:
        """Embed shard ``shard`` of every image set; returns set name -> shard file. ``seed`` draws
        ``{"weights": "random"}`` networks (the same seed, the same network); ``workers`` None: from
        the CPU quota; ``compile``: ``torch.compile`` (auto: on CUDA), paid once for all the sets; ``decode``:
        where the JPEGs are decoded (vsbench.imaging.modes).

        Every image a benchmark lists is part of its number (DISC's uAP, Copydays' mAP, VSD's and the
        pairs' metrics are defined over all of them, and SSCD's and the challenges' own evaluations
        embed every one), so an image that cannot be read is not left out: every set of the shard is
        embedded (the failures listed in each shard's manifest), then :class:`UnreadableImages`
        names them, with their files and reasons. A re-run embeds only what changed."""
        # Deferred: embedding needs torch, and the index, search and score steps of a pipeline (their
        # own processes) do not: they import this module and never embed (tests/unit/test_step_imports.py).
        from vsbench.retrieval.embed import embed_image_set

        written, sets = {}, self.bench.image_sets()
        for set_name, images in sets.items():
            path = embed_image_set(model, images, self.out / FEATURES_DIR, set_name=set_name, shard=shard,
                                   num_shards=num_shards, batch_size=batch_size, device=device, workers=workers,
                                   model_options=model_options, progress=progress, seed=seed, compile=compile,
                                   decode=decode, reuse=self._networks,
                                   max_failure_rate=1.0)  # listed here, all sets at once, not a rate
            written[set_name] = str(path)
        self._features = None  # opened again by the next step
        manifests = {name: Path(path).with_suffix(".json") for name, path in written.items()}
        records = {name: read_json(manifest) for name, manifest in manifests.items()}
        for name, record in records.items():  # its digests were just taken from this root: not taken again
            if (digest := recorded_images(record)) is not None:
                self._root_checked[shard_stem(name, shard, num_shards)] = digest
        failed = [(name, failure) for name, record in records.items() for failure in record.get("failed") or []]
        if failed:
            raise UnreadableImages(self.run.benchmark, failed, sets, sorted({manifests[name] for name, _ in failed}))
        return written

    def open_features(self) -> dict[str, FeatureSet]:
        """Open every image set's embedding shards afresh (after an embed step in this process)."""
        self._features = None
        self.__dict__.pop("requests", None)
        return self.features

    def evaluate(self) -> EvalResult:
        """Search and score the features in this process; writes ``metrics.json`` and the benchmark's CSV."""
        return self._write(self.bench.evaluate(self.features, self.settings))

    def index(self, stage: str = "all", shard: int | None = None) -> dict[str, Any]:
        """Persist every index the benchmark searches (see the module docstring), or one stage of it:
        ``train`` (each codec trained once), ``fill`` with ``shard`` (that reference shard of every
        codec), ``finish`` (``index.json``, after every fill). ``all`` and ``finish`` return (and
        write to ``out/index/manifest.json``) what was built or reused."""
        if stage not in INDEX_STAGES:
            raise ValueError(f"index stage {stage!r}: expected one of {', '.join(INDEX_STAGES)}")
        if (stage == "fill") != (shard is not None):
            raise ValueError("the fill stage takes a reference shard (--fill --shard i), the other stages none")
        self.open_features()
        folder, shards = self.out / INDEX_DIR, self.run.reference_shards
        if stage == "train":
            trained = [{"search": request.name, "codec": codec, "reused": meta["reused"]}
                       for request in self.requests for codec in request.codec_list
                       for meta in [train_index(request, folder, codec, reference_shards=shards,
                                                use_gpu=self.settings.use_gpu)]]
            return {"benchmark": self.run.benchmark, "stage": "train", "reference_shards": shards, "trained": trained}
        if stage == "fill":
            filled = [{"search": request.name, "codec": codec, "shard": shard, "kept": record["kept"],
                       "count": record["count"]}
                      for request in self.requests for codec in request.codec_list
                      for record in [fill_shard(request, folder, codec, shard, reference_shards=shards,
                                                use_gpu=self.settings.use_gpu)]]
            return {"benchmark": self.run.benchmark, "stage": "fill", "shard": shard, "reference_shards": shards,
                    "filled": filled}
        indexes = []
        merge = self.run.merge_ondisk
        for request in self.requests:
            infos = (build_index(request, folder, reference_shards=shards, use_gpu=self.settings.use_gpu,
                                 merge_ondisk=merge)
                     if stage == "all" else
                     [finish_index(request, folder, codec, reference_shards=shards, merge_ondisk=merge)
                      for codec in request.codec_list])
            for info in infos:
                indexes.append({"search": request.name, "folder": str(info.folder), **info.meta})
        manifest: dict[str, Any] = {"benchmark": self.run.benchmark, "reference_shards": shards,
                                    "merge_ondisk": merge, "indexes": indexes}
        if not self.requests:
            manifest["note"] = f"{self.run.benchmark} ranks without a FAISS index (see its module); nothing to build"
        atomic_write_json(self.out / INDEX_DIR / INDEX_MANIFEST, manifest)
        return manifest

    def search(self, task: int = 0) -> dict[str, Any]:
        """Search task ``task`` of ``search_shards x reference_shards``: query shard ``task // reference_shards``
        in reference shard ``task % reference_shards`` of every index; with ``merge_ondisk``, query shard
        ``task`` in the merged on-disk index. Finished results are kept."""
        search_shards, reference_shards = self.run.search_shards, self.run.reference_shards
        merge = self.run.merge_ondisk
        if not 0 <= task < self.run.search_tasks:
            raise ValueError(f"search task {task} does not exist: there are {search_shards} query shard(s) x "
                             f"{1 if merge else reference_shards} "
                             f"{'merged index' if merge else 'reference shard(s)'} = {self.run.search_tasks} tasks")
        query_shard, reference_shard = (task, None) if merge else divmod(task, reference_shards)
        requests = self.requests  # the benchmark's own files first: a wrong --root is named before the index
        self._check_reference_shards()
        written = []
        for request in requests:
            if reference_shard is None:
                written += search_merged(request, self.out / INDEX_DIR, self.out / SEARCH_DIR,
                                         query_shard=query_shard, query_shards=search_shards,
                                         use_gpu=self.settings.use_gpu)
            else:
                written += search_shard(request, self.out / INDEX_DIR, self.out / SEARCH_DIR,
                                        query_shard=query_shard, query_shards=search_shards,
                                        reference_shard=reference_shard, use_gpu=self.settings.use_gpu)
        return {"task": task, "query_shard": query_shard,
                "reference_shard": "merged" if reference_shard is None else reference_shard,
                "search_shards": search_shards, "reference_shards": reference_shards,
                "results": [str(path) for path in written]}

    def score(self) -> EvalResult:
        """Merge every search task's results and score them; writes ``metrics.json`` and the benchmark's CSV.
        A missing or stale task result is an error naming it."""
        if not self.requests:
            return self._write(self.bench.evaluate(self.features, self.settings))
        results = {request.name: collect(request, self.out / INDEX_DIR, self.out / SEARCH_DIR,
                                         query_shards=self.run.search_shards, merged=self.run.merge_ondisk)
                   for request in self.requests}
        return self._write(self.bench.score(self.features, self.settings, results))

    def _check_reference_shards(self) -> None:
        path = self.out / INDEX_DIR / INDEX_MANIFEST
        try:
            manifest = read_json(path)
            built = manifest.get("reference_shards")
        except (OSError, ValueError, AttributeError):
            raise ValueError(f"{path}: no index manifest; run the index step first") from None
        if built != self.run.reference_shards:
            raise ValueError(f"{path}: the index was built with {built} reference shard(s), the search asks for "
                             f"{self.run.reference_shards}; use the same number in both steps")
        if self.run.merge_ondisk and not manifest.get("merge_ondisk"):
            raise ValueError(f"{path}: the index was built without --merge-ondisk, the search asks for the merged "
                             "index; run vsbench similarity index --finish --merge-ondisk, or search without it")

    def _write(self, result: EvalResult) -> EvalResult:
        """``metrics.json`` (the records, each headline metric with its interval, its failure sheet, and
        the unit files) and the benchmark's own CSV (the original's columns: no interval there)."""
        from vsbench.reporting.record_sheets import write_failure_sheets
        from vsbench.stats.records import add_intervals

        result.unit_files = add_intervals(self.run.benchmark, result.records, result.units, self.out)
        # Each record's worst units as pictures beside its unit file (docs/failures.md); never fails the score.
        model = self._model_label()
        write_failure_sheets(self.run.benchmark, result.records, result.unit_files, result.failure_sheet, self.out,
                             model=model)
        atomic_write_json(self.out / "metrics.json", {"benchmark": self.run.benchmark, "records": result.records,
                                                      "units": result.unit_files})
        if result.csv_name:
            rows = result.csv_rows if result.csv_rows is not None else result.records
            atomic_write_text(self.out / result.csv_name, records_to_csv(rows, result.csv_columns))
        return result

    def _model_label(self) -> str:
        """The model as its evaluation run is named (``resnet34-random``), from the embed step's manifests
        (a pipeline's score step is told only the model's name): it leads the failure sheets' titles."""
        from pydantic import ValidationError

        from vsbench.tracking.evaluations import Embedder, readable_label

        try:
            embedder = Embedder.from_features(self.out / FEATURES_DIR, self.model, self.model_options)
        except (ValidationError, ValueError, TypeError):
            return self.model
        return readable_label(embedder.model, embedder.options)


class UnreadableImages(ValueError):
    """Images of the benchmark that could not be embedded (an input error: one line, exit 2). The
    benchmark's number needs every one of them, so the run stops; the line names each image's file
    and reason (the first few; the shard manifests list them all) and the fix."""

    SHOWN = 5

    def __init__(self, benchmark: str, failed: list[tuple[str, dict[str, Any]]], sets: dict[str, Any],
                 manifests: list[Path]) -> None:
        paths = {name: dict(zip(map(str, images.ids), images.paths)) for name, images in sets.items()}
        shown = []
        for name, failure in failed[:self.SHOWN]:
            image_id = str(failure.get("id"))
            where = paths.get(name, {}).get(image_id, "")
            shown.append(f"{name} {image_id} ({where}): {failure.get('reason', 'unreadable')}")
        more = f" and {len(failed) - self.SHOWN} more" if len(failed) > self.SHOWN else ""
        super().__init__(
            f"{len(failed)} image(s) could not be read, and {benchmark}'s scores are defined over every image it "
            f"lists: {'; '.join(shown)}{more} (all listed under 'failed' in {', '.join(map(str, manifests))}). "
            "Fix or replace those files and run again (only what changed is embedded again)")


def records_to_csv(records: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """The original table: columns in the benchmark's own names, matched to the rows' keys as they
    are or, for our MLflow-safe records, lower-cased with '-' as '_' (``accuracy-at-1`` <- ``accuracy_at_1``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        lookup = {key.lower(): value for key, value in record.items()}
        writer.writerow([record[column] if column in record else lookup.get(column.lower().replace("-", "_"), "")
                         for column in columns])
    return buffer.getvalue()
