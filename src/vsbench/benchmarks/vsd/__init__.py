"""VSD, fashion visual-similarity discovery on DeepFashion (y8ubj/vsd): its metrics, adapter and
generator. ``SPEC`` registers it; nothing here is imported until it is used."""

from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(
    name="vsd",
    title="VSD fashion similarity (closed catalog, in the wild): HR@k, MRR@k, ROC-AUC, PR-AUC",
    loader="vsbench.benchmarks.vsd.adapter:load_vsd",
    generator="vsbench.benchmarks.vsd.synth:generate_vsd",
    tasks=("closed catalog", "in the wild"),
    metrics=("hr_at_5", "hr_at_9", "mrr_at_5", "mrr_at_9", "roc_auc", "pr_auc"),
)
