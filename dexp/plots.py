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


def plot_privacy_frontier(
    points: list[dict[str, Any]], path: Path, trials: int, n_agents: int
) -> None:
    """Two panels: the votes-only hit rate against the local failure probability (eta; beta for DP-MASE)
    and against the sample complexity; each series with its papers' figure dashed; the public
    baselines (the published answer, a uniform guess) grey."""
    fig, axes = plt.subplots(1, 2, figsize=(12.8, 4.8), sharey=True)
    series = list(dict.fromkeys(p["series"] for p in points))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, label in enumerate(series):
        rows = sorted((p for p in points if p["series"] == label), key=lambda p: p["level"])
        color = palette[i % len(palette)]
        ys = [p["votes_only"]["mean"] for p in rows]
        yerr = [
            [y - p["votes_only"]["ci95"][0] for p, y in zip(rows, ys, strict=True)],
            [p["votes_only"]["ci95"][1] - y for p, y in zip(rows, ys, strict=True)],
        ]
        for ax, xs in (
            (axes[0], [p["level"] for p in rows]),
            (axes[1], [p["sample_complexity"]["mean"] for p in rows]),
        ):
            ax.errorbar(
                xs, ys, yerr=yerr, marker="o", markersize=4, capsize=3, color=color, label=label
            )
            ax.plot(
                xs,
                [p["papers_privacy"] for p in rows],
                linestyle="--",
                color=color,
                alpha=0.7,
                label=f"{label}: papers' figure",
            )
    baseline = sum(p["baseline"]["mean"] for p in points) / len(points)
    uniform = sum(p["baselines"]["uniform"]["mean"] for p in points) / len(points)
    for ax in axes:
        ax.axhline(baseline, color="grey", linewidth=1, label="published answer (baseline)")
        ax.axhline(uniform, color="grey", linestyle=":", linewidth=1, label="uniform guess")
        ax.set_ylim(0, 1.05)
        ax.grid(True, alpha=0.3)
    axes[0].set_xlabel("local failure probability: eta (DE, CE), beta (DP-MASE)")
    axes[1].set_xlabel("sample complexity (activations)")
    axes[1].set_xscale("log")
    axes[0].set_ylabel("hit rate: eps-optimal arm named from one agent's votes")
    axes[1].legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(
        f"Privacy frontier, Problem 1, N = {n_agents}: strongest votes-only adversary, "
        f"{trials} trials per point, 95% CI"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
