"""DISC2021 copy detection (SSCD's ``disc_eval.py``): its reader, metrics (isc2021's uAP), adapter
and generator. ``SPEC`` registers it; nothing here is imported until it is used."""

from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(
    name="disc",
    title="DISC2021 copy detection (SSCD protocol): uAP, accuracy at 1, recall at precision 0.9",
    loader="vsbench.benchmarks.disc.adapter:load_disc",
    generator="vsbench.benchmarks.disc.synth:generate_disc",
    aliases=("copy_detection", "copy-detection", "disc2021"),
    tasks=("copy detection: which reference, if any, each query copies",),
    metrics=("uap", "accuracy_at_1", "recall_at_p90"),
    score_command="copy-detection",
    datasets={"skimage-copydetect": "vsbench.benchmarks.disc.synth:generate_skimage_copydetect"},
)
