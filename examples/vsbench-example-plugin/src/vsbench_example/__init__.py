"""vsbench example plugin: the ``colour_match`` benchmark (``SPEC``) and the ``mean_colour`` model.

vsbench reads ``SPEC`` through the ``vsbench.benchmarks`` entry point whenever it lists its
benchmarks, so this module imports nothing but the spec class: the loader and the generator are
``module:function`` references that vsbench imports only when a run or ``vsbench synth`` needs them.
"""

from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(
    name="colour_match",  # the one name: MLflow's `benchmark` param, metric prefixes, pipeline task names
    title="Example plugin: find the other images of an image's colour (solid-colour PNGs)",
    loader="vsbench_example.colour_match:load_colour_match",
    generator="vsbench_example.colour_match:generate_colour_match",
    aliases=("colour-match", "color_match", "color-match"),  # other spellings every command accepts
    tasks=("retrieval: rank every other image by descriptor distance; a hit shares the query's colour",),
    metrics=("top1_accuracy", "mean_rank"),  # what its records report (tests check each is there)
    lower_is_better=("mean_rank",),  # how `vsbench compare` and the regression check rank it
)
