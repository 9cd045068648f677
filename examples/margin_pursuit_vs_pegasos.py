"""
Margin pursuit vs Pegasos: test error and margin distribution against the number of gradients
=============================================================================================

Reproduces the paper's protocol (Holland, AISTATS 2019; see ``docs/experiments.md``) on data
available offline. The paper's own datasets (covertype, MNIST, protein, SIDO) are not, so:

* ``digits``   -- scikit-learn's digits, class 5 vs the rest (d = 64);
* ``letter``   -- letter, H vs K (d = 16; the hardest of the pairs we screened for a linear
  model, about 9 % error for a linear SVM at this sample size);
* ``penbased`` -- pen-based digits, 1 vs 2 (d = 16; about 3 % error).

Each trial draws a balanced training sample of n = 2 m examples with m = min(5 d, 2/3 of the
smaller class), so n <= 10 d as in the paper (digits: 2 x 120; letter, penbased: 2 x 80), and
a balanced test set (every remaining example of the smaller class and as many of the other).
Features are min-max scaled on the training sample (test clipped to [0, 1]). gamma = 1 and the
same lam for every method (default 1e-3); ``--trials`` trials (default 25) with different draws.

Methods, each run for ``--passes`` passes (n stochastic gradients per pass), evaluated after
every pass:

* Pegasos: scikit-learn's ``SGDClassifier(loss="hinge", alpha=lam, learning_rate="invscaling",
  eta0=1/lam, power_t=1)`` -- exactly the step 1/(lam t) -- on [X, 1] without a separate
  intercept, i.e. with the same regularised constant feature as margin pursuit (scikit-learn's
  unpenalised intercept with steps 1/(lam t) is unstable on these small samples), no
  projection;
* MP: ``MarginPursuit(lam=lam, rescale=False)`` (scale fixed at Catoni's S_0);
* MP+rescale: ``MarginPursuit(lam=lam)`` (the default: one data-driven rescaling after the
  first pass).

Recorded per pass: test error, the scale S of margin pursuit (the table's last column: its final
mean over trials; S_0 = sqrt(n / (2 log 100)) before the rescaling) and the statistics of the normalised training margins
y f(x) / ||w|| (``margindist.metrics.margin_stats``; ||w|| without the intercept / constant
feature). Output: a figure (test error; median and 5-95 % band of the training margins), a
Markdown table of the final values (mean +- std over trials), and the numbers as JSON::

    python examples/margin_pursuit_vs_pegasos.py                 # 25 trials (about a minute)
    python examples/margin_pursuit_vs_pegasos.py --trials 3      # quick look
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.linear_model import SGDClassifier  # noqa: E402
from sklearn.preprocessing import MinMaxScaler  # noqa: E402

from margindist.datasets import load_dataset  # noqa: E402
from margindist.metrics import margin_stats, normalized_margins  # noqa: E402
from margindist.models.margin_pursuit import MarginPursuit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("Pegasos", "MP", "MP+rescale")
STATS = ("mean", "std", "q0.05", "q0.5", "q0.95")


def task(name):
    """(X, y in {0, 1}, description) of a binary task."""
    if name == "digits":
        X, y = load_digits(return_X_y=True)
        return X.astype(np.float64), (y == 5).astype(int), "digits 5 vs rest"
    if name == "letter":
        X, y = load_dataset("letter")
        keep = np.isin(y, ["H", "K"])
        return X[keep], (y[keep] == "K").astype(int), "letter H vs K"
    if name == "penbased":
        X, y = load_dataset("penbased")
        keep = np.isin(y, [1, 2])
        return X[keep], (y[keep] == 2).astype(int), "penbased 1 vs 2"
    raise ValueError(name)


def split(y, d, rng):
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    m = min(5 * d, (2 * min(pos.size, neg.size)) // 3)
    tr_p, tr_n = rng.choice(pos, m, replace=False), rng.choice(neg, m, replace=False)
    rest_p, rest_n = np.setdiff1d(pos, tr_p), np.setdiff1d(neg, tr_n)
    k = min(rest_p.size, rest_n.size)
    te = np.r_[rng.choice(rest_p, k, replace=False), rng.choice(rest_n, k, replace=False)]
    return np.r_[tr_p, tr_n], te


def record(f_tr, f_te, ytr, yte, norm, scale=np.nan):
    stats = margin_stats(normalized_margins(f_tr, ytr, norm, pos_label=1))
    err = float(np.mean((f_te > 0).astype(int) != yte))
    return [err] + [stats[k] for k in STATS] + [scale]


def run_trial(X, y, lam, passes, rng, seed):
    tr, te = split(y, X.shape[1], rng)
    sc = MinMaxScaler().fit(X[tr])
    Xtr, Xte = sc.transform(X[tr]), np.clip(sc.transform(X[te]), 0.0, 1.0)
    ytr, yte = y[tr], y[te]
    Xtr1, Xte1 = np.column_stack([Xtr, np.ones(len(tr))]), np.column_stack([Xte, np.ones(len(te))])
    peg = SGDClassifier(loss="hinge", alpha=lam, learning_rate="invscaling", eta0=1.0 / lam, power_t=1.0,
                        fit_intercept=False, random_state=seed)
    mp = MarginPursuit(lam=lam, rescale=False, random_state=seed)
    mpr = MarginPursuit(lam=lam, random_state=seed)
    out = np.empty((len(METHODS), passes, 2 + len(STATS)))  # error, margin stats, scale S
    for p in range(passes):
        peg.partial_fit(Xtr1, ytr, classes=[0, 1])
        w = peg.coef_.ravel()
        out[0, p] = record(Xtr1 @ w, Xte1 @ w, ytr, yte, np.linalg.norm(w[:-1]))
        for j, est in ((1, mp), (2, mpr)):
            est.partial_fit(Xtr, ytr, classes=[0, 1])
            out[j, p] = record(est.decision_function(Xtr), est.decision_function(Xte), ytr, yte,
                               np.linalg.norm(est.coef_), est.scale_)
    return out, len(tr), len(te)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=25)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--tasks", nargs="+", default=["digits", "letter", "penbased"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figure", default=str(ROOT / "docs" / "figures" / "margin_pursuit_vs_pegasos.png"))
    ap.add_argument("--json", default=None, help="write all curves as JSON here")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")

    results = {}
    for name in args.tasks:
        X, y, desc = task(name)
        rng = np.random.default_rng(args.seed)
        runs = []
        for t in range(args.trials):
            out, n_tr, n_te = run_trial(X, y, args.lam, args.passes, rng, args.seed * 1000 + t)
            runs.append(out)
        results[name] = dict(desc=desc, n_train=n_tr, n_test=n_te, d=X.shape[1], curves=np.array(runs))

    # ---------------------------------------------------------------- table
    lines = [f"lam = {args.lam:g}, gamma = 1, {args.trials} trials, {args.passes} passes; final values, "
             "mean +- std over trials; margins: normalised training margins y f(x)/||w||.", "",
             "| task (n train / n test) | method | test error | margin mean | margin std | q0.05 | median | q0.95 | S |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        final = r["curves"][:, :, -1, :]  # trials x methods x (err, stats)
        for j, meth in enumerate(METHODS):
            mu, sd = final[:, j].mean(axis=0), final[:, j].std(axis=0)
            cells = [f"{mu[0]:.4f} +- {sd[0]:.4f}"] + [f"{mu[k]:.3f}" for k in range(1, 1 + len(STATS))]
            cells.append("-" if np.isnan(mu[-1]) else f"{mu[-1]:.3g}")
            lines.append(f"| {r['desc']} ({r['n_train']} / {r['n_test']}) | {meth} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)

    # ---------------------------------------------------------------- figure
    fig, axes = plt.subplots(2, len(results), figsize=(4.6 * len(results), 7.0), squeeze=False)
    colours = dict(zip(METHODS, ("tab:gray", "tab:blue", "tab:red")))
    for c, (name, r) in enumerate(results.items()):
        curves = r["curves"]
        grads = r["n_train"] * np.arange(1, args.passes + 1)
        ax = axes[0, c]
        for j, meth in enumerate(METHODS):
            err = curves[:, j, :, 0]
            mu, se = err.mean(0), err.std(0) / np.sqrt(err.shape[0])
            ax.plot(grads, mu, color=colours[meth], label=meth)
            ax.fill_between(grads, mu - se, mu + se, color=colours[meth], alpha=0.2)
        ax.set_title(r["desc"])
        ax.set_xlabel("number of gradients")
        ax.set_ylabel("test error (mean +- s.e.)")
        ax.legend()
        ax = axes[1, c]
        for j, meth in enumerate(METHODS):
            q05, q50, q95 = (curves[:, j, :, 1 + STATS.index(k)].mean(0) for k in ("q0.05", "q0.5", "q0.95"))
            ax.plot(grads, q50, color=colours[meth], label=f"{meth} median")
            ax.fill_between(grads, q05, q95, color=colours[meth], alpha=0.15)
        ax.set_xlabel("number of gradients")
        ax.set_ylabel("normalised training margin (5 %, 50 %, 95 %)")
    fig.suptitle(f"Margin pursuit vs Pegasos (lam = {args.lam:g}, {args.trials} trials)")
    fig.tight_layout()
    Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    print(f"wrote {args.figure}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {k: dict(v, curves=v["curves"].tolist()) for k, v in results.items()}, indent=None))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
