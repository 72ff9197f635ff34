"""HPatches-style patch-pair classification: its result-file reader, metrics, adapter and generator.
``SPEC`` registers it; nothing here is imported until it is used."""

from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(
    name="patch_pairs",
    title="HPatches-style patch pairs: ROC AUC (balanced) and PR AP (imbalanced), mean PR AP",
    loader="vsbench.benchmarks.patch_pairs.adapter:load_patch_pairs",
    generator="vsbench.benchmarks.patch_pairs.synth:generate_patch_pairs",
    aliases=("patch-pairs", "pairs", "hpatches"),
    tasks=("patch verification: same 3-d point or not, easy/hard x diffseq/sameseq",),
    metrics=("mean_pr_ap", "roc_auc", "pr_ap"),
    score_command="pairs",
    split_field="variant",
    headline_split="mean",
)
