"""The generic box-QP dual coordinate descent (margindist.solvers.dcd) against scipy."""

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from margindist.kernels import KernelRowCache, KernelSpec, resolve_kernel
from margindist.solvers.dcd import dcd_kernel, dcd_linear


def _problem(rng, m=40, d=5, two_sided=True, finite_box=False):
    X = rng.normal(size=(m, d))
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    n_var = 2 * m if two_sided else m
    D = rng.uniform(0.1, 2.0, size=n_var)
    p = rng.normal(size=n_var)
    U = rng.uniform(0.2, 1.0, size=n_var) if finite_box else np.full(n_var, np.inf)
    return X, y, n_var, D, p, U


def _dual_objective(Q, D, p, m):
    def f(a):
        g = a[:m] - a[m:] if a.shape[0] == 2 * m else a
        return 0.5 * g @ Q @ g + 0.5 * (D * a) @ a + p @ a

    def grad(a):
        g = a[:m] - a[m:] if a.shape[0] == 2 * m else a
        Qg = Q @ g
        out = D * a + p
        out[:m] += Qg
        if a.shape[0] == 2 * m:
            out[m:] -= Qg
        return out

    return f, grad


def _reference(Q, D, p, U, m):
    f, grad = _dual_objective(Q, D, p, m)
    bounds = [(0.0, None if np.isinf(u) else u) for u in U]
    res = so.minimize(f, np.zeros(D.shape[0]), jac=grad, method="L-BFGS-B", bounds=bounds,
                      options=dict(ftol=1e-15, gtol=1e-12, maxiter=50000, maxcor=50))
    return res.fun, f


@pytest.mark.parametrize("two_sided", [True, False])
@pytest.mark.parametrize("finite_box", [True, False])
def test_linear_matches_scipy(rng, two_sided, finite_box):
    X, y, n_var, D, p, U = _problem(rng, two_sided=two_sided, finite_box=finite_box)
    m = X.shape[0]
    Xh = np.c_[X, np.ones(m)]
    Q = (y[:, None] * (Xh @ Xh.T)) * y[None, :]
    ref, f = _reference(Q, D, p, U, m)
    res = dcd_linear(X, y, D, p, U, n_var=n_var, bias=1.0, tol=1e-10, random_state=0)
    assert res.converged
    assert f(res.a) == pytest.approx(ref, rel=1e-6, abs=1e-9)
    assert f(res.a) <= ref + 1e-9 * max(1.0, abs(ref))
    # w is X^T Y gamma
    np.testing.assert_allclose(res.w, Xh.T @ (y * res.gamma(m)), atol=1e-10)
    assert np.all(res.a >= 0) and np.all(res.a <= U)


def test_kernel_matches_linear_and_scipy(rng):
    X, y, n_var, D, p, U = _problem(rng)
    m = X.shape[0]
    lin = dcd_linear(X, y, D, p, U, n_var=n_var, bias=0.5, tol=1e-11, random_state=0)
    spec = resolve_kernel("linear")
    cache = KernelRowCache(spec, X, max_bytes=3 * 8 * m)  # 3 rows: heavy eviction
    ker = dcd_kernel(y, D, p, U, n_var=n_var, cache=cache, bias=0.5, tol=1e-11, random_state=1)
    assert cache.misses > m  # rows were really recomputed on demand
    np.testing.assert_allclose(ker.a, lin.a, atol=1e-8)
    K = X @ X.T
    full = dcd_kernel(y, D, p, U, n_var=n_var, gram=K, bias=0.5, tol=1e-11, random_state=2)
    np.testing.assert_allclose(full.a, lin.a, atol=1e-8)
    Q = (y[:, None] * (K + 0.25)) * y[None, :]
    np.testing.assert_allclose(full.u, Q @ full.gamma(m), atol=1e-10)
    ref, f = _reference(Q, D, p, U, m)
    assert f(full.a) == pytest.approx(ref, rel=1e-6)


def test_rbf_kernel_cache_sizes_agree(rng):
    X, y, n_var, D, p, U = _problem(rng, m=60)
    spec = resolve_kernel("rbf", X, gamma=0.3)
    small = dcd_kernel(y, D, p, U, n_var=n_var, cache=KernelRowCache(spec, X, max_bytes=1),
                       tol=1e-11, random_state=0)
    big = dcd_kernel(y, D, p, U, n_var=n_var, gram=spec(X), tol=1e-11, random_state=0)
    np.testing.assert_allclose(small.a, big.a, atol=1e-9)


@pytest.mark.parametrize("two_sided,finite_box", [(True, False), (False, True)])
def test_block_sweeps_of_a_small_cache_reach_the_optimum_with_fewer_rows(rng, monkeypatch, two_sided,
                                                                         finite_box):
    """A cache of 60 rows of 300 runs block sweeps (blocks of 44 cached rows): the optimum of
    the full Gram matrix and of scipy, computing far fewer kernel rows than plain epochs
    with the same cache."""
    from margindist.solvers import dcd

    X, y, n_var, D, p, U = _problem(rng, m=300, two_sided=two_sided, finite_box=finite_box)
    m = X.shape[0]
    spec = resolve_kernel("rbf", X, gamma=0.2)
    assert dcd._cache_block(60, m) == 44 and dcd._cache_block(m, m) is None
    K = spec(X)
    full = dcd_kernel(y, D, p, U, n_var=n_var, gram=K, tol=1e-10, random_state=0)
    cache = KernelRowCache(spec, X, max_bytes=60 * 8 * m)
    blocks = dcd_kernel(y, D, p, U, n_var=n_var, cache=cache, tol=1e-10, random_state=0)
    np.testing.assert_allclose(blocks.a, full.a, atol=1e-8)
    np.testing.assert_allclose(blocks.u, full.u, atol=1e-8)
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    ref, f = _reference(Q, D, p, U, m)
    assert f(blocks.a) == pytest.approx(ref, rel=1e-7, abs=1e-9)
    monkeypatch.setattr(dcd, "_cache_block", lambda n_slots, m: None)
    plain_cache = KernelRowCache(spec, X, max_bytes=60 * 8 * m)
    plain = dcd_kernel(y, D, p, U, n_var=n_var, cache=plain_cache, tol=1e-10, random_state=0)
    np.testing.assert_allclose(plain.a, full.a, atol=1e-8)
    assert cache.misses < 0.6 * plain_cache.misses, (cache.misses, plain_cache.misses)


@pytest.mark.parametrize("m,slots,sort", [(300, 60, False), (301, 60, True), (1000, 700, False), (50, 3, False)])
def test_block_sweeps_keep_kv_exact_after_each_sweep(rng, m, slots, sort):
    """Within a block the changes update kv on the block's columns only, and each changed row
    reaches the rest of kv at the block's end: after every sweep u = Q gamma + o exactly, for
    blocks of runs that do not divide m, rows sorted by label (one-class runs), a float32 cache
    and a cache of three rows (blocks of one row); and the run ends at scipy's optimum."""
    X, y, n_var, D, p, U = _problem(rng, m=m)
    if sort:
        order = np.argsort(y, kind="stable")
        X, y = X[order], y[order]
    spec = resolve_kernel("rbf", X, gamma=0.2)
    K = spec(X)
    o = rng.normal(size=m)
    for dtype in (np.float64, np.float32):
        for sweeps in (1, 2, 3):
            cache = KernelRowCache(spec, X, max_bytes=slots * m * np.dtype(dtype).itemsize, dtype=dtype)
            assert cache.state.slots.shape[0] == slots
            res = dcd_kernel(y, D, p, U, n_var=n_var, cache=cache, u0=o, max_iter=sweeps, random_state=1,
                             warn_label=None)
            Kc = np.array([cache.row(i).astype(np.float64) for i in range(m)])  # the values the solver used
            u = y * ((Kc + 1.0) @ (y * res.gamma(m))) + o
            np.testing.assert_allclose(res.u, u, rtol=0, atol=1e-10 * max(1.0, np.abs(u).max()))
    res = dcd_kernel(y, D, p, U, n_var=n_var, cache=KernelRowCache(spec, X, max_bytes=slots * 8 * m), u0=o,
                     tol=1e-9, max_iter=5000, random_state=0)
    assert res.converged
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    ref, f = _reference(Q, D, p + np.concatenate([o, -o]), U, m)  # o^T gamma: +o on alpha, -o on beta
    assert f(res.a) == pytest.approx(ref, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("block,two_sided,finite_box", [(40, True, False), (64, False, True), (520, True, False)])
def test_pulled_block_sweeps_reach_the_optimum(rng, block, two_sided, finite_box):
    """``block_sweeps``: sweeps of pulled blocks (at most _LOCAL_MAX rows: 520 is cut to 512)
    from a dense K, a filled float32 cache and caches of 30 rows (the others computed as the
    blocks need them, nothing evicted but shrunk samples' rows; float32 RBF rows at some
    columns only). After every sweep u = Q gamma + o exactly; the runs,
    with and without shrinking, end at the plain epochs' optimum and scipy's; fewer rows than
    2 * block_sweeps keep the plain epochs, step for step."""
    m = 1100 if block > 100 else 300
    X, y, n_var, D, p, U = _problem(rng, m=m, two_sided=two_sided, finite_box=finite_box)
    spec = resolve_kernel("rbf", X, gamma=0.2)
    K = spec(X)
    o = rng.normal(size=m)
    cache32 = KernelRowCache(spec, X, dtype=np.float32, max_bytes=4 * m * m)
    K32 = cache32.fill().astype(np.float64)
    small = KernelRowCache(spec, X, max_bytes=30 * 8 * m)
    small32 = KernelRowCache(spec, X, dtype=np.float32, max_bytes=30 * 4 * m)  # rows beyond it: compact
    for source, Kc in (({"gram": K}, K), ({"cache": cache32}, K32), ({"cache": small}, K), ({"cache": small32}, K32)):
        for sweeps in (1, 2):
            res = dcd_kernel(y, D, p, U, n_var=n_var, u0=o, max_iter=sweeps, random_state=1, warn_label=None,
                             block_sweeps=block, **source)
            u = y * ((Kc + 1.0) @ (y * res.gamma(m))) + o
            np.testing.assert_allclose(res.u, u, rtol=0, atol=1e-10 * max(1.0, np.abs(u).max()))
    assert small.misses == 30  # the rows beyond the budget were computed, not cached
    kw = dict(n_var=n_var, u0=o, tol=1e-9, max_iter=20000, random_state=0)
    plain = dcd_kernel(y, D, p, U, gram=K, **kw)
    for source in ({"gram": K}, {"cache": KernelRowCache(spec, X, max_bytes=30 * 8 * m)}):
        for shrinking in (True, False):
            res = dcd_kernel(y, D, p, U, block_sweeps=block, shrinking=shrinking, **source, **kw)
            assert res.converged and res.n_iter != plain.n_iter
            np.testing.assert_allclose(res.a, plain.a, atol=1e-7)
    plain32 = dcd_kernel(y, D, p, U, gram=K32, **kw)
    for shrinking in (True, False):
        small32 = KernelRowCache(spec, X, dtype=np.float32, max_bytes=30 * 4 * m)
        res = dcd_kernel(y, D, p, U, block_sweeps=block, shrinking=shrinking, cache=small32, **kw)
        assert res.converged
        np.testing.assert_allclose(res.a, plain32.a, atol=1e-7)
        # shrunk samples' slots took rows that would have been computed in every sweep
        assert (small32.misses > 30) == shrinking
    if m <= 300:
        Q = (y[:, None] * (K + 1.0)) * y[None, :]
        ref, f = _reference(Q, D, p + (np.concatenate([o, -o]) if two_sided else o), U, m)
        assert f(res.a) == pytest.approx(ref, rel=1e-6, abs=1e-8)
    same = dcd_kernel(y, D, p, U, block_sweeps=m // 2, gram=K, **kw)
    assert same.n_iter == plain.n_iter and np.array_equal(same.a, plain.a)


@pytest.mark.parametrize("two_sided,finite_box", [(True, False), (False, True)])
def test_the_final_check_at_the_point_is_the_projected_gradients_spread(rng, two_sided, finite_box):
    """The pulled sweeps' final check (``_kkt_spread``) is max PG - min PG over every variable
    at one point, each PG projected on its box as the coordinate steps take it (NumPy); a fit
    on a partial float32 cache that already holds rows (shrinking, then that check) returns an
    exact u."""
    from margindist.solvers import dcd

    m = 300
    X, y, n_var, D, p, U = _problem(rng, m=m, two_sided=two_sided, finite_box=finite_box)
    K = resolve_kernel("rbf", X, gamma=0.2)(X)
    o = rng.normal(size=m)
    a = rng.uniform(0.0, 0.3, size=n_var)
    a[rng.random(n_var) < 0.3] = 0.0
    if finite_box:
        a = np.minimum(a, U)
        top = rng.random(n_var) < 0.2  # some at the upper bound
        a[top] = U[top]
    g = y * (a[:m] - a[m:]) if two_sided else y * a
    kp = dcd.KernelPath(KernelRowCache.from_gram(K).state, K @ g, np.array([g.sum()]), o, 1.0)
    qp = dcd.BoxQP(y, np.diag(K) + 1.0, D, p, U)
    u = y * ((K + 1.0) @ g) + o
    grad = (np.concatenate([u, -u]) if two_sided else u) + D * a + p
    pg = np.where(a <= 0.0, np.minimum(grad, 0.0), np.where(a >= U, np.maximum(grad, 0.0), grad))
    assert dcd._kkt_spread(kp, qp, a) == pytest.approx(pg.max() - pg.min(), rel=1e-12)
    cache = KernelRowCache(resolve_kernel("rbf", X, gamma=0.2), X, dtype=np.float32, max_bytes=40 * 4 * m)
    K32 = np.array([cache.row(i) for i in range(m)], dtype=np.float64)
    res = dcd_kernel(y, D, p, U, n_var=n_var, u0=o, tol=1e-3, random_state=0, block_sweeps=64, cache=cache)
    assert res.converged
    np.testing.assert_allclose(res.u, y * ((K32 + 1.0) @ (y * res.gamma(m))) + o, rtol=0, atol=1e-10 * np.abs(res.u).max())


def test_a_pulled_block_works_on_exact_products(rng):
    """A pulled block starts from its exact products K[block, :] Y gamma and its square of K;
    inside the block the changes reach the products only through that local matrix. After the
    block's epochs its products equal K[block, :] Y gamma at the new point, and Y gamma is
    current. The shrinking flags mark only variables at a bound whose gradient points out."""
    from margindist.solvers import dcd
    from margindist.solvers._rows import seed_from

    m, nB = 200, 64
    X, y, n_var, D, p, U = _problem(rng, m=m)
    K = resolve_kernel("rbf", X, gamma=0.2)(X)
    cache = KernelRowCache.from_gram(K)
    a = rng.uniform(0.0, 0.3, size=n_var)
    a[rng.random(n_var) < 0.3] = 0.0
    yg = y * (a[:m] - a[m:])
    kp = dcd.KernelPath(cache.state, np.full(m, np.nan), np.array([yg.sum()]), np.zeros(m), 1.0)
    qp = dcd.BoxQP(y, np.diag(K) + 1.0, D, p, U)
    idx = rng.permutation(m)[:nB]
    pw = dcd.PullWork(idx, np.arange(nB), np.empty(nB), np.empty((nB, nB)), np.zeros(nB, dtype=np.bool_), yg.copy(),
                      np.empty((8, m)), np.zeros(8, dtype=np.int64), np.zeros(8))
    dcd._pull(cache.state, idx, nB, pw.yg, pw.kvB, pw.KB, pw.scratch, dcd._support_work(cache.state, nB))
    np.testing.assert_allclose(pw.kvB, K[idx] @ yg, atol=1e-12)
    np.testing.assert_array_equal(pw.KB, K[np.ix_(idx, idx)])
    stats = np.array([-np.inf, np.inf])
    pg_old = np.array([1e-3, -1e-3])
    dcd._pulled_epochs(kp, qp, dcd.DCDOptions(1e-12, 10, True, 8), a, seed_from(0), pw, nB, pg_old, stats)
    yg_new = y * (a[:m] - a[m:])
    assert np.abs(yg_new - yg).max() > 1e-3  # the block's variables moved
    np.testing.assert_allclose(pw.kvB, K[idx] @ yg_new, atol=1e-12)
    np.testing.assert_allclose(pw.yg, yg_new, atol=1e-15)
    assert np.all(yg_new[np.setdiff1d(np.arange(m), idx)] == yg[np.setdiff1d(np.arange(m), idx)])
    assert 0 < pw.shr.sum() < nB
    assert np.all(a[idx[pw.shr]] == 0.0) and np.all(a[m + idx[pw.shr]] == 0.0)


def _rbf32_cache(rng, m, d, n_slots):
    """A float32 RBF row cache (rows computed in float32) of n_slots rows, and its full matrix
    of the values it computes."""
    from margindist.kernels import compute_kernel_row

    X = rng.normal(size=(m, d))
    cache = KernelRowCache(resolve_kernel("rbf", X, gamma=0.3), X, max_bytes=4 * m * n_slots, dtype=np.float32)
    assert cache.state.X32.size and cache.n_slots == n_slots
    K = np.empty((m, m), dtype=np.float32)
    for i in range(m):
        compute_kernel_row(cache.state, i, K[i])
    return cache, K


def test_rows_at_the_support_columns_are_the_rows_values(rng):
    """A float32 RBF row computed at some columns only (any order, across chunks) has the
    values of the whole row there, to the bit."""
    from margindist.kernels import _ROW_CHUNK, rbf32_columns, rbf32_row_at

    m = 2 * _ROW_CHUNK + 37
    cache, K = _rbf32_cache(rng, m, 7, 4)
    for n in (1, 5, _ROW_CHUNK + 3, m):
        cols = rng.permutation(m)[:n]
        XJ = np.empty((7, m + 1), dtype=np.float32)
        rbf32_columns(cache.state, cols, n, XJ)
        out = np.empty(m, dtype=np.float32)
        for i in rng.choice(m, 5):
            rbf32_row_at(cache.state, i, XJ, n, out)
            np.testing.assert_array_equal(out[:n], K[i, cols])


def test_a_pull_computes_rows_outside_the_cache_at_the_support_only(rng):
    """With a cache that holds few rows, a pulled block's rows beyond it are computed at the
    columns where Y gamma is not zero and not held in the cached rows' products vC, and the
    block's own: the products and the block's square are those of the whole rows, and the
    final products over all rows too; vC follows the cached samples' changes."""
    from margindist.solvers import dcd

    m, nB, n_slots = 300, 40, 25
    cache, K = _rbf32_cache(rng, m, 6, n_slots)
    K64 = K.astype(np.float64)
    yg = rng.normal(size=m)
    yg[rng.random(m) < 0.4] = 0.0
    sw = dcd._support_work(cache.state, nB)
    assert sw.XJ.shape == (6, m + 1)
    assert dcd._support_work(_rbf32_cache(rng, 50, 6, 50)[0].state, nB).XJ.size == 0  # every row cached
    scratch = np.empty((8, m), dtype=np.float32)
    for _ in range(6):  # the first blocks fill the cache, the later ones compute compact rows
        idx = rng.permutation(m)[:nB]
        kvB, KB = np.empty(nB), np.empty((nB, nB), dtype=np.float32)
        dcd._pull(cache.state, idx, nB, yg, kvB, KB, scratch, sw)
        np.testing.assert_allclose(kvB, K64[idx] @ yg, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(KB, K[np.ix_(idx, idx)])
        # the block's epochs move some of its samples (to zero, too); the cached ones' part goes into vC
        moved = idx[rng.random(nB) < 0.5]
        yg[moved] = np.where(rng.random(moved.size) < 0.2, 0.0, rng.normal(size=moved.size))
        dcd._hold_cached(cache.state, idx, nB, yg, sw)
        cached = np.flatnonzero(cache.state.slot_of >= 0)
        assert np.all(sw.held[np.setdiff1d(np.arange(m), cached)] == 0.0)
        np.testing.assert_allclose(sw.vC, K64[cached].T @ sw.held[cached], rtol=1e-12, atol=1e-12)
    assert cache.state.counters[3] == n_slots and cache.state.counters[2] == n_slots  # no row evicted
    assert np.count_nonzero(sw.held) > n_slots // 2  # products of computed rows took vC
    assert dcd._split_block(cache.state, idx, nB, sw)[1] > nB // 2  # most of the last block: compact rows
    # a spare slot (a shrunk sample's) takes an uncached row: the sample's part leaves vC
    st = cache.state
    j = int(np.flatnonzero((st.slot_of >= 0) & (sw.held != 0.0))[0])
    i = int(np.flatnonzero(st.slot_of < 0)[0])
    index = np.array([j])
    dcd._spare_slots(st, index, 0, 1, sw)
    slot = st.slot_of[j]
    dcd._reuse_slot(st, i, sw)
    assert sw.nspare[0] == 0 and st.slot_of[j] == -1 and st.slot_of[i] == slot and st.row_of[slot] == i
    np.testing.assert_array_equal(st.slots[slot], K[i])
    cached = np.flatnonzero(st.slot_of >= 0)
    assert sw.held[j] == 0.0 and sw.held[i] == 0.0
    np.testing.assert_allclose(sw.vC, K64[cached].T @ sw.held[cached], rtol=1e-12, atol=1e-12)
    kv = np.empty(m)
    dcd._all_products(cache.state, yg, kv, scratch, sw)
    np.testing.assert_allclose(kv, K64 @ yg, rtol=1e-12, atol=1e-12)
    # the whole rows, had there been no room for compact ones, give the same products
    whole = dcd._support_work(cache.state, nB)._replace(XJ=np.empty((0, 0), dtype=np.float32))
    kv_whole = np.empty(m)
    dcd._all_products(cache.state, yg, kv_whole, scratch, whole)
    np.testing.assert_allclose(kv_whole, kv, rtol=1e-12, atol=1e-12)


def test_shrink_block_keeps_the_unvisited_samples_active(rng):
    """After a block at index[s0:s0 + nB], its kept samples come first (in order), the shrunk
    ones leave the active range, and every sample not yet visited stays in it."""
    from margindist.solvers import dcd

    # the last: the block's last shrunk sample next to the one unvisited sample swapped in
    for m, s0, nB, active in [(50, 10, 8, 50), (50, 10, 8, 18), (50, 0, 20, 30), (9, 3, 6, 9), (30, 0, 10, 15)]:
        index = rng.permutation(m)
        before = index.copy()
        shr = rng.random(nB) < 0.5 if active != 15 else np.arange(nB) >= 5
        flags = shr.copy()
        kept, new_active = dcd._shrink_block(index, s0, nB, shr, active)
        block = before[s0 : s0 + nB]
        assert kept == (~flags).sum() and new_active == active - flags.sum()
        np.testing.assert_array_equal(index[s0 : s0 + kept], block[~flags])
        assert set(index[new_active:active]) == set(block[flags])
        assert set(index[s0 + kept : new_active]) == set(before[s0 + nB : active])
        np.testing.assert_array_equal(np.sort(index), np.arange(m))
        np.testing.assert_array_equal(index[:s0], before[:s0])
        np.testing.assert_array_equal(index[active:], before[active:])


@pytest.mark.parametrize("two_sided,finite_box", [(True, False), (False, True)])
def test_greedy_selection_reaches_the_optimum(rng, two_sided, finite_box):
    """Greedy steps (every row at hand) end on scipy's optimum and the random epochs' point, from
    zero (where every projected gradient is equal: not a stop) and from a start a0."""
    X, y, n_var, D, p, U = _problem(rng, m=120, two_sided=two_sided, finite_box=finite_box)
    m = X.shape[0]
    K = resolve_kernel("rbf", X, gamma=0.2)(X)
    if not two_sided:  # LDM's dual: no quadratic term of its own, linear term -1
        D[:], p[:] = 0.0, -1.0
    kw = dict(n_var=n_var, gram=K, tol=1e-10, max_iter=100000, random_state=0)
    greedy = dcd_kernel(y, D, p, U, selection="greedy", **kw)
    plain = dcd_kernel(y, D, p, U, **kw)
    np.testing.assert_allclose(greedy.a, plain.a, atol=1e-7)
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    ref, f = _reference(Q, D, p, U, m)
    assert f(greedy.a) == pytest.approx(ref, rel=1e-7, abs=1e-9)
    again = dcd_kernel(y, D, p, U, a0=plain.a, selection="greedy", **kw)
    assert again.n_iter <= 1
    with pytest.raises(ValueError, match="selection"):
        dcd_kernel(y, D, p, U, selection="best", **kw)


def test_greedy_selection_needs_far_fewer_steps_on_a_creeping_dual(rng):
    """A hinge-type dual (D = 0, p = -1, a large box) on an ill-conditioned RBF kernel: the random
    epochs creep; the greedy steps stop after a small multiple of m steps."""
    X, y, _, _, _, _ = _problem(rng, m=150, d=3)
    K = resolve_kernel("rbf", X, gamma=2.0)(X)
    U = np.full(150, 100.0)
    kw = dict(n_var=150, gram=K, bias=0.0, tol=1e-3, max_iter=100000, random_state=0)
    plain = dcd_kernel(y, 0.0, -1.0, U, **kw)
    greedy = dcd_kernel(y, 0.0, -1.0, U, selection="greedy", **kw)
    assert plain.converged and greedy.converged
    assert greedy.n_iter * 5 < plain.n_iter, (greedy.n_iter, plain.n_iter)

    def f(a):
        return 0.5 * (y * a) @ K @ (y * a) - a.sum()

    assert f(greedy.a) == pytest.approx(f(plain.a), rel=1e-6)  # the same point to the tolerance


@pytest.mark.parametrize("bias,ldm", [(1.0, True), (1.0, False), (0.0, True)])
def test_pair_steps_reach_the_optimum(rng, bias, ldm):
    """Pair and single steps (``selection="pairs"``) end on scipy's optimum of the box QP and on
    the greedy steps' point, LDM's hinge dual (D = 0, p = -1) or a strictly convex one, from zero
    and from a start a0 (where they stop at once)."""
    X, y, n_var, D, p, U = _problem(rng, m=120, two_sided=False, finite_box=True)
    m = X.shape[0]
    K = resolve_kernel("rbf", X, gamma=0.2)(X)
    if ldm:
        D[:], p[:] = 0.0, -1.0
    kw = dict(n_var=n_var, gram=K, bias=bias, tol=1e-10, max_iter=100000, random_state=0)
    pairs = dcd_kernel(y, D, p, U, selection="pairs", **kw)
    greedy = dcd_kernel(y, D, p, U, selection="greedy", **kw)
    assert pairs.converged
    Q = (y[:, None] * (K + bias**2)) * y[None, :]
    ref, f = _reference(Q, D, p, U, m)
    assert f(pairs.a) == pytest.approx(ref, rel=1e-7, abs=1e-9)
    np.testing.assert_allclose(pairs.u, Q @ pairs.a, atol=1e-9)  # the kept products are exact
    np.testing.assert_allclose(pairs.a, greedy.a, atol=1e-6)
    # shrinking (the default: variables no step would move leave the scans every m steps here)
    # changes the path only
    unshrunk = dcd_kernel(y, D, p, U, selection="pairs", **{**kw, "shrinking": False})
    assert unshrunk.converged and f(unshrunk.a) == pytest.approx(ref, rel=1e-7, abs=1e-9)
    np.testing.assert_allclose(pairs.a, unshrunk.a, atol=1e-6)
    assert dcd_kernel(y, D, p, U, a0=pairs.a, selection="pairs", **kw).n_iter <= 1
    small = KernelRowCache(KernelSpec("precomputed"), K, max_bytes=30 * 8 * m)  # rows on demand
    kw_small = {**kw, "gram": None, "cache": small}
    np.testing.assert_allclose(dcd_kernel(y, D, p, U, selection="pairs", **kw_small).a, pairs.a, atol=1e-6)
    assert small.n_slots == 30 and small.misses > 30
    with pytest.raises(ValueError, match="one variable per sample"):
        dcd_kernel(y, D, p, np.inf, n_var=2 * m, gram=K, selection="pairs")


def test_pair_steps_with_empty_boxes(rng):
    """Variables whose box is [0, 0] (LDM's hinge dual at zero sample weights) can move neither
    way: the pair steps end on scipy's optimum with them at 0, which is the optimum of the
    problem without them, with and without shrinking and with a partial cache."""
    X, y, n_var, D, p, U = _problem(rng, m=150, two_sided=False, finite_box=True)
    m = X.shape[0]
    K = resolve_kernel("rbf", X, gamma=0.3)(X)
    D[:], p[:], U[:] = 0.0, -1.0, 10.0
    empty = rng.random(m) < 0.2
    U[empty] = 0.0
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    ref, f = _reference(Q, D, p, U, m)
    keep = ~empty
    sub = dcd_kernel(y[keep], D[keep], p[keep], U[keep], n_var=int(keep.sum()), gram=K[np.ix_(keep, keep)],
                     bias=1.0, tol=1e-10, max_iter=100000, selection="pairs")
    small = KernelRowCache(KernelSpec("precomputed"), K, max_bytes=25 * 8 * m)
    for kw in (dict(gram=K), dict(gram=K, shrinking=False), dict(cache=small)):
        res = dcd_kernel(y, D, p, U, n_var=m, bias=1.0, tol=1e-10, max_iter=100000, selection="pairs", **kw)
        assert res.converged and np.all(res.a[empty] == 0.0)
        assert f(res.a) == pytest.approx(ref, rel=1e-7, abs=1e-9)
        np.testing.assert_allclose(res.a[keep], sub.a, atol=1e-6)


def test_pair_scan_against_numpy(rng):
    """The gradient the pair steps keep, and one scan of it on an active subset in the compact
    arrays: the spread of the projected gradient, LIBSVM's first pair variable and the extremes
    up / low, and the best exact single-variable step, all against a NumPy computation from
    the dense Q; the vectorised scan gives the same. Then the second-order partner (with and without cached rows
    preferred), a pair step and a single step on the active gradient (rows gathered at the
    positions), a shrinking pass, the gradient of every variable brought back, and kv from G."""
    from margindist.solvers.dcd import (BoxQP, KernelPath, _gather, _gradient_of, _load, _new_active,
                                        _pair_partner, _pair_scan, _pair_step, _shrink_pairs, _single_step,
                                        _unshrink, _violations)

    m = 60
    X = rng.normal(size=(m, 3))
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    K = resolve_kernel("rbf", X, gamma=0.5)(X)
    U = np.full(m, 2.0)
    a = np.where(rng.random(m) < 0.4, 0.0, rng.uniform(0.0, 2.0, m))
    a[rng.random(m) < 0.2] = 2.0
    D, p, o = rng.uniform(0.0, 0.5, m), -np.ones(m), rng.normal(scale=0.1, size=m)
    cache = KernelRowCache.from_gram(K)
    kv, sb = K @ (y * a), np.array([y @ a])
    kp = KernelPath(cache.state, kv, sb, o, 1.0)
    qp = BoxQP(y, np.diag(K) + 1.0, D, p, U)
    act = np.sort(rng.permutation(m)[:45])
    Q = y[:, None] * (K + 1.0) * y[None, :]
    G = np.empty(m)
    _gradient_of(kp, qp, a, G, True)
    g = Q @ a + o + D * a + p
    np.testing.assert_allclose(G, g, atol=1e-12)
    A = _new_active(m, np.float64)
    n = _load(A, qp, a, G, act)
    a_sync, G_sync = a.copy(), G.copy()
    spread, k, gain, i, up, low = _pair_scan(A, n, qp, a)
    assert _violations(A, n) == (spread, i, up, low)

    pg = np.where(a <= 0, np.minimum(g, 0), np.where(a >= U, np.maximum(g, 0), g))[act]
    assert spread == pytest.approx(max(pg.max(), 0) - min(pg.min(), 0), abs=1e-12)
    v = -y * g
    may_up = ((y > 0) & (a < U)) | ((y < 0) & (a > 0))
    may_down = ((y > 0) & (a > 0)) | ((y < 0) & (a < U))
    ups = [t for t in act if may_up[t]]
    assert A.idx[i] == ups[int(np.argmax(v[ups]))] and up == pytest.approx(v[ups].max(), abs=1e-12)
    assert low == pytest.approx(min(v[t] for t in act if may_down[t]), abs=1e-12)
    h = np.diag(K) + 1.0 + D
    step = np.clip(a - g / h, 0, U) - a
    dec = -(g * step + 0.5 * h * step * step)
    assert A.idx[k] == act[int(np.argmax(dec[act]))] and gain == pytest.approx(dec[act].max(), rel=1e-12)

    ki = A.idx[i]
    b = up + y[act] * g[act]
    score = np.where(may_down[act] & (b > 0), b * b / np.maximum(h[ki] + h[act] - 2 * (K[ki, act] + 1), 1e-12), 0)
    ri = _gather(K[ki], A, n, np.empty(m))
    j, t, _ = _pair_partner(A, n, qp, a, i, up, ri, 1.0, 0.7)
    assert A.idx[j] == act[int(np.argmax(score))]
    held = rng.random(n) < 0.5
    held[j] = False
    A.held[:n] = held
    j_c, _, _ = _pair_partner(A, n, qp, a, i, up, ri, 1.0, 0.7)
    best_held = int(np.argmax(np.where(held, score, 0)))
    assert j_c == (best_held if score[best_held] >= 0.49 * score.max() else j)
    A.held[:] = 0

    a_pair = a.copy()
    ki, kj = A.idx[i], A.idx[j]
    a_pair[ki] += y[ki] * 0.25
    a_pair[kj] -= y[kj] * 0.25
    _pair_step(A, n, qp, a, i, j, 0.25, ri, _gather(K[kj], A, n, np.empty(m)))
    np.testing.assert_array_equal(a, a_pair)
    g = Q @ a + o + D * a + p
    np.testing.assert_allclose(A.G[:n], g[act], atol=1e-12)
    kk = A.idx[11]
    target = np.clip(a[kk] - g[kk] / h[kk], 0.0, U[kk])  # the exact projected step on position 11
    _single_step(A, n, qp, a, 11, _gather(K[kk], A, n, np.empty(m)), 1.0, sb)
    assert a[kk] == pytest.approx(target, abs=1e-15)
    g = Q @ a + o + D * a + p
    np.testing.assert_allclose(A.G[:n], g[act], atol=1e-12)
    assert sb[0] == pytest.approx(y @ a, abs=1e-12)
    at_bound = (a <= 0) | (a >= U)
    n_left, _, _ = _shrink_pairs(A, qp, a, n, up, low, -1, -1)  # (up, low of the scan before the steps)
    left = A.idx[:n_left]
    assert np.all(np.diff(left) > 0) and np.all(A.pos[left] == np.arange(n_left))
    gone = np.setdiff1d(act, left)
    assert np.all(at_bound[gone]) and np.all(A.pos[gone] == -1)
    np.testing.assert_allclose(A.G[:n_left], g[left], atol=1e-12)
    assert _unshrink(kp, qp, a, a_sync, G_sync, A) == m  # every gradient, the shrunk ones too
    np.testing.assert_allclose(A.G[:m], g, atol=1e-12)
    np.testing.assert_array_equal(A.idx, np.arange(m))
    G = A.G.copy()
    _gradient_of(kp, qp, a, G, False)
    np.testing.assert_allclose(kv, K @ (y * a), atol=1e-12)


def test_vectorised_scans_agree_with_the_scalar_ones():
    """The vectorised scan of the pair steps (extrema over integer keys by chunks, the first
    position attaining the largest found in its chunk) gives the scalar scan's spread, up, low
    and first pair variable, and the vectorised partner choice the scalar argmax of the scores
    (cached rows preferred or not): over active sets longer than a chunk, gradients with ties
    and both signs of zero, variables free, at either bound or in an empty box."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    from margindist.solvers.dcd import _PAIR_CHUNK, BoxQP, _load, _new_active, _pair_partner, _pair_scan, _violations

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(st.integers(1, 3 * _PAIR_CHUNK + 7), st.integers(0, 2**32 - 1), st.booleans())
    def check(n, seed, ties):
        rng = np.random.default_rng(seed)
        m = n + 5
        y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
        U = np.where(rng.random(m) < 0.05, 0.0, 1.0)
        a = np.choose(rng.integers(0, 3, m), [np.zeros(m), U, 0.5 * U])
        G = np.round(rng.normal(size=m), 1) if ties else rng.normal(size=m)
        G[rng.random(m) < 0.05] = 0.0
        G[rng.random(m) < 0.05] = -0.0
        qp = BoxQP(y, rng.uniform(1.0, 2.0, m), np.zeros(m), -np.ones(m), U)
        A = _new_active(m, np.float64)
        k = _load(A, qp, a, G, np.sort(rng.permutation(m)[:n]))
        spread, _, _, i, up, low = _pair_scan(A, k, qp, a)
        v_spread, v_i, v_up, v_low = _violations(A, k)
        assert (v_spread, v_up, v_low) == (spread, up, low)
        if i < 0:
            assert v_i == -1
        else:  # the same value; the same position unless -0.0 and +0.0 tie for it
            assert A.st[v_i] & 1 and -A.y[v_i] * A.G[v_i] == up
            assert v_i == i or up == 0.0
            ri = rng.uniform(-1.0, 1.0, m)
            A.held[:k] = rng.random(k) < 0.5
            j, t, dec = _pair_partner(A, k, qp, a, i, up, ri, 1.0, 0.7)
            b = up + A.y[:k] * A.G[:k]
            h = np.maximum(A.hd[i] + A.hd[:k] - 2.0 * (ri[:k] + 1.0), 1e-12)
            score = np.where((A.st[:k] & 2 > 0) & (b > 0), b * b / h, 0.0)
            if score.max() == 0.0:
                assert j == -1
                return
            best = int(np.argmax(score))
            held = np.where(A.held[:k] > 0, score, 0.0)
            best_c = int(np.argmax(held))
            use_c = held[best_c] > 0 and not A.held[best] and held[best_c] >= 0.7 * 0.7 * score[best]
            assert j == (best_c if use_c else best)

    check()


def test_compact_rows_follow_the_active_positions(rng):
    """The store of compact rows gives kernel row k at the active positions, from the store
    while the layout holds (no request to the row cache), gathered again after the positions
    change, and never overwrites the slot it is told to keep."""
    from margindist.solvers.dcd import BoxQP, _compact_row, _load, _new_active, _new_layout

    m = 40
    X = rng.normal(size=(m, 3))
    K = resolve_kernel("rbf", X, gamma=0.5)(X)
    cache = KernelRowCache(KernelSpec("precomputed"), K, max_bytes=10 * 8 * m)
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    qp = BoxQP(y, np.ones(m), np.zeros(m), -np.ones(m), np.ones(m))
    A = _new_active(m, np.float64)
    act = np.sort(rng.permutation(m)[:25])
    n = _load(A, qp, np.zeros(m), np.zeros(m), act)
    st = cache.state
    for k in (3, 17, 3, 30, 17):
        np.testing.assert_array_equal(_compact_row(st, A, n, k, -1), K[k, act])
    assert st.counters[0] == 3  # three distinct rows requested once each
    keep = A.cslot[3]
    A.meta[1] = keep  # the next slot to fill is the kept one: the row goes to the one after
    np.testing.assert_array_equal(_compact_row(st, A, n, 5, keep), K[5, act])
    assert A.cslot[5] != keep
    np.testing.assert_array_equal(_compact_row(st, A, n, 3, -1), K[3, act])
    A.idx[:20] = act[5:]  # fewer positions: a new layout, the rows are gathered again
    _new_layout(A, 20)
    requests = st.counters[0]
    np.testing.assert_array_equal(_compact_row(st, A, 20, 3, -1), K[3, act[5:]])
    assert st.counters[0] == requests + 1
    A.meta[3] = 2  # two slots: the store runs round
    for k in (1, 2, 3, 4, 1):
        np.testing.assert_array_equal(_compact_row(st, A, 20, k, -1), K[k, act[5:]])


def test_pair_steps_need_far_fewer_steps_along_the_stiff_direction(rng):
    """An SVM-type dual at a large C on an RBF kernel of wide width (a large near-constant part)
    with a regularised intercept: Q = Y (K + 1) Y is stiff along y, where single-variable greedy
    steps zigzag; pair steps keep sum y a and take a fraction of the steps to the same point."""
    X, y, _, _, _, _ = _problem(rng, m=300, d=3)
    K = resolve_kernel("rbf", X, gamma=0.3)(X)
    U = np.full(300, 100.0)
    kw = dict(n_var=300, gram=K, bias=1.0, tol=1e-3, max_iter=100000, random_state=0)
    greedy = dcd_kernel(y, 0.0, -1.0, U, selection="greedy", **kw)
    pairs = dcd_kernel(y, 0.0, -1.0, U, selection="pairs", **kw)
    assert greedy.converged and pairs.converged
    assert pairs.n_iter * 3 < greedy.n_iter, (pairs.n_iter, greedy.n_iter)

    def f(a):
        return 0.5 * (y * a) @ (K + 1.0) @ (y * a) - a.sum()

    assert f(pairs.a) == pytest.approx(f(greedy.a), rel=1e-5)


def test_offsets_linear_and_kernel_agree(rng):
    """A linear offset w0 and the kernel offset u0 = Y Xh w0 define the same problem."""
    X, y, _, _, _, _ = _problem(rng, two_sided=False, finite_box=True)
    m = X.shape[0]
    w0 = rng.normal(size=X.shape[1] + 1)
    U = np.full(m, 0.7)
    lin = dcd_linear(X, y, 0.0, -1.0, U, n_var=m, bias=1.0, w0=w0, tol=1e-11, random_state=0)
    u0 = y * (np.c_[X, np.ones(m)] @ w0)
    ker = dcd_kernel(y, 0.0, -1.0, U, n_var=m, gram=X @ X.T, bias=1.0, u0=u0, tol=1e-11, random_state=0)
    np.testing.assert_allclose(lin.a, ker.a, atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dense_csr_and_float32(rng, dtype):
    X, y, n_var, D, p, U = _problem(rng, m=50, d=8)
    X[rng.random(X.shape) < 0.6] = 0.0
    X = X.astype(dtype)
    dense = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-10, random_state=0)
    csr = dcd_linear(sp.csr_matrix(X), y, D, p, U, n_var=n_var, tol=1e-10, random_state=0)
    np.testing.assert_allclose(dense.a, csr.a, atol=1e-10)
    ref = dcd_linear(X.astype(np.float64), y, D, p, U, n_var=n_var, tol=1e-10, random_state=0)
    np.testing.assert_allclose(dense.a, ref.a, atol=1e-9)  # same numbers, w accumulated in float64


def test_shrinking_and_seed_do_not_change_the_solution(rng):
    X, y, n_var, D, p, U = _problem(rng, finite_box=True)
    a = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-11, shrinking=True, random_state=0).a
    b = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-11, shrinking=False, random_state=5).a
    np.testing.assert_allclose(a, b, atol=1e-8)
    c = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-3, random_state=3).a
    d = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-3, random_state=3).a
    np.testing.assert_array_equal(c, d)  # reproducible


def test_warm_start_takes_one_epoch(rng):
    X, y, n_var, D, p, U = _problem(rng)
    res = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-8, random_state=0)
    again = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-8, a0=res.a, random_state=1)
    assert again.n_iter == 1 and again.converged
    np.testing.assert_allclose(again.a, res.a, atol=1e-12)
    K = X @ X.T
    kres = dcd_kernel(y, D, p, U, n_var=n_var, gram=K, tol=1e-8, random_state=0)
    kagain = dcd_kernel(y, D, p, U, n_var=n_var, gram=K, tol=1e-8, a0=kres.a, random_state=0)
    assert kagain.n_iter == 1


@pytest.mark.parametrize("two_sided", [True, False])
def test_warm_start_with_its_products_computes_no_row_again(rng, two_sided):
    """``q0`` (Q a0 from the run that ended at a0) replaces the start's kernel products: the
    same run from there, and a cache of a fifth of the rows computes no row for the start
    (the LDM rounds pass it from one beta solve to the next with a new offset)."""
    X, y, n_var, D, p, U = _problem(rng, m=100, two_sided=two_sided)
    m = X.shape[0]
    spec = resolve_kernel("rbf", X, gamma=0.3)
    o = rng.normal(size=m)
    first = dcd_kernel(y, D, p, U, n_var=n_var, gram=spec(X), u0=o, tol=1e-3, random_state=0)
    o2 = o + 0.1 * rng.normal(size=m)
    runs = {}
    for name, q0 in (("rows", None), ("q0", first.u - o)):
        cache = KernelRowCache(spec, X, max_bytes=20 * 8 * m)
        runs[name] = (dcd_kernel(y, D, p, U, n_var=n_var, cache=cache, u0=o2, a0=first.a, q0=q0, tol=1e-10,
                                 max_iter=1, random_state=1, warn_label=None), cache.misses)
    (a, misses_rows), (b, misses_q0) = runs["rows"], runs["q0"]
    np.testing.assert_allclose(b.a, a.a, atol=1e-10)
    np.testing.assert_allclose(b.u, a.u, atol=1e-10)
    gamma = first.a[:m] - first.a[m:] if two_sided else first.a
    assert misses_rows - misses_q0 >= np.count_nonzero(gamma) - 20 > 0
    with pytest.raises(ValueError, match="q0 must have length"):
        dcd_kernel(y, D, p, U, n_var=n_var, gram=spec(X), a0=first.a, q0=np.zeros(3))


def test_max_iter_warns_with_remedy(rng):
    X, y, n_var, D, p, U = _problem(rng)
    with pytest.warns(ConvergenceWarning, match="Increase max_iter"):
        res = dcd_linear(X, y, D, p, U, n_var=n_var, tol=1e-12, max_iter=1, random_state=0)
    assert res.n_iter == 1 and not res.converged


def test_zero_rows_and_bad_input(rng):
    X, y, n_var, D, p, U = _problem(rng, two_sided=False, finite_box=True)
    X[:3] = 0.0
    res = dcd_linear(X, y, 0.0, -1.0, U, n_var=X.shape[0], bias=0.0, tol=1e-10, random_state=0)
    # a zero row with D = 0 has the constant gradient -1: its variable goes to the upper bound
    np.testing.assert_allclose(res.a[:3], U[:3])
    with pytest.raises(ValueError, match="n_var"):
        dcd_linear(X, y, D[:5], p[:5], U[:5], n_var=5)
    with pytest.raises(ValueError, match="D >= 0"):
        dcd_linear(X, y, -1.0, p, U, n_var=X.shape[0])
    with pytest.raises(ValueError, match="exactly one"):
        dcd_kernel(y, 1.0, p, U, n_var=X.shape[0])
    with pytest.raises(ValueError, match="gram must be"):
        dcd_kernel(y, 1.0, p, U, n_var=X.shape[0], gram=np.eye(3))


def test_precomputed_cache_matches_gram(rng):
    X, y, n_var, D, p, U = _problem(rng)
    K = X @ X.T
    cache = KernelRowCache(KernelSpec("precomputed"), K, max_bytes=10**6)
    a = dcd_kernel(y, D, p, U, n_var=n_var, cache=cache, tol=1e-11, random_state=0).a
    b = dcd_kernel(y, D, p, U, n_var=n_var, gram=K, tol=1e-11, random_state=0).a
    np.testing.assert_allclose(a, b, atol=1e-9)


def test_float32_rows_solve_the_rounded_problem(rng):
    """float32 kernel rows (float64 sums): the exact optimum of the problem with the cache's
    float32 K (RBF values computed in float32, within 3e-7 of K), within that rounding of the
    float64 one; every storage and source agrees."""
    X, y, n_var, D, p, U = _problem(rng, m=70)
    m = X.shape[0]
    spec = resolve_kernel("rbf", X, gamma=0.4)
    K = spec(X)
    ref = dcd_kernel(y, D, p, U, n_var=n_var, gram=K, tol=1e-10, max_iter=20000, random_state=0)
    f32 = KernelRowCache(spec, X, max_bytes=5 * 4 * m, dtype=np.float32)  # 5 rows: evictions
    res32 = dcd_kernel(y, D, p, U, n_var=n_var, cache=f32, tol=1e-10, max_iter=20000, random_state=1)
    assert f32.misses > m
    K32 = KernelRowCache(spec, X, max_bytes=4 * m * m, dtype=np.float32).fill()
    np.testing.assert_allclose(K32, K, rtol=0, atol=3e-7)
    exact32 = dcd_kernel(y, D, p, U, n_var=n_var, gram=K32, tol=1e-10, max_iter=20000, random_state=2)
    np.testing.assert_allclose(res32.a, exact32.a, atol=1e-9)  # same rounded problem
    np.testing.assert_allclose(res32.a, ref.a, atol=1e-5)  # close to the float64 optimum
    Q32 = (y[:, None] * (K32.astype(np.float64) + 1.0)) * y[None, :]
    np.testing.assert_allclose(res32.u, Q32 @ res32.gamma(m), atol=1e-10)  # u is float64-exact
    _, f = _reference((y[:, None] * (K + 1.0)) * y[None, :], D, p, U, m)
    assert f(res32.a) == pytest.approx(f(ref.a), rel=1e-6)
    filled = KernelRowCache(spec, X, max_bytes=8 * m * m, dtype=np.float32)
    filled.fill()
    resf = dcd_kernel(y, D, p, U, n_var=n_var, cache=filled, tol=1e-10, max_iter=20000, random_state=1)
    np.testing.assert_allclose(resf.a, exact32.a, atol=1e-9)
    assert filled.misses == m  # the filled cache is never recomputed


def test_gram_float32_and_cache_input_checks(rng):
    X, y, n_var, D, p, U = _problem(rng, m=30)
    K = X @ X.T
    a = dcd_kernel(y, D, p, U, n_var=n_var, gram=K, tol=1e-11, random_state=0).a
    b = dcd_kernel(y, D, p, U, n_var=n_var, cache=KernelRowCache.from_gram(K), tol=1e-11, random_state=0).a
    np.testing.assert_array_equal(a, b)  # the gram path is the full cache over the matrix
    cache = KernelRowCache(resolve_kernel("linear"), X[:10])
    with pytest.raises(ValueError, match="holds 10 rows"):
        dcd_kernel(y, D, p, U, n_var=n_var, cache=cache)
