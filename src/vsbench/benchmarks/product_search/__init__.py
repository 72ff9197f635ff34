"""Language-assisted product search (Amazon 2022): its readers, metrics (mAP), adapter and generator.
``SPEC`` registers it; nothing here is imported until it is used."""

from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(
    name="product_search",
    title="Language-assisted product search: mAP of the annotated candidates (128-d submissions or images)",
    loader="vsbench.benchmarks.product_search.adapter:load_product_search",
    generator="vsbench.benchmarks.product_search.synth:generate_product_search",
    aliases=("product-search",),
    tasks=("rank each query's candidates",),
    metrics=("map",),
    score_command="product-search",
)
