"""Components that report what a step sees inside the image (kfp reads a component's source from
its .py file, so they live here rather than in the test module)."""

from kfp import dsl
from kfp.dsl import Artifact, Output

from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def probe(out: Output[Artifact]):
    """Who and where the step is: user, writable places, settings, image. Named with the CUDA
    image, as the training steps are, to show every step runs in the runner's one image."""
    import json
    import os
    from pathlib import Path

    def writable(folder: str) -> bool:
        try:
            (Path(folder) / "probe.txt").write_text("x")
            return True
        except OSError:
            return False

    report = {"uid": os.getuid(), "gid": os.getgid(), "tmp": writable("/tmp"), "home": writable(os.environ["HOME"]),
              "root": writable("/"), "venv": writable("/opt/venv"), "environment": dict(os.environ),
              "pass_root": os.access("/root", os.X_OK), "list_root": os.access("/root", os.R_OK)}
    Path(out.path).write_text(json.dumps(report))


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def write_outside_tmp(path: str):
    """A step that writes where a pod may not: it must fail."""
    from pathlib import Path

    Path(path).write_text("should not be possible")
