"""Figures of the experiment reports that work on plain numbers (no experiment objects).

* :func:`plot_critical_difference`: Demšar's critical-difference diagram of average ranks;
* :func:`cliques`: the groups of methods whose average ranks differ by less than the CD (the
  thick bars of the diagram);
* :func:`legend_outside`: one legend for a figure, to the right of its axes (never over data);
* :func:`save_figure`: a figure written atomically as PNG and PDF.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["cliques", "legend_outside", "plot_critical_difference", "save_figure"]


def _ranks_and_names(avg_ranks, names):
    if hasattr(avg_ranks, "items"):
        if names is not None:
            raise ValueError("give names only with a sequence of average ranks, not with a mapping.")
        names, ranks = zip(*avg_ranks.items()) if avg_ranks else ((), ())
    else:
        ranks = tuple(avg_ranks)
        names = tuple(str(i) for i in range(len(ranks))) if names is None else tuple(names)
    ranks = np.asarray(ranks, dtype=np.float64)
    if len(names) != ranks.size:
        raise ValueError(f"{ranks.size} average ranks but {len(names)} names.")
    if ranks.size < 2:
        raise ValueError("a critical-difference diagram needs at least 2 methods.")
    if not np.all(np.isfinite(ranks)):
        raise ValueError("average ranks must be finite.")
    return [str(n) for n in names], ranks


def cliques(avg_ranks, cd: float) -> list[tuple[int, ...]]:
    """Maximal groups of methods not significantly different (rank range < ``cd``).

    Methods are sorted by average rank; a group is a run of consecutive methods whose first
    and last ranks differ by less than ``cd``, and groups contained in another are dropped.
    Groups of one method are not returned.

    Parameters
    ----------
    avg_ranks : sequence of float
    cd : float
        Critical difference (e.g. :func:`margindist.experiments.stats.nemenyi_cd`).

    Returns
    -------
    list of tuple of int
        Indices into ``avg_ranks`` of each group, best rank first.
    """
    r = np.asarray(avg_ranks, dtype=np.float64)
    order = np.argsort(r, kind="stable")
    out, last_end = [], -1
    for i in range(order.size):
        j = i
        while j + 1 < order.size and r[order[j + 1]] - r[order[i]] < cd:
            j += 1
        if j > i and j > last_end:
            out.append(tuple(int(x) for x in order[i:j + 1]))
            last_end = j
    return out


def plot_critical_difference(avg_ranks, cd: float | None, ax=None, *, names=None, title=None):
    """Critical-difference diagram of average ranks (Demšar 2006, Fig. 1(a)).

    An axis of ranks 1..k with the best rank (1) on the right; each method is joined to its
    average rank by an elbow line, with its name and rank beside it (the better half on the
    right, the other half on the left); a bar of length CD above the axis; and thick bars
    joining the groups of methods whose ranks differ by less than CD (not significantly
    different under the Nemenyi test, see :func:`cliques`).

    Parameters
    ----------
    avg_ranks : mapping name -> average rank, or sequence of average ranks (with ``names``)
        Rank 1 is the best.
    cd : float or None
        Critical difference; None draws the ranks only (no CD bar, no groups).
    ax : matplotlib Axes, optional
        Drawn into; otherwise a new ``matplotlib.figure.Figure`` (no pyplot state).
    names : sequence of str, optional
        Method names for a sequence of ranks (default: "0", "1", ...).
    title : str, optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    names, r = _ranks_and_names(avg_ranks, names)
    k = r.size
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6.4, 1.3 + 0.3 * (k + 1) / 2))
        ax = fig.subplots()
    lo, hi = 1.0, float(max(k, np.ceil(r.max())))
    ax.set_xlim(hi + 0.4, lo - 0.4)  # inverted: rank 1 on the right
    order = [int(i) for i in np.argsort(r, kind="stable")]  # best first
    n_right = (k + 1) // 2
    right = order[:n_right]  # best first: the shortest drop for the best method
    left = order[n_right:][::-1]  # worst first
    row = 0.3
    depth = (max(len(right), len(left)) + 0.6) * row
    ax.set_ylim(depth, -0.7)
    ax.axis("off")
    ax.plot([lo, hi], [0, 0], color="k", linewidth=1.0)
    for t in range(int(lo), int(hi) + 1):
        ax.plot([t, t], [0, -0.07], color="k", linewidth=1.0)
        ax.text(t, -0.1, str(t), ha="center", va="bottom", fontsize="small")
    for t in np.arange(lo + 0.5, hi, 1.0):
        ax.plot([t, t], [0, -0.035], color="k", linewidth=0.6)
    for side, x_end, ha in ((right, lo - 0.3, "left"), (left, hi + 0.3, "right")):
        for i, m in enumerate(side):
            y = (i + 1) * row
            ax.plot([r[m], r[m], x_end], [0, y, y], color="k", linewidth=0.8)
            ax.text(x_end, y, f" {names[m]} ({r[m]:.2f}) ", ha=ha, va="center", fontsize="small")
    if cd is not None and np.isfinite(cd) and cd > 0:
        ax.plot([hi, hi - cd], [-0.45, -0.45], color="k", linewidth=1.5)
        for x in (hi, hi - cd):
            ax.plot([x, x], [-0.5, -0.4], color="k", linewidth=1.5)
        ax.text(hi - cd / 2, -0.5, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize="small")
        for g, group in enumerate(cliques(r, cd)):
            y = 0.1 + 0.07 * g
            ax.plot([r[group[0]] + 0.03, r[group[-1]] - 0.03], [y, y], color="k", linewidth=3.0,
                    solid_capstyle="butt")
    if title:
        ax.set_title(title, fontsize="medium")
    return ax


def legend_outside(fig, axes, **kw):
    """One legend for ``fig`` to the right of its axes (outside the data), from ``axes``' handles.

    Legends already drawn on the axes are removed; handles with the same label appear once.
    Returns the legend, or None when there is nothing to show.
    """
    axes = list(np.atleast_1d(axes))
    seen, handles, labels = set(), [], []
    for ax in axes:
        old = ax.get_legend()
        if old is not None:
            old.remove()
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen and not lab.startswith("_"):
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    if not handles:
        return None
    kw.setdefault("fontsize", "small")
    kw.setdefault("frameon", False)
    return fig.legend(handles, labels, loc="outside right upper", **kw)


def save_figure(fig, path, dpi: int = 150) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` and ``<stem>.pdf`` beside ``path`` (atomically).

    Returns the two paths.
    """
    path = Path(path)
    out = []
    for ext in ("png", "pdf"):
        target = path.with_suffix("." + ext)
        tmp = target.with_name(f".{target.name}.tmp")
        fig.savefig(tmp, dpi=dpi, format=ext, bbox_inches="tight")
        os.replace(tmp, target)
        out.append(target)
    return out
