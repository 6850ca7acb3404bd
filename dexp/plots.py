"""Figures of `dexp reproduce`: a metric against N, one line per series, 95% CI error bars."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

from dexp.experiments import Figure

# Private algorithms solid, the 1-privacy baseline dashed, the 0-privacy baseline dotted.
LINESTYLES = {"independent": "--", "central": ":"}

YLABELS = {
    "sample_complexity": "sample complexity (activations)",
    "messages": "messages (votes or broadcasts)",
}


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def plot_figure(figure: Figure, summary: list[dict[str, Any]], path: Path, trials: int) -> bool:
    """Draw `figure` from summary rows on log-log axes; False (no file) when nothing is drawable.

    Points with a mean of 0 cannot sit on a log axis and are left out (independent agents send
    no messages); a lower CI bound at or below 0 is clipped to the bottom of the axis.
    """
    metric = figure.metric
    panels = []
    for panel in figure.panels:
        lines = []
        for label in panel.series:
            rows = sorted(
                (r for r in summary if r["series"] == label and r[f"{metric}_mean"] > 0),
                key=lambda r: r["n_agents"],
            )
            if rows:
                lines.append((label, rows))
        if lines:
            panels.append((panel, lines))
    if not panels:
        return False

    fig, axes = plt.subplots(
        1, len(panels), figsize=(6.4 * len(panels), 4.8), squeeze=False, sharey=True
    )
    all_n = sorted({r["n_agents"] for r in summary})
    labels = list(dict.fromkeys(label for panel in figure.panels for label in panel.series))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {label: palette[i % len(palette)] for i, label in enumerate(labels)}
    for ax, (panel, lines) in zip(axes[0], panels, strict=True):
        for label, rows in lines:
            xs = [r["n_agents"] for r in rows]
            ys = [r[f"{metric}_mean"] for r in rows]
            low, high = [], []
            for r, y in zip(rows, ys, strict=True):
                lo, hi = r[f"{metric}_ci95_low"], r[f"{metric}_ci95_high"]
                if _finite(lo) and _finite(hi):
                    low.append(y - max(lo, y * 1e-3))
                    high.append(hi - y)
                else:
                    low.append(0.0)
                    high.append(0.0)
            ax.errorbar(
                xs,
                ys,
                yerr=[low, high],
                marker="o",
                markersize=4,
                capsize=3,
                linestyle=LINESTYLES.get(rows[0].get("algorithm", ""), "-"),
                color=colors[label],
                label=label,
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(all_n))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("agents N")
        ax.grid(True, which="both", alpha=0.3)
        if panel.title:
            ax.set_title(panel.title)
        ax.legend(fontsize="small")
    axes[0][0].set_ylabel(YLABELS.get(metric, metric))
    suptitle = figure.title
    if figure.paper:
        suptitle += f" (cf. {figure.paper})"
    fig.suptitle(f"{suptitle}\nmean of {trials} trials, 95% CI")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
