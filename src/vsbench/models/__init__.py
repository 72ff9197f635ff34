"""Registry of embedders: name -> builder + its own preprocessing (see :mod:`vsbench.models.registry`).

The names below are loaded on first use (PEP 562), not when the package is imported: the registry
imports torch, and :mod:`vsbench.models.choices` (the options' declared values, checked before a run
starts) must be importable without it, which a package ``__init__`` importing the registry forbids.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Embedder", "PrecomputedFeatures", "Preprocessing", "available_models", "build_model",
           "register_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vsbench.models import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'vsbench.models' has no attribute {name!r}")
