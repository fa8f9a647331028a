"""Figures of a run: per-segment histograms drawn without pyplot."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
"""What an artifact file name slca derives from a caller's name may hold."""


def to_numpy(array: Any) -> np.ndarray:
    if hasattr(array, "detach"):  # torch tensor, without importing torch here
        array = array.detach().to("cpu").float().numpy()
    return np.asarray(array)


def histogram_figure(values: np.ndarray, title: str, bins: int, path: Path) -> None:
    """A PNG histogram drawn on an Agg canvas (no pyplot, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    finite = values[np.isfinite(values)]
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    if finite.size:
        axes.hist(finite, bins=bins, color="#3b6ea5")
        axes.axvline(0.0, color="black", linewidth=0.8)
        stats = f"n={finite.size}  mean={finite.mean():.4g}  std={finite.std():.4g}"
    else:
        axes.text(0.5, 0.5, "no finite values", ha="center", va="center")
        stats = "n=0"
    dropped = values.size - finite.size
    if dropped:
        stats += f"  non-finite={dropped}"
    axes.set_title(f"{title}\n{stats}", fontsize=10)
    axes.set_xlabel("value")
    axes.set_ylabel("tokens")
    figure.tight_layout()
    figure.savefig(path, format="png")


def write_histograms(
    values: Mapping[str, Any], title: str, bins: int, out: Path
) -> dict[str, np.ndarray]:
    """Write ``values.npz`` (every array under its segment name) and one
    ``<segment>.png`` per segment into ``out``; returns the flattened arrays.

    ``values`` maps a segment name to an array of any shape; non-finite values are
    kept in the npz and left out of the figure."""
    arrays = {}
    for segment, array in values.items():
        if not isinstance(segment, str) or not SAFE_NAME.match(segment):
            raise ValueError(
                f"histogram segment name {segment!r}: use letters, digits, '_', '.', '-'"
            )
        arrays[segment] = np.asarray(to_numpy(array), dtype=np.float64).reshape(-1)
    if not arrays:
        raise ValueError("log_histograms: no segments given")
    np.savez_compressed(out / "values.npz", **arrays)
    for segment, array in arrays.items():
        histogram_figure(array, f"{segment} — {title}", bins, out / f"{segment}.png")
    return arrays
