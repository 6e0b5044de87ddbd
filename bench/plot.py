"""Plots of the committed benchmark records: one PNG per JSON under docs/benchmarks/.

    python bench/plot.py              every docs/benchmarks/*.json -> the same name with .png
    python bench/plot.py FILE.json... just those

Each chart is a horizontal grouped bar chart of "share of copy speed" per workload (the time
of a plain copy, or clone() on CPU, of the op's minimal bytes divided by the op's time; 100%
= as fast as copying): scanops beside torch eager and torch.compile where the record has them,
with a vertical line at 100%.

The JSON is read generically: a top-level object with metadata (device, torch, ...: shown in
the title) and "rows", a list of objects with "workload" and any keys ending in "_share"
(scanops_share, eager_share, compile_share, ...; NaN or missing = not measured, no bar). Rows
with a "threads" key (CPU records measured at several thread counts) get one subplot per
thread count. Needs matplotlib (requirements-tools.txt); draws with the Agg back end (no
display needed).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "docs" / "benchmarks"

# Known series: label and colour; any other "<name>_share" key gets its name and a cycle colour.
SERIES = {
    "scanops": ("scanops", "#1f77b4"),
    "eager": ("torch eager", "#ff7f0e"),
    "compile": ("torch.compile", "#2ca02c"),
    "clone": ("scanops, of clone()", "#9ecae1"),
}
GROUP_KEYS = ("threads",)  # one subplot per distinct value


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _share_keys(rows: list[dict]) -> list[str]:
    keys: list[str] = []
    for row in rows:
        for k in row:
            if k.endswith("_share") and k not in keys:
                keys.append(k)
    # scanops first, then the known series, then the rest in order of appearance
    known = [f"{name}_share" for name in SERIES]
    return sorted(keys, key=lambda k: (known.index(k) if k in known else len(known),
                                       keys.index(k)))


def _reference(rows: list[dict]) -> str:
    """What 100% means: 'floor' for the CPU records that give a floor and the share of
    clone() beside it (bench_cpu.py since the chunked floor), 'clone' when the rows time
    clone() only, else 'copy'."""
    if any("floor_ms" in row and "clone_share" in row for row in rows):
        return "floor"
    if any(any(k.startswith("clone") for k in row) for row in rows):
        return "clone"
    return "copy"


def _labels(rows: list[dict]) -> list[str]:
    names = [str(r.get("workload", f"row {i}")) for i, r in enumerate(rows)]
    labels = []
    for name, row in zip(names, rows):
        if names.count(name) > 1:  # tell repeated workloads apart by shape / dtype
            extra = [str(tuple(row["shape"])) if "shape" in row else "",
                     str(row.get("dtype", "")).replace("torch.", "")]
            name = f"{name} {' '.join(e for e in extra if e)}".strip()
        labels.append(name)
    return labels


def _title(data: dict, path: Path, width: int) -> str:
    meta = [f"{k}: {v}" for k, v in data.items()
            if k != "rows" and isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    lines = textwrap.wrap(", ".join(meta), width=width) if meta else []
    return "\n".join([path.stem] + lines[:4] + (["..."] if len(lines) > 4 else []))


def _groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    for key in GROUP_KEYS:
        if any(key in r for r in rows):
            values: list = []
            for r in rows:
                if r.get(key) not in values:
                    values.append(r.get(key))
            return [(f"{key}: {v}", [r for r in rows if r.get(key) == v]) for v in values]
    return [("", rows)]


def plot(path: Path, out: Path | None = None) -> Path:
    data = json.loads(path.read_text())  # Python's json reads NaN
    if isinstance(data, list):
        data = {"rows": data}
    rows = [r for r in data.get("rows", []) if isinstance(r, dict)]
    if not rows:
        raise ValueError(f"{path}: no rows")
    # Series with no measured value in the record (NaN or missing everywhere) get no bars and
    # no legend entry.
    keys = [k for k in _share_keys(rows) if any(_is_number(r.get(k)) for r in rows)]
    if not keys:
        raise ValueError(f"{path}: no *_share values in the rows")
    reference = _reference(rows)
    groups = _groups(rows)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    # One column of bars per group (thread count); rows share the y axis when every group has
    # the same workloads.
    n_rows_max = max(len(g) for _, g in groups)
    same_rows = len({tuple(_labels(g)) for _, g in groups}) == 1
    bar_h = 0.8 / len(keys)
    fig_h = 1.6 + 0.22 * n_rows_max * max(len(keys), 2)
    fig_w = 3.5 + 6.0 * len(groups) if same_rows else 9.5 * len(groups)
    fig, axes = plt.subplots(1, len(groups), figsize=(fig_w, fig_h), squeeze=False,
                             sharey=same_rows)
    axes = axes.T  # axes[i, 0]: group i
    xmax = 1.0
    for gi, (ax, (group_title, grows)) in enumerate(zip(axes[:, 0], groups)):
        labels = _labels(grows)
        for j, key in enumerate(keys):
            name = key[: -len("_share")]
            label, colour = SERIES.get(name, (name, cycle[(len(SERIES) + j) % len(cycle)]))
            ys, xs = [], []
            for i, row in enumerate(grows):
                v = row.get(key)
                if _is_number(v):  # NaN / missing: not measured, no bar
                    ys.append(i + (j - (len(keys) - 1) / 2) * bar_h)
                    xs.append(100.0 * v)
            xmax = max([xmax * 100.0] + xs) / 100.0
            bars = ax.barh(ys, xs, height=bar_h * 0.92, color=colour, label=label)
            ax.bar_label(bars, labels=[f"{x:.0f}%" if x >= 10 else f"{x:.1f}%" for x in xs],
                         padding=2, fontsize=7)
        ax.axvline(100.0, color="black", linewidth=1.0, linestyle="--")
        if gi == 0 or not same_rows:
            ax.set_yticks(range(len(grows)), labels)
        ax.set_ylim(len(grows) - 0.5, -0.5)  # first row on top
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        if group_title:
            ax.set_title(group_title, fontsize=10, loc="left")
        extra = "\nlight bars: clone() time / op time (issue 12's reference)" if reference == "floor" else ""
        ax.set_xlabel(f"share of {reference} speed (%)\n{reference} time of the same bytes / op "
                      f"time; dashed: 100% = {reference} speed{extra}", fontsize=9)
    for ax in axes[:, 0]:
        ax.set_xlim(0, max(110.0, 100.0 * xmax * 1.12))
    title = _title(data, path, width=int(fig_w * 11))
    head = 0.25 + 0.2 * (title.count("\n") + 1)  # inches above the plots: title, then legend
    fig.set_size_inches(fig_w, fig_h + head)
    fig_h += head
    fig.suptitle(title, fontsize=11, y=1.0 - 0.1 / fig_h, va="top")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 1.0 - (head - 0.05) / fig_h),
               ncol=len(keys), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1.0 - head / fig_h))
    out = out or path.with_suffix(".png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path,
                        help=f"benchmark JSON files (default: {BENCH_DIR}/*.json)")
    args = parser.parse_args(argv)
    files = args.files or sorted(BENCH_DIR.glob("*.json"))
    if not files:
        print(f"no benchmark JSON under {BENCH_DIR}", file=sys.stderr)
        return 1
    for f in files:
        print(f"{f} -> {plot(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
