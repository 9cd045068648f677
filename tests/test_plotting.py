import matplotlib.pyplot as plt
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, LinearSVC

import margindist
from margindist import MarginDistributionDisplay, plot_margin_cdf


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[::4], y[::4]
    return StandardScaler().fit_transform(X), y


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _legend_outside(ax):
    """The legend's box and the axes' box do not overlap (display coordinates)."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    leg = ax.get_legend().get_window_extent(renderer)
    box = ax.get_window_extent(renderer)
    return leg.x0 >= box.x1 or leg.x1 <= box.x0 or leg.y0 >= box.y1 or leg.y1 <= box.y0


def _curve_points(line):
    x, y = line.get_data()
    return np.asarray(x, dtype=float), np.asarray(y, dtype=float)


def test_four_kinds_of_models_on_one_axis(data, tmp_path):
    X, y = data
    models = {
        "LinearSVC": LinearSVC().fit(X, y),
        "SVC rbf": SVC(kernel="rbf").fit(X, y),
        "scaled LinearSVC": make_pipeline(StandardScaler(), LinearSVC()).fit(X, y),
        "ODM": margindist.ODM().fit(X, y),
    }
    d = None
    for name, est in models.items():
        d = MarginDistributionDisplay.from_estimator(est, X, y, name=name, ax=None if d is None else d.ax_)
    ax = d.ax_
    assert d.figure_ is ax.figure
    curves = [line for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    assert len(curves) == 4
    # every curve is the empirical CDF of that model's margins
    for line, est in zip(curves, models.values()):
        x, cdf = _curve_points(line)
        expected = np.sort(margindist.estimator_margins(est, X, y))
        np.testing.assert_allclose(x, expected)
        np.testing.assert_allclose(cdf, np.arange(1, len(y) + 1) / len(y))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [lab.split(" (mean")[0] for lab in labels] == list(models)
    assert _legend_outside(ax)
    # only one zero-margin reference line however many curves
    assert sum(line.get_gid() == "margindist-zero-margin" for line in ax.get_lines()) == 1
    for ext in ("pdf", "svg", "png"):
        out = tmp_path / f"margins.{ext}"
        d.savefig(out)
        assert out.stat().st_size > 1000
    assert (tmp_path / "margins.pdf").read_bytes()[:4] == b"%PDF"
    assert b"<svg" in (tmp_path / "margins.svg").read_bytes()[:2000]
    assert (tmp_path / "margins.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_display_attributes_and_default_names(data):
    X, y = data
    pipe = make_pipeline(StandardScaler(), LinearSVC()).fit(X, y)
    d = MarginDistributionDisplay.from_estimator(pipe, X, y, show_stats=False, color="red")
    assert d.name == "Pipeline(StandardScaler, LinearSVC)"
    np.testing.assert_allclose(d.margins_, margindist.estimator_margins(pipe, X, y))
    assert d.line_.get_label() == d.name and d.line_.get_color() == "red"
    assert d.ax_.figure is d.figure_
    # re-plot on a new axis under another name
    _, ax = plt.subplots()
    d.plot(ax=ax, name="again")
    assert d.ax_ is ax and d.line_.get_label().startswith("again (mean")


def test_from_predictions(data):
    X, y = data
    svc = LinearSVC().fit(X, y)
    f = svc.decision_function(X)
    d = MarginDistributionDisplay.from_predictions(y, f, norm=2.0, name="svc")
    np.testing.assert_allclose(d.margins_, np.where(y == 1, 1.0, -1.0) * f / 2.0)
    d2 = MarginDistributionDisplay.from_predictions(y, f, pos_label=0, ax=d.ax_)
    np.testing.assert_allclose(d2.margins_, -np.where(y == 1, 1.0, -1.0) * f)
    assert d2.name == "model" and len(d.ax_.get_legend().get_texts()) == 2
    assert _legend_outside(d.ax_)


def test_display_errors(data):
    X, y = data
    rf = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="RandomForestClassifier"):
        MarginDistributionDisplay.from_estimator(rf, X, y)
    with pytest.raises(ValueError, match="NaN"):
        MarginDistributionDisplay(margins=[0.1, np.nan])
    with pytest.raises(ValueError, match="plot"):
        MarginDistributionDisplay(margins=[0.1]).savefig("x.png")


def test_norm_override_in_display(data):
    X, y = data
    svc = SVC(kernel="precomputed").fit(X @ X.T, y)
    d = MarginDistributionDisplay.from_estimator(svc, X @ X.T, y, norm=1.0)
    np.testing.assert_allclose(d.margins_, np.where(y == 1, 1.0, -1.0) * svc.decision_function(X @ X.T))


def test_plot_margin_cdf_takes_scikit_learn_models_legend_outside(data, tmp_path):
    X, y = data
    lin = LinearSVC().fit(X, y)
    pipe = make_pipeline(StandardScaler(), SVC(gamma=0.05)).fit(X, y)
    ax = plot_margin_cdf({"svc": lin, "rbf": pipe, "odm": margindist.ODM().fit(X, y)}, X, y)
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert len(lines) == 3
    np.testing.assert_allclose(_curve_points(lines[1])[0], np.sort(margindist.estimator_margins(pipe, X, y)))
    assert _legend_outside(ax)
    # default labels of estimators in a list
    ax2 = plot_margin_cdf([lin, pipe], X, y, show_stats=False)
    assert [t.get_text() for t in ax2.get_legend().get_texts()] == [
        "LinearSVC",
        "Pipeline(StandardScaler, SVC)",
    ]
    out = tmp_path / "cdf.svg"
    ax.figure.savefig(out, bbox_inches="tight")
    assert out.stat().st_size > 1000
