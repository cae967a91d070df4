"""pymf.engine.diagnostics: R-hat / ESS by arviz-stats, ArviZ DataTree by arviz-base.

Statistical checks use fixed seeds; each tolerance says how it was chosen, from spreads
measured with arviz-stats 0.8.0 over 20 seeds (1000 components, or 400 for AR(1)):
4 chains x 1000 iid normal draws: bulk ESS / N has mean 0.98, sd 0.044, range 0.80-1.13,
and the mean of 50 components 0.97-0.99; tail ESS / N mean 0.96, sd 0.044, range
0.74-1.06 (a long lower tail), mean of 50 0.94-0.98. Rank R-hat of iid chains: 0.999-1.002
(30 seeds). AR(1) with phi = 0.9, 4 x 5000 draws: ESS / (N (1 - phi) / (1 + phi)) has mean
1.00, sd 0.08, range 0.74-1.23, mean of 20 components 0.97-1.02.
"""
import json
import sys
import warnings

import numpy as np
import pytest

from pymf.engine import diagnostics as D


def _stats():
    return pytest.importorskip(
        "arviz_stats.base", reason="arviz-stats (a pymf dependency on Python >= 3.11) "
                                   "is not installed")


def _arviz_base():
    pytest.importorskip("xarray", reason='xarray is not installed (pip install "pymf[arviz]")')
    return pytest.importorskip(
        "arviz_base", reason='arviz-base is not installed (pip install "pymf[arviz]")')


def _ar1(rng, chains, draws, k, phi):
    """k independent stationary AR(1) series per chain: x_t = phi x_{t-1} + e_t."""
    x = np.empty((chains, draws, k))
    x[:, 0] = rng.normal(size=(chains, k)) / np.sqrt(1.0 - phi ** 2)  # stationary start
    e = rng.normal(size=(chains, draws, k))
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


# --- R-hat ----------------------------------------------------------------------------

def test_rhat_of_iid_chains_is_near_one():
    _stats()
    rng = np.random.default_rng(20240601)
    d = D.diagnostics({"theta": rng.normal(size=(4, 1000, 20))})["theta"]
    assert d["rhat"].shape == (20,)
    # iid chains: over 30 seeds the rank R-hat stayed within 0.999-1.002; 1.01 is the
    # threshold Vehtari et al. (2021) recommend, so every component must be below it
    assert np.all(np.abs(d["rhat"] - 1.0) < 0.01), d["rhat"]


def test_rhat_flags_chains_with_shifted_means_or_scales():
    _stats()
    rng = np.random.default_rng(7)
    z = rng.normal(size=(4, 1000))
    shifted = z + np.arange(4.0)[:, None]           # chain means 0, 1, 2, 3 (sd 1)
    scaled = z * np.array([1.0, 1.0, 1.0, 3.0])[:, None]  # same mean, one wide chain
    d = D.diagnostics({"shifted": shifted, "scaled": scaled})
    # power: means one sd apart give R-hat about 1.5 (1.52-1.56 over 5 seeds), far above
    # the 1.1 of the old rule of thumb
    assert d["shifted"]["rhat"] > 1.3
    # the folded (tail) half of the rank R-hat sees a scale difference the classic split
    # R-hat misses (1.145-1.152 over 5 seeds; BDA3 split R-hat about 1.000)
    assert d["scaled"]["rhat"] > 1.1
    split = _stats().array_stats.rhat(scaled, chain_axis=0, draw_axis=1, method="split")
    assert abs(split - 1.0) < 0.01


# --- ESS ------------------------------------------------------------------------------

def test_bulk_and_tail_ess_of_iid_draws_is_near_the_number_of_draws():
    _stats()
    rng = np.random.default_rng(11)
    chains, draws, k = 4, 1000, 50
    d = D.diagnostics({"x": rng.normal(size=(chains, draws, k))})["x"]
    n = chains * draws
    bulk, tail = d["ess_bulk"] / n, d["ess_tail"] / n
    # per component the sd is about 0.044 N; the mean of 50 components has sd under 0.01,
    # so +-5% (bulk) leaves room for the ~2% downward bias of Geyer's truncated sum; tail
    # ESS (5%/95% quantile indicators) runs ~4% lower still
    assert abs(bulk.mean() - 1.0) < 0.05, bulk.mean()
    assert 0.85 < tail.mean() < 1.05, tail.mean()
    # every component: wider than the extremes seen in 1000 (0.80 / 0.74 at the low end)
    assert np.all((bulk > 0.7) & (bulk < 1.3)), bulk
    assert np.all((tail > 0.6) & (tail < 1.2)), tail


def test_bulk_ess_of_ar1_chains_matches_theory():
    _stats()
    rng = np.random.default_rng(3)
    phi, chains, draws, k = 0.9, 4, 5000, 20
    d = D.diagnostics({"x": _ar1(rng, chains, draws, k, phi)})["x"]
    expected = chains * draws * (1 - phi) / (1 + phi)  # ~1053: integrated autocorr. time
    ratio = d["ess_bulk"] / expected
    # per component the ratio has sd about 0.08; the mean of 20 about 0.02: +-10% is
    # 5 sds; each component within +-40% (5 sds; 0.74-1.23 seen in 400)
    assert abs(ratio.mean() - 1.0) < 0.10, ratio.mean()
    assert np.all(np.abs(ratio - 1.0) < 0.40), ratio
    # one stationary distribution, but only ~130 effective draws per split chain: R-hat's
    # noise is larger than for iid draws (max of 20 components reached 1.011 in 30 seeds)
    assert np.all(d["rhat"] < 1.02), d["rhat"]


# --- what diagnostics returns ---------------------------------------------------------

def test_same_numbers_as_arviz_stats_and_types():
    stats = _stats().array_stats
    rng = np.random.default_rng(5)
    W = rng.normal(size=(3, 200, 4, 2))
    s = rng.normal(size=(3, 200))
    d = D.diagnostics({"W": W, "s": s})
    assert set(d) == {"W", "s"} and set(d["W"]) == {"rhat", "ess_bulk", "ess_tail"}
    for key in ("rhat", "ess_bulk", "ess_tail"):
        assert isinstance(d["s"][key], float)
        assert d["W"][key].shape == (4, 2)
    kw = {"chain_axis": 0, "draw_axis": 1}
    np.testing.assert_array_equal(d["W"]["rhat"], stats.rhat(W, method="rank", **kw))
    np.testing.assert_array_equal(d["W"]["ess_bulk"], stats.ess(W, method="bulk", **kw))
    np.testing.assert_array_equal(d["W"]["ess_tail"],
                                  stats.ess(W, method="tail", prob=(0.05, 0.95), **kw))
    assert d["s"]["rhat"] == float(stats.rhat(s, method="rank", **kw))


def test_same_rhat_and_ess_as_arviz_on_the_datatree():
    _stats()
    _arviz_base()
    azs = pytest.importorskip("arviz_stats", reason="arviz-stats is not installed")
    pytest.importorskip("xarray_einstats", reason="xarray-einstats (arviz-stats[xarray], "
                                                  'pip install "pymf[arviz]") is missing')
    rng = np.random.default_rng(8)
    W = rng.normal(size=(4, 300, 3))
    dt = D.to_datatree({"W": W}, dims={"W": ["row"]})
    d = D.diagnostics({"W": W})["W"]
    np.testing.assert_allclose(azs.rhat(dt)["W"].values, d["rhat"], rtol=1e-12)
    np.testing.assert_allclose(azs.ess(dt, method="bulk")["W"].values, d["ess_bulk"],
                               rtol=1e-12)
    np.testing.assert_allclose(azs.ess(dt, method="tail", prob=(0.05, 0.95))["W"].values,
                               d["ess_tail"], rtol=1e-12)


def test_one_chain_and_constant_quantities():
    _stats()
    rng = np.random.default_rng(9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from 0/0 inside arviz-stats
        d = D.diagnostics({"one": rng.normal(size=(1, 4000)), "const": np.full((4, 50), 2.0),
                           "ints": rng.integers(0, 5, size=(2, 60))})
    # one chain: ESS from its two halves; arviz-stats gives no R-hat below 2 chains
    assert np.isnan(d["one"]["rhat"])
    # (ESS / 4000 of one iid chain over 500 seeds: mean 0.98, sd 0.045, range 0.84-1.09)
    assert 0.7 * 4000 < d["one"]["ess_bulk"] < 1.3 * 4000
    # a constant: R-hat undefined (NaN), ESS = all draws
    assert np.isnan(d["const"]["rhat"]) and d["const"]["ess_bulk"] == 200.0
    assert np.isfinite(d["ints"]["rhat"])
    assert D.diagnostics({}) == {}


@pytest.mark.parametrize("draws, match", [
    ({"W": np.zeros(10)}, r"draws\['W'\] must have shape \(chain, draw, \.\.\.\)"),
    ({"W": np.float64(1.0)}, r"draws\['W'\] must have shape"),
    ({"W": np.zeros((4, 3))}, r"draws\['W'\] needs at least 4 draws per chain, got 3"),
    ({"W": np.zeros((0, 10))}, r"draws\['W'\] has no chains"),
    ({"W": np.array([[0.0, 1, 2, np.nan]] * 2)}, r"draws\['W'\] has 2 non-finite"),
    ({"ok": np.zeros((2, 5)), "V": np.full((2, 5, 2), np.inf)}, r"draws\['V'\] has 20 non"),
    ({"W": np.zeros((2, 5), dtype=complex)}, r"draws\['W'\] must be an array of real"),
    ({"W": np.array([["a"] * 5] * 2)}, r"draws\['W'\] must be an array of real"),
    ({"W": [[1.0, 2.0], [3.0]]}, r"draws\['W'\] is not a rectangular array"),
    ({"": np.zeros((2, 5))}, r"names must be non-empty strings"),
    ({3: np.zeros((2, 5))}, r"names must be non-empty strings"),
])
def test_diagnostics_refuses_bad_draws(draws, match):
    with pytest.raises(ValueError, match=match):
        D.diagnostics(draws)


def test_diagnostics_needs_a_mapping():
    with pytest.raises(TypeError, match="draws must be a mapping"):
        D.diagnostics(np.zeros((4, 100)))


# --- DataTree -------------------------------------------------------------------------

def test_to_datatree_posterior_and_sample_stats():
    _arviz_base()
    import xarray as xr
    rng = np.random.default_rng(2)
    chains, draws, rows, factors = 3, 25, 7, 2
    post = {"W": rng.normal(size=(chains, draws, rows, factors)),
            "tau": rng.gamma(2.0, size=(chains, draws))}
    ss = {"lp": rng.normal(size=(chains, draws)),
          "diverging": np.zeros((chains, draws), dtype=bool)}
    attrs = {"sampler": "psgld", "rank": 2, "step": 1e-4, "seeds": [1, 2, 3],
             "config": {"blocks": 8, "thin": None}, "resumed": False, "mixed": [1, "a"],
             "np": np.int64(5), "arr": np.arange(3.0)}
    dt = D.to_datatree(post, sample_stats=ss, dims={"W": ["row", "factor"]},
                       coords={"factor": ["f0", "f1"]}, attrs=attrs)
    assert isinstance(dt, xr.DataTree)
    assert set(dt.children) == {"posterior", "sample_stats"}
    W = dt["posterior"]["W"]
    assert W.dims == ("chain", "draw", "row", "factor")
    assert W.shape == (chains, draws, rows, factors)
    np.testing.assert_array_equal(W.values, post["W"])
    assert list(dt["posterior"]["factor"].values) == ["f0", "f1"]
    assert list(dt["posterior"]["chain"].values) == [0, 1, 2]
    assert dt["posterior"]["tau"].dims == ("chain", "draw")
    assert dt["sample_stats"]["lp"].dims == ("chain", "draw")
    assert dt["sample_stats"]["diverging"].dtype == bool
    # attrs: on the root and the posterior, beside ArviZ's own; flat values kept, the rest
    # stored as JSON text (netCDF attributes hold no dicts, None or bools)
    for a in (dt.attrs, dt["posterior"].attrs):
        assert a["inference_library"] == "pymf"
        assert a["sampler"] == "psgld" and a["rank"] == 2 and a["step"] == 1e-4
        assert a["seeds"] == [1, 2, 3] and a["np"] == 5 and a["arr"] == [0.0, 1.0, 2.0]
        assert json.loads(a["config"]) == {"blocks": 8, "thin": None}
        assert json.loads(a["resumed"]) is False and json.loads(a["mixed"]) == [1, "a"]
        for v in a.values():
            assert isinstance(v, (str, int, float, list)) and not isinstance(v, bool)
    assert dt["posterior"].attrs["creation_library"] == "ArviZ"


def test_to_datatree_without_sample_stats_names_unnamed_axes():
    _arviz_base()
    dt = D.to_datatree({"H": np.zeros((2, 10, 3))})
    assert set(dt.children) == {"posterior"}
    assert dt["posterior"]["H"].dims == ("chain", "draw", "H_dim_0")


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"posterior": {"W": np.zeros(5)}}, ValueError, r"posterior\['W'\] must have shape"),
    ({"posterior": {"W": [[1.0], [1.0, 2.0]]}}, ValueError, "not a rectangular array"),
    ({"posterior": {"W": np.zeros((2, 5))}, "sample_stats": {"lp": np.zeros(5)}},
     ValueError, r"sample_stats\['lp'\] must have shape"),
    ({"posterior": {}}, ValueError, "posterior is empty"),
    ({"posterior": np.zeros((2, 5))}, TypeError, "posterior must be a mapping"),
    ({"posterior": {"W": np.zeros((2, 5, 3))}, "dims": {"W": ["row", "factor"]}},
     ValueError, r"dims\['W'\] names 2 axes"),
    ({"posterior": {"W": np.zeros((2, 5, 3))}, "dims": {"W": "row"}},
     ValueError, r"dims\['W'\] must be a list"),
    ({"posterior": {"W": np.zeros((2, 5, 3))}, "dims": {"W": 3}},
     ValueError, r"dims\['W'\] must be a list"),
    ({"posterior": {"W": np.zeros((2, 5, 3))}, "dims": {"W": ["chain"]}},
     ValueError, "not 'chain' or 'draw'"),
    ({"posterior": {"W": np.zeros((2, 5, 3))}, "dims": {"V": ["row"], "W": ["row"]}},
     ValueError, r"dims names variables that are not given: \['V'\]"),
    ({"posterior": {"W": np.zeros((2, 5, 3))}, "dims": {"W": ["row"]},
      "coords": {"row": [0, 1]}}, ValueError, r"coords\['row'\] has 2 values"),
    ({"posterior": {"W": np.zeros((2, 5, 3)), "H": np.zeros((2, 5, 4))},
      "dims": {"W": ["row"], "H": ["row"]}}, ValueError, "dimension 'row' has length 3"),
    ({"posterior": {"W": np.zeros((2, 5))}, "sample_stats": {"lp": np.zeros((2, 6))}},
     ValueError, r"sample_stats\['lp'\] has \(chain, draw\) = \(2, 6\)"),
    ({"posterior": {"W": np.zeros((2, 5))}, "attrs": {"f": print}},
     ValueError, r"attrs\['f'\] is a builtin_function_or_method"),
    ({"posterior": {"W": np.zeros((2, 5))}, "attrs": {"d": {1: 2}}},
     ValueError, "non-string key"),
])
def test_to_datatree_refuses_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        D.to_datatree(**kwargs)


# --- missing optional packages ---------------------------------------------------------

@pytest.mark.parametrize("module", ["arviz_base", "xarray"])
def test_missing_arviz_base_names_the_extra(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(ImportError, match=r'pip install "pymf\[arviz\]"') as info:
        D.to_datatree({"W": np.zeros((2, 5))})
    # names the missing module (xarray first when that is missing too)
    assert module in str(info.value) or "xarray" in str(info.value)


def test_missing_arviz_stats_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz_stats.base", None)
    with pytest.raises(ImportError, match=r'pip install "arviz-stats>=0\.8"'):
        D.diagnostics({"W": np.random.default_rng(0).normal(size=(2, 10))})


def test_require(monkeypatch):
    assert D.require("json") is json
    with pytest.raises(ImportError, match="pip install no-such-pkg"):
        D.require("no_such_pkg")
    monkeypatch.setattr(sys, "version_info", (3, 10, 0))  # older Python: says so
    monkeypatch.setitem(sys.modules, "arviz_base", None)
    with pytest.raises(ImportError, match=r"needs Python >= 3\.11; this is 3\.10"):
        D.require("arviz_base")


def test_results_without_per_draw_statistics_diagnose_their_posterior_by_default():
    """IBP and linear-Gaussian results keep draws but no per-draw statistics:
    res.diagnostics() said "no kept draws" and advised keep_samples=True, in effect; a
    result of pymf.fit advised keep_samples=, which pymf.fit refuses."""
    _stats()
    import pymf
    X, _, _ = pymf.datasets.make_cambridge(n=20, seed=0)
    ibp = pymf.sample(pymf.IBPLinearGaussian(), X, pymf.CollapsedIBP(), n_samples=20, seed=0,
                      progress=False)
    assert set(ibp.diagnostics()) == set(ibp.posterior) >= {"K", "sigma_x"}
    A, x, _ = pymf.datasets.make_linear_gaussian(200, 3, seed=0)
    linear = pymf.sample(pymf.LinearGaussian(), (A, x), pymf.HAMCMC(step_size=1e-3),
                         n_samples=40, seed=0, progress=False)
    assert set(linear.diagnostics()) == {"theta"}
    V = pymf.sibm.make_binary_mf(30, 20, 2, density=0.2, seed=0)
    V = V[0] if isinstance(V, tuple) else V
    fitted = pymf.fit(pymf.LogisticMF(2), V, pymf.SIBM(), n_updates=20, seed=0, progress=False)
    for method in (fitted.diagnostics, fitted.to_arviz):
        with pytest.raises(ValueError, match=r"SIBMResult \(pymf.fit: a point estimate or a "
                                             r"variational fit\) has no chain of draws"):
            method()
