"""Figures logged to MLflow: training curves, per-class bars, confusion matrices.

Matplotlib with the Agg backend (no display needed in a pod). Each function returns a Figure;
the caller logs it and closes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure


def training_curves(history: Sequence[dict[str, float]], title: str) -> Figure:
    """Loss on the left; train and validation accuracy on the right, per epoch."""
    epochs = [h["epoch"] for h in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, [h["train_loss"] for h in history], marker="o")
    left.set(xlabel="epoch", ylabel="training loss", title=f"{title}: loss")
    right.plot(epochs, [h["train_accuracy"] for h in history], marker="o", label="train")
    right.plot(epochs, [h.get("val_accuracy", np.nan) for h in history], marker="o", label="validation")
    right.set(xlabel="epoch", ylabel="accuracy", title=f"{title}: accuracy", ylim=(0, 1))
    right.legend()
    fig.tight_layout()
    return fig


def per_class_bars(accuracy: np.ndarray, rmse: np.ndarray, counts: np.ndarray, title: str) -> Figure:
    classes = np.arange(len(accuracy))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(classes, np.nan_to_num(accuracy))
    left.set(xlabel="ground-truth quantity", ylabel="accuracy", title=f"{title}: accuracy per class", ylim=(0, 1))
    right.bar(classes, np.nan_to_num(rmse), color="tab:orange")
    right.set(xlabel="ground-truth quantity", ylabel="RMSE", title=f"{title}: RMSE per class")
    for axis in (left, right):
        axis.set_xticks(classes, [f"{c}\n(n={n})" for c, n in zip(classes, counts)])
    fig.tight_layout()
    return fig


def confusion(matrix: np.ndarray, labels: Sequence[str], title: str) -> Figure:
    fig, axis = plt.subplots(figsize=(5 + 0.3 * len(labels), 4 + 0.3 * len(labels)))
    image = axis.imshow(matrix, cmap="Blues")
    axis.set(xticks=range(len(labels)), yticks=range(len(labels)), xticklabels=labels, yticklabels=labels,
             xlabel="predicted", ylabel="ground truth", title=title)
    for (row, col), value in np.ndenumerate(matrix):
        axis.text(col, row, str(value), ha="center", va="center",
                  color="white" if value > matrix.max() / 2 else "black")
    fig.colorbar(image, ax=axis)
    fig.tight_layout()
    return fig


def close(fig: Figure) -> None:
    plt.close(fig)
