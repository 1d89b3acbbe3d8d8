"""The PNG charts of ``kplane report``, drawn off-screen with matplotlib's Agg canvas.

matplotlib is imported inside the functions so that importing this module needs nothing
beyond the broker's own dependencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Points = list[tuple[float, float]]
Curves = dict[tuple[str, str], Points]
"""Curves keyed by (scenario, plane / metric / statistic), in drawing order."""

SCENARIO_COLORS = {
    "idle": "tab:gray",
    "shared": "tab:red",
    "separated": "tab:blue",
    "cluster-shared": "tab:orange",
    "cluster-separated": "tab:cyan",
}
OTHER_COLORS = ("tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
PLANE_STYLES = {"control": "-", "data": "--", "propagation": ":"}
STAT_STYLES = {"p99": "-", "p50": ":"}
TIME_LABEL = "seconds since scenario start"


def latency_cdf(path: Path, curves: Curves) -> Path:
    """Latency CDF per (scenario, plane): points are (latency ms, fraction), log x axis."""
    fig, (ax,) = _figure(1)
    scenarios = _keys(curves, 0)
    for (scenario, plane), points in curves.items():
        xs, ys = _unzip(points)
        ax.plot(
            xs,
            ys,
            color=_color(scenario, scenarios),
            linestyle=PLANE_STYLES.get(plane, "-."),
            label=f"{scenario} / {plane}",
        )
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    _finish(ax, "Request latency CDF", bool(curves))
    return _save(fig, path)


def latency_over_time(path: Path, curves: Curves) -> Path:
    """Control-plane latency per second, keyed (scenario, "p50" | "p99"), log y axis."""
    fig, (ax,) = _figure(1)
    scenarios = _keys(curves, 0)
    for (scenario, stat), points in curves.items():
        xs, ys = _unzip(points)
        ax.plot(
            xs,
            ys,
            color=_color(scenario, scenarios),
            linestyle=STAT_STYLES.get(stat, "-."),
            marker=".",
            label=f"{scenario} {stat}",
        )
    ax.set_yscale("log")
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("control-plane latency (ms)")
    _finish(ax, "Control-plane latency per second", bool(curves))
    return _save(fig, path)


def queue_size(path: Path, curves: Curves) -> Path:
    """Queue-size samples, one panel per metric, keyed (scenario, metric)."""
    return _panel_chart(path, curves, "Queue size (max per second)", "requests queued")


def throughput(path: Path, curves: Curves) -> Path:
    """Requests per second, one panel per plane, keyed (scenario, plane)."""
    return _panel_chart(path, curves, "Throughput", "requests / s")


def _panel_chart(path: Path, curves: Curves, title: str, ylabel: str) -> Path:
    """A panel per plane or metric (the key's second part), a step line per scenario in it;
    a point (second, value) holds over [second, second + 1)."""
    panels = _keys(curves, 1)
    fig, axes = _figure(max(1, len(panels)))
    scenarios = _keys(curves, 0)
    for ax, panel in zip(axes, panels, strict=False):
        for (scenario, key), points in curves.items():
            if key == panel:
                xs, ys = _unzip([*points, (points[-1][0] + 1, points[-1][1])])
                ax.plot(
                    xs,
                    ys,
                    color=_color(scenario, scenarios),
                    drawstyle="steps-post",
                    label=scenario,
                )
        ax.set_ylabel(ylabel)
        _finish(ax, f"{title}: {panel}", True)
    if not panels:
        _finish(axes[0], title, False)
    axes[-1].set_xlabel(TIME_LABEL)
    return _save(fig, path)


def _figure(rows: int) -> tuple[Figure, list[Axes]]:
    """A figure of ``rows`` stacked axes sharing the x axis."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 1.2 + 3.0 * rows), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False, sharex=True)[:, 0]
    return fig, list(axes)


def _finish(ax: Axes, title: str, has_data: bool) -> None:
    """Title, grid and legend, or a "no data" note on an empty chart."""
    ax.set_title(title)
    if not has_data:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, format="png", dpi=100)
    return path


def _keys(curves: Curves, index: int) -> list[str]:
    """The distinct values of one part of the curve keys, in order of appearance."""
    return list(dict.fromkeys(key[index] for key in curves))


def _color(scenario: str, scenarios: Sequence[str]) -> str:
    """A fixed colour for the known scenarios, a stable one for the others."""
    if scenario in SCENARIO_COLORS:
        return SCENARIO_COLORS[scenario]
    others = [s for s in scenarios if s not in SCENARIO_COLORS]
    return OTHER_COLORS[others.index(scenario) % len(OTHER_COLORS)]


def _unzip(points: Points) -> tuple[list[float], list[float]]:
    return [x for x, _ in points], [y for _, y in points]
