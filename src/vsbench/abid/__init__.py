"""Amazon Bin Image Dataset: download, task files, resize, baselines, scoring, its generator, and ABID
as an embedding gallery (``SPEC``, the benchmark ``abid_embeddings``)."""

from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(
    name="abid_embeddings",
    title="ABID as a gallery: object verification by embedding similarity, ASIN retrieval mAP",
    loader="vsbench.abid.gallery:load_abid_embeddings",
    aliases=("abid-embeddings", "abid_gallery"),
    tasks=("object verification", "asin retrieval"),
    metrics=("verification_accuracy", "asin_retrieval_map"),
)
