"""HAMCMC: stochastic quasi-Newton Langevin Monte Carlo (Simsekli, Badeau, Cemgil & Richard,
ICML 2016), with the samplers the paper compares it with, on its linear-Gaussian model
(section 4.1), whose posterior is known exactly.

    A, x, theta_true = pymf.datasets.make_linear_gaussian(1000, 10, noise_var=10.0, seed=0)
    model = pymf.LinearGaussian(noise_var=10.0)
    sampler = pymf.HAMCMC(memory=2, step_size=pymf.PolynomialDecay(1e-2, 0.51),
                          batch_size=0.01)
    res = pymf.sample(model, (A, x), sampler, n_samples=10_000, burnin=10_000, seed=0)
    res.mean, res.cov, res.trace["mean_error"]     # against model.posterior((A, x))

Model: theta ~ N(0, prior_var I) in R^D, x_n | theta ~ N(a_n . theta, noise_var).
Samplers (each iteration draws a minibatch of batch_size entries with replacement; None
means the full data): pymf.SGLD, pymf.PreconditionedSGLD (Li et al. 2016, diagonal
RMSprop preconditioner; "pSGLD" in the literature, not pymf.PSGLD, the parallel SGLD of
matrix factorisation), pymf.SGRLD (the inverse expected Fisher information of the whole
problem as a constant metric: here the exact posterior covariance, O(D^2) per iteration
and O(N D^2 + D^3) to set up) and pymf.HAMCMC (an L-BFGS inverse Hessian from the last 2M
samples, O(M^2 D) per iteration). The maths, the conventions and what HAMCMC's first 2M
iterations do are in core/include/pymf/hamcmc.h; the C core runs every iteration.

Seeding: numpy.random.SeedSequence(seed).spawn(2): the Philox key of the noise and the
minibatches, and the starting state (a draw from the prior unless init= is given). The
chain is a pure function of (seed, data, settings).

Not done yet: HAMCMC for matrix factorisation (distributed like PSGLD), and checkpoints of
these runs (res.save / pymf.load work).
"""
import math
import numbers
import time
import warnings

import numpy as np

from pymf import _hamcmc
from pymf.data import real_array
from pymf.errors import DivergenceError
from pymf.interrupt import DeferredInterrupt, ForcedInterrupt
from pymf.samplers import (SGLD, as_step_size, batch_count, check_batch_size, check_flag,
                           check_real, check_seed)


class LinearGaussian:
    """theta ~ N(0, prior_var I), x_n | theta ~ N(a_n . theta, noise_var); data = (A, x)
    with A the N x D design matrix (row n is a_n) and x the N observations."""

    def __init__(self, noise_var=1.0, prior_var=1.0):
        self.noise_var = check_real(noise_var, "noise_var", positive=True)
        self.prior_var = check_real(prior_var, "prior_var", positive=True)

    def params(self):
        return {"model": "linear_gaussian", "noise_var": self.noise_var,
                "prior_var": self.prior_var}

    def __repr__(self):
        return f"LinearGaussian(noise_var={self.noise_var}, prior_var={self.prior_var})"

    def check_data(self, data):
        """(A, x) as float64 arrays, validated."""
        try:
            A, x = data
        except (TypeError, ValueError):
            raise ValueError("the data of a LinearGaussian model are a pair (A, x): the N x D "
                             "design matrix and the N observations") from None
        A, x = real_array(A, "A"), real_array(x, "x")
        if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0:
            raise ValueError(f"A must be a non-empty N x D matrix, got shape {A.shape}")
        if x.ndim != 1 or x.shape[0] != A.shape[0]:
            raise ValueError(f"x must hold one observation per row of A ({A.shape[0]}), got "
                             f"shape {x.shape}")
        A = np.ascontiguousarray(A, dtype=np.float64)
        x = np.ascontiguousarray(x, dtype=np.float64)
        for name, value in (("A", A), ("x", x)):
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{name} contains NaN or inf")
        return A, x

    def posterior(self, data):
        """The exact posterior (mean, covariance): precision A^T A / noise_var + I / prior_var."""
        A, x = self.check_data(data)
        precision = A.T @ A / self.noise_var + np.eye(A.shape[1]) / self.prior_var
        cov = np.linalg.inv(precision)
        cov = (cov + cov.T) / 2
        return cov @ (A.T @ x) / self.noise_var, cov


class _StochasticGradientMCMC:
    """A step size and a minibatch size (None: the full data)."""

    kind = None

    def __init__(self, step_size, batch_size):
        self.step_size = as_step_size(step_size)
        self._batch = None if batch_size is None else check_batch_size(batch_size)

    def batch_size(self, n_data):
        return 0 if self._batch is None else batch_count(self._batch, n_data)

    def chain_options(self):
        return {}

    def params(self):
        return {"sampler": self.kind, "step_size": self.step_size.params(),
                "batch_size": self._batch, **self.chain_options()}


class HAMCMC(_StochasticGradientMCMC):
    """Hessian-approximated MCMC: memory M >= 2 (the paper uses 2-5), H^0 = gamma I, and
    lam added to the curvature pairs (y += lam s: an L-BFGS of (Hessian + lam I)^-1, which
    keeps H positive definite when minibatch curvature is not)."""

    kind = "hamcmc"

    def __init__(self, memory=2, gamma=1.0, lam=0.0, step_size=1e-3, batch_size=0.01):
        super().__init__(step_size, batch_size)
        if isinstance(memory, bool) or not isinstance(memory, numbers.Integral) \
                or not 2 <= memory <= 64:
            raise ValueError(f"memory must be an integer in [2, 64], got {memory!r}")
        self.memory = int(memory)
        self.gamma = check_real(gamma, "gamma", positive=True)
        if isinstance(lam, bool) or not isinstance(lam, numbers.Real) \
                or not (math.isfinite(lam) and lam >= 0):
            raise ValueError(f"lam must be >= 0 and finite, got {lam!r}")
        self.lam = float(lam)

    def chain_options(self):
        return {"memory": self.memory, "gamma": self.gamma, "lam": self.lam}

    def __repr__(self):
        return (f"HAMCMC(memory={self.memory}, gamma={self.gamma}, lam={self.lam}, "
                f"step_size={self.step_size!r}, batch_size={self._batch})")


class PreconditionedSGLD(_StochasticGradientMCMC):
    """SGLD with the diagonal RMSprop preconditioner of Li, Chen, Carlson & Carin (AAAI
    2016): V = alpha V + (1 - alpha) g*g, precond = 1 / (lam + sqrt V); the correction term
    is dropped, as in their experiments (which leaves a bias that does not vanish)."""

    kind = "psgld"

    def __init__(self, alpha=0.99, lam=1e-5, step_size=1e-3, batch_size=0.01):
        super().__init__(step_size, batch_size)
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) \
                or not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {alpha!r}")
        self.alpha = float(alpha)
        self.lam = check_real(lam, "lam", positive=True)

    def chain_options(self):
        return {"alpha": self.alpha, "lam": self.lam}

    def __repr__(self):
        return (f"PreconditionedSGLD(alpha={self.alpha}, lam={self.lam}, "
                f"step_size={self.step_size!r}, batch_size={self._batch})")


class SGRLD(_StochasticGradientMCMC):
    """Stochastic gradient Riemannian LD (Patterson & Teh 2013) with the inverse expected
    Fisher information of the whole problem as its metric: for the linear-Gaussian model a
    constant matrix (the exact posterior covariance), so no correction term."""

    kind = "sgrld"

    def __init__(self, step_size=1e-3, batch_size=0.01):
        super().__init__(step_size, batch_size)

    def __repr__(self):
        return f"SGRLD(step_size={self.step_size!r}, batch_size={self._batch})"


class LinearResult:
    """What pymf.sample returns for a LinearGaussian model.

    mean, cov         the mean and covariance of the kept samples (cov is NaN with fewer
                      than two)
    samples           kept x D (None with keep_samples=False)
    exact_mean, exact_cov  the exact posterior
    trace             iteration, time (s), mean_error (Euclidean distance between the mean of
                      the samples kept so far and the exact posterior mean; NaN in burn-in)
    skipped_pairs     HAMCMC: curvature pairs left out because s^T y <= 0
    """

    def __init__(self, mean, cov, samples, n_kept, exact_mean, exact_cov, trace, params,
                 iterations, skipped_pairs, interrupted=False):
        self.mean, self.cov, self.samples, self.n_kept = mean, cov, samples, n_kept
        self.exact_mean, self.exact_cov = exact_mean, exact_cov
        self.trace, self.params = trace, params
        self.iterations, self.skipped_pairs = iterations, skipped_pairs
        self.interrupted = interrupted

    def save(self, path):
        """One .npz (no pickle), written whole then renamed; pymf.load reads it back."""
        import json
        import os
        arrays = {"mean": self.mean, "cov": self.cov, "exact_mean": self.exact_mean,
                  "exact_cov": self.exact_cov}
        if self.samples is not None:
            arrays["samples"] = np.asarray(self.samples)
        for key, value in self.trace.items():
            arrays["trace_" + key] = np.asarray(value)
        meta = {"kind": "linear", "params": self.params, "n_kept": self.n_kept,
                "iterations": int(self.iterations), "skipped_pairs": int(self.skipped_pairs),
                "interrupted": bool(self.interrupted)}
        from pymf.result import npz_path
        path = npz_path(path)
        tmp = path + ".tmp.npz"
        np.savez(tmp, meta=json.dumps(meta), **arrays)
        os.replace(tmp, path)
        return path

    @classmethod
    def from_archive(cls, archive, meta):
        trace = {k[6:]: archive[k] for k in archive.files if k.startswith("trace_")}
        samples = archive["samples"] if "samples" in archive.files else None
        return cls(archive["mean"], archive["cov"], samples, meta["n_kept"],
                   archive["exact_mean"], archive["exact_cov"], trace, meta["params"],
                   meta["iterations"], meta["skipped_pairs"], meta["interrupted"])

    def __repr__(self):
        error = self.trace["mean_error"][-1] if len(self.trace["mean_error"]) else float("nan")
        return (f"LinearResult({self.params['sampler']['sampler']}, kept={self.n_kept}, "
                f"mean_error={error:.4g})")


class _Accumulator:
    """Running sums of the kept samples (mean and covariance without storing them). A chain
    about to diverge can keep huge finite samples whose squares overflow: the sums then hold
    inf without numpy warnings, and the DivergenceError that follows says what happened."""

    def __init__(self, dim, n_keep, keep_samples):
        self.n = 0
        self.total = np.zeros(dim)
        self.outer = np.zeros((dim, dim))
        self.samples = np.zeros((n_keep, dim)) if keep_samples else None

    def add(self, rows):
        if len(rows) == 0:
            return
        if self.samples is not None:
            self.samples[self.n:self.n + len(rows)] = rows
        self.n += len(rows)
        with np.errstate(over="ignore", invalid="ignore"):
            self.total += rows.sum(axis=0)
            self.outer += rows.T @ rows

    def mean(self):
        return self.total / self.n if self.n else np.full(len(self.total), np.nan)

    def cov(self):
        if self.n < 2:
            return np.full(self.outer.shape, np.nan)
        mean = self.mean()
        with np.errstate(over="ignore", invalid="ignore"):
            return (self.outer - self.n * np.outer(mean, mean)) / (self.n - 1)


def _check_init(init, model, dim, rng):
    if init is None:
        return rng.normal(0.0, math.sqrt(model.prior_var), dim)
    theta = real_array(init, "init")
    if theta.shape != (dim,):
        raise ValueError(f"init must be a vector of {dim} values, got shape {theta.shape}")
    if not np.all(np.isfinite(theta)):
        raise ValueError("init contains NaN or inf")
    if not np.all(np.abs(theta) < 1e150):
        raise ValueError("init is too large (|value| >= 1e150 overflows when squared)")
    return theta


def sample_linear(model, data, sampler, n_samples, burnin=0, thin=1, seed=0, init=None,
                  trace_every=None, keep_samples=True, callback=None):
    """Runs SGLD, PreconditionedSGLD, SGRLD or HAMCMC on a LinearGaussian model; see
    pymf.sample. callback(t, trace) at every trace point; returning True stops the run."""
    from pymf.sampling import check_count
    samplers = (HAMCMC, PreconditionedSGLD, SGRLD, SGLD)
    if not isinstance(sampler, samplers):
        raise ValueError(f"a LinearGaussian model is sampled by pymf.SGLD, pymf.PreconditionedSGLD, "
                         f"pymf.SGRLD or pymf.HAMCMC, got {sampler!r}")
    A, x = model.check_data(data)
    N, D = A.shape
    n_samples = check_count(n_samples, "n_samples", 1)
    burnin = check_count(burnin, "burnin", 0)
    thin = check_count(thin, "thin", 1)
    if thin > n_samples:
        raise ValueError(f"thin={thin} is larger than n_samples={n_samples}: nothing would be kept")
    total = burnin + n_samples
    trace_every = check_count(max(1, total // 200) if trace_every is None else trace_every,
                              "trace_every", 1)
    keep_samples = check_flag(keep_samples, "keep_samples")
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable, got {callback!r}")
    seed = check_seed(seed)
    noise_child, init_child = np.random.SeedSequence(int(seed)).spawn(2)
    noise_seed = int(noise_child.generate_state(1, np.uint64)[0])
    theta0 = _check_init(init, model, D, np.random.default_rng(init_child))
    exact_mean, exact_cov = model.posterior((A, x))
    if isinstance(sampler, SGLD):
        kind, options, batch = "sgld", {}, sampler.batch_size(N)
    else:
        kind, options, batch = sampler.kind, sampler.chain_options(), sampler.batch_size(N)
    if kind == "sgrld":
        options = {"metric_chol": np.linalg.cholesky(exact_cov)}
    chain = _hamcmc.Chain(A, x, model.noise_var, model.prior_var, kind, batch, noise_seed,
                          **options)
    chain.start(theta0)
    kept = _Accumulator(D, n_samples // thin, keep_samples)
    trace = {"iteration": [], "time": [], "mean_error": []}
    params = {"model": model.params(), "sampler": sampler.params(), "seed": int(seed),
              "n_data": N, "dim": D, "n_samples": n_samples, "burnin": burnin, "thin": thin}
    elapsed = 0.0
    t = 0

    def keep(rows, first):
        """The kept ones among the samples of iterations first, first + 1, ..."""
        its = first + np.arange(len(rows))
        mask = (its > burnin) & ((its - burnin) % thin == 0)
        kept.add(rows[mask])

    def result(interrupted=False, iterations=None):
        n = len(trace["time"])
        samples = kept.samples[:kept.n] if kept.samples is not None else None
        return LinearResult(kept.mean(), kept.cov(), samples, kept.n, exact_mean, exact_cov,
                            {k: np.asarray(v[:n], dtype=np.float64) for k, v in trace.items()},
                            params, chain.state()[1] if iterations is None else iterations,
                            chain.skipped_pairs, interrupted)

    interrupt = DeferredInterrupt()
    buffer = np.empty((min(trace_every, total), D))
    try:
        with interrupt:
            while t < total:
                interrupt.check()
                k = min(trace_every - t % trace_every, total - t)
                started = time.perf_counter()
                out = buffer[:k]
                before = chain.state()[0]
                try:
                    chain.run(sampler.step_size(np.arange(t + 1, t + k + 1)), out)
                except DivergenceError as exc:
                    done = int(exc.iteration) - 1 - t  # iterations of this call that finished
                    keep(out[:done], t + 1)
                    exc.theta = chain.state()[0]
                    exc.result = result(interrupted=True)
                    raise
                with np.errstate(over="ignore", invalid="ignore"):
                    runaway = ~np.isfinite(np.einsum("ij,ij->i", out, out))
                if runaway.any():
                    # finite states whose squares overflow (|theta| > 1e154): the chain ran
                    # away; stop at the first, as the C core does at a non-finite one
                    first = int(np.argmax(runaway))
                    keep(out[:first], t + 1)
                    exc = DivergenceError(
                        f"the chain diverged at iteration {t + first + 1}: its state overflows "
                        "when squared (a step size far too large, or extreme data?); the last "
                        "state below that is kept", iteration=t + first + 1)
                    exc.theta = out[first - 1].copy() if first else before
                    exc.result = result(interrupted=True, iterations=t + first)
                    raise exc
                keep(out, t + 1)
                t += k
                with np.errstate(over="ignore", invalid="ignore"):
                    error = float(np.linalg.norm(kept.mean() - exact_mean)) if kept.n else math.nan
                trace["iteration"].append(t)
                trace["mean_error"].append(error)
                elapsed += time.perf_counter() - started
                trace["time"].append(elapsed)
                if callback is not None and callback(t, trace) is True:
                    break
    except ForcedInterrupt:
        raise
    except KeyboardInterrupt:
        warnings.warn(f"interrupted at iteration {t} of {total}; returning the {kept.n} samples "
                      "kept so far", RuntimeWarning, stacklevel=2)
        return result(interrupted=True)
    return result()
