"""Central finite differences for the gradient tests."""

import numpy as np


def central_diff(f, x, h=1e-6):
    """Gradient of the scalar function f at x by central differences, O(h^2) accurate."""
    x = np.asarray(x, dtype=np.float64)
    g = np.empty_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = h
        g.flat[j] = (f(x + e) - f(x - e)) / (2 * h)
    return g
