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
