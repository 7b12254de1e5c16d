"""Bar charts of ``asgard bench apps`` like the Asgard paper's Figures 4-7 (matplotlib, Agg).

* ``perf_per_dollar.png`` -- Perf/$ per app per backend (Figs 4a/5a)
* ``e2e_latency.png`` -- E2E latency per app per backend (Figs 4b/5b)
* ``instance_what_if.png`` -- the Cassandra runs priced on i3/c5/m5.large (Figs 6-7)

Bars are medians, error bars span min..max over the repetitions.
"""
from __future__ import annotations

from pathlib import Path

BACKEND_COLORS = {
    "cassandra": "#1f77b4", "cassandra_tuned": "#2ca02c", "redis": "#d62728", "s3": "#ff7f0e",
    "s3_stock": "#ffbb78", "local": "#7f7f7f", "fs_stock": "#c7c7c7",
}
ORDER = ("cassandra", "cassandra_tuned", "redis", "s3", "s3_stock", "local", "fs_stock")
#: the paper's order of the applications (Figure 4 is video analytics, Figure 5 LightGBM)
APP_ORDER = ("video_analytics", "lightgbm_forest", "word_count")
#: hatched: measured as a floor, not deployable between Lambda functions (see apps_summary.NOT_DEPLOYABLE)
FLOOR = ("local", "fs_stock")


def _bars(ax, labels, stats, colors, ylabel, title, hatched=()):
    med = [s["median"] or 0.0 for s in stats]
    lo = [max((s["median"] or 0.0) - (s["min"] if s["min"] is not None else 0.0), 0.0) for s in stats]
    hi = [max((s["max"] if s["max"] is not None else 0.0) - (s["median"] or 0.0), 0.0) for s in stats]
    x = range(len(labels))
    bars = ax.bar(x, med, yerr=[lo, hi], capsize=4, color=colors, edgecolor="black", linewidth=0.5)
    for bar, label in zip(bars, labels):
        if label in hatched:
            bar.set_hatch("//")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def _per_app(summary: dict, metric: str, ylabel: str, title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = sorted({c["app"] for c in summary["cells"]},
                  key=lambda a: (APP_ORDER.index(a) if a in APP_ORDER else 99, a))
    fig, axes = plt.subplots(1, max(len(apps), 1), figsize=(4.2 * max(len(apps), 1), 3.8), squeeze=False)
    for ax, app in zip(axes[0], apps):
        cells = sorted((c for c in summary["cells"] if c["app"] == app),
                       key=lambda c: ORDER.index(c["backend"]) if c["backend"] in ORDER else 99)
        _bars(ax, [c["backend"] for c in cells], [c[metric] for c in cells],
              [BACKEND_COLORS.get(c["backend"], "#999999") for c in cells], ylabel, app, hatched=FLOOR)
    if any(c["backend"] in FLOOR for c in summary["cells"]):
        title += "; hatched: local files, a floor (not passable between Lambda functions)"
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _what_if(summary: dict, path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in summary["cells"] if "what_if" in c]
    if not cells:
        return None
    fig, axes = plt.subplots(1, len(cells), figsize=(3.6 * len(cells), 3.6), squeeze=False)
    palette = ["#1f77b4", "#9467bd", "#8c564b", "#e377c2"]
    for ax, c in zip(axes[0], cells):
        insts = list(c["what_if"])
        _bars(ax, insts, [c["what_if"][i] for i in insts], palette[: len(insts)], r"Perf/\$ (1 / (s x \$))",
              f"{c['app']}\n{c['backend']}")
    fig.suptitle("Cassandra priced on each EC2 instance (measured latency)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(summary: dict, out: str | Path) -> list[Path]:
    out = Path(out)
    paths = [
        _per_app(summary, "perf_per_usd", r"Perf/\$ (1 / (s x \$))", r"Perf/\$ per backend (higher is better)",
                 out / "perf_per_dollar.png"),
        _per_app(summary, "e2e_s", "E2E latency (s)", "End-to-end latency (lower is better)", out / "e2e_latency.png"),
    ]
    w = _what_if(summary, out / "instance_what_if.png")
    if w is not None:
        paths.append(w)
    return paths
