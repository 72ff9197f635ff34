"""The one place that names the container images every component runs in.

Set ``VSBENCH_IMAGE_REGISTRY`` when compiling to point the pipelines at your registry; the tag is
the package version, so an image and the code compiled against it always match.
"""

from __future__ import annotations

import os

from vsbench import __version__

REGISTRY = os.environ.get("VSBENCH_IMAGE_REGISTRY", "ghcr.io/vsbench")
TAG = __version__
CPU_IMAGE = f"{REGISTRY}/vsbench-cpu:{TAG}"
GPU_IMAGE = f"{REGISTRY}/vsbench-cuda:{TAG}"

HOST_VENV = "host venv"


def running_image() -> dict[str, str]:
    """The image this process runs in, for manifests and MLflow tags: ``{"image", "image_id"}``.

    The images set ``VSBENCH_IMAGE`` to their own name; the container runner adds the image id
    (``VSBENCH_IMAGE_ID``), which a pod on a cluster cannot see (its pod status holds it). A step
    outside any image reports "host venv".
    """
    name = os.environ.get("VSBENCH_IMAGE", "").strip()
    if not name:
        return {"image": HOST_VENV, "image_id": ""}
    return {"image": name, "image_id": os.environ.get("VSBENCH_IMAGE_ID", "").strip()}
