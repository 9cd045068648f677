"""Margin screening for the MSVMAv loop written in NumPy (:func:`.linear._run`): the active set
and the semi-variance of the next iterate without a pass over all rows.

A full pass gives the exact margins m_ref at w_ref and the scores zeta = Z v of the unit
direction v of the last step (one pass for both). At a later iterate w = w_ref + alpha v + r
(r orthogonal to v), |m_i(w) - m_ref_i - alpha zeta_i| <= ||z_i|| ||r||: the steps turn slowly,
so ||r|| stays far below ||w - w_ref||. A row whose estimate is farther from theta than that
keeps its side, and only the other rows get their margin recomputed (as the compiled dense
loop does, :func:`._loops._screen`). The semi-variance over A_{k+1} is the quadratic form
over A_k, the set the semi-variance step solved on, corrected by the rows that changed side:

    sum_{A_k} s_i (theta - <w, z_i>)^2 = theta^2 S_A - 2 theta <g, w> + w^T G w

with g = sum_{A_k} s_i z_i and G = sum_{A_k} s_i z_i z_i^T, which is never formed: w is the
normalised sum of the step's solution x and the fixed average-margin step a
(w = c (x + a), c = +-1 / ||x + a||), H x = b with H = P + G / nb, so
G w = c (nb (H x - P x) + G a), and G a follows the changes of A through the changed rows
(O(their non-zeros)). A full pass runs instead when more than :data:`FULL_FRACTION` of the
rows would need their margin, or when the quadratic form loses too many digits to
cancellation. The active sets are those of the full passes (a margin within rounding of theta
could fall on the other side: the recomputed margins are summed in another order); the
semi-variance agrees with them to rounding.
"""

from __future__ import annotations

import numpy as np

from ._loops import SCREEN_FULL_FRACTION

__all__ = ["MarginScreen"]

#: A full pass over the rows replaces the screening when more rows than this fraction would
#: need their margin recomputed (the compiled loop's rule).
FULL_FRACTION = SCREEN_FULL_FRACTION
#: The quadratic form is trusted when it keeps at least this fraction of the size of its terms.
CANCEL = 1e-6


class MarginScreen:
    """Reference margins and the sums that the screened iterations need (see the module
    docstring). ``am``: the fixed average-margin step a of the run."""

    def __init__(self, design, s, am):
        self.design, self.s, self.am = design, s, am
        self.rnorm = np.sqrt(design.sq_row_norms())
        self.zam = design.matvec(am)  # <z_i, a>
        self.Gam = None  # G a for the active set the system solves on next
        self.w_ref = self.m_ref = None

    def full_pass(self, w, v):
        """The exact margins at w (returned), and the scores of the unit direction v of the last
        step in the same pass: the reference of the next screened iterations."""
        nv = float(np.linalg.norm(v))
        self.v = v / nv if nv > 0 else np.zeros_like(v)
        both = self.design.matvec(np.column_stack([w, self.v]))
        self.w_ref, self.m_ref, self.zeta = w.copy(), both[:, 0].copy(), both[:, 1].copy()
        return self.m_ref

    def follow(self, A, changed):
        """G a for the active set A (``changed``: the rows that changed side since the last call,
        None: from scratch)."""
        if self.Gam is None or changed is None:
            self.Gam = self.design.rmatvec(np.where(A, self.s * self.zam, 0.0))
        elif changed.size:
            sign = np.where(A[changed], 1.0, -1.0)
            self.Gam += self.design.rmatvec_at(changed, sign * self.s[changed] * self.zam[changed])

    def step(self, w, theta, A, system, x):
        """(A_{k+1}, sum_{A_{k+1}} s_i (theta - m_i)^2) at w = unit(x + a), from the
        reference margins, the system's state on A = A_k (``system.g``, ``system.Hx`` = H x,
        ``system.P``, ``system.nb``) and the recomputed margins of the rows near theta; None when
        a full pass is due."""
        s, design = self.s, self.design
        dw = w - self.w_ref  # = alpha v + r: |m_i(w) - m_ref_i - alpha zeta_i| <= ||z_i|| ||r||
        alpha = float(dw @ self.v)
        delta = float(np.linalg.norm(dw - alpha * self.v))
        slack = self.rnorm * (delta * (1.0 + 1e-9) + 1e-12 * (1.0 + abs(alpha)) * float(np.linalg.norm(w)))
        gap = self.m_ref + alpha * self.zeta - theta
        near = np.flatnonzero(np.abs(gap) <= slack)
        if near.size > FULL_FRACTION * design.n:
            return None
        quad, size = self._quad(w, theta, A, system, x)
        if not quad >= CANCEL * size:
            return None
        A_new = gap < 0.0
        m_near = design.matvec_at(near, w)
        A_new[near] = m_near < theta
        changed = np.flatnonzero(A_new != A)
        m_ch = design.matvec_at(changed, w)
        short = theta - m_ch
        sign = np.where(A_new[changed], 1.0, -1.0)
        return A_new, quad + float(np.sum(sign * s[changed] * short * short))

    def _quad(self, w, theta, A, system, x):
        """The quadratic form over A_k at w and the sum of its terms' magnitudes."""
        y = x + self.am
        c = float(w @ y) / float(y @ y)
        Gw = c * (system.nb * (system.Hx - system.P * x) + self.Gam)
        S_A = float(self.s[A].sum())
        t1, t2, t3 = theta * theta * S_A, 2.0 * theta * float(system.g @ w), float(w @ Gw)
        return t1 - t2 + t3, abs(t1) + abs(t2) + abs(t3)
