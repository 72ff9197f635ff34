"""Copydays (CD10K with distractors, SSCD's ``copydays_eval.py``): its metrics, adapter and generator.
``SPEC`` registers it; nothing here is imported until it is used."""

from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(
    name="copydays",
    title="Copydays with distractors (SSCD protocol): strong mAP and overall uAP",
    loader="vsbench.benchmarks.copydays.adapter:load_copydays",
    generator="vsbench.benchmarks.copydays.synth:generate_copydays",
    aliases=("cd10k",),
    tasks=("copy detection: find each attacked copy's original among distractors",),
    metrics=("strong_map", "overall_uap"),
)
