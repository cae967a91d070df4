"""Bayesian PMF sampled by distributed SGLD (Ahn et al., KDD 2015) and its baselines.

    model   = pymf.BPMF(rank=10, tau=2.0)
    sampler = pymf.DSGLD(split="square", blocks=2, batch_size=1000,
                         step_size=pymf.AnnealedStep(2e-4, kappa=100))
    res = pymf.sample(model, train, sampler, n_samples=500, burnin=200, thin=5, seed=0,
                      test=test)
    mean, std = res.predict(users, items)
    res.trace["test_rmse"], res.trace["time"], res.diagnostics()

Samplers of a BPMF model: DSGLD (several chains, square / column / hybrid block splits),
SGLD (one chain, one block: DSGLD(chains=1, split="square", blocks=1)) and BPMFGibbs
(Salakhutdinov & Mnih 2008). Optimisers through pymf.fit: pymf.SGD and pymf.DSGD, the same
minibatch estimator without noise and with the precisions held at their initial values.

Units: DSGLD counts rounds (gamma minibatch steps on the blocks of one orthogonal group per
chain; one sample per chain per round); BPMFGibbs counts sweeps. burnin, n_samples and thin
are in these units.

Seeding: numpy.random.SeedSequence(seed).spawn(3 + 2 C): the permutation of users and items,
the initial state, the Gibbs seed, and for every chain c its Philox key (minibatches and
Langevin noise) and the GSL seed of its precision draws. Results are a pure function of
(seed, data, settings): the same for any number of threads, and for the MPI parameter server
(pymf.mpi_bpmf) with the same settings.
"""
import json
import math
import numbers
import os
import time
import warnings

import numpy as np

from pymf import _bpmf
from pymf.data import Ratings, as_observed, entry_ids, real_array
from pymf.errors import DivergenceError
from pymf.interrupt import DeferredInterrupt, ForcedInterrupt
from pymf.samplers import (AnnealedStep, ConstantStep, PolynomialDecay, _check_threads, check_flag,
                           check_rank, check_real, check_seed)


# ----------------------------------------------------------------------------- model


class BPMF:
    """r_ij ~ N(mean + u_i . v_j + a_i + b_j, 1/tau); u_i ~ N(0, diag(lam_u)^-1),
    v_j ~ N(0, diag(lam_v)^-1), a_i ~ N(0, 1/lam_a), b_j ~ N(0, 1/lam_b); every precision
    ~ Gamma(alpha0, rate beta0).

    Parameters (defaults from the paper's experiments): rank D; tau=2.0; alpha0=1.0,
    beta0=1.0; bias=True (a_i, b_j in the model); mean_rating=None (the training mean);
    init_precision=2.0 (every precision at the start); init_scale=0.1 (standard deviation of
    the initial factors).
    """

    def __init__(self, rank, tau=2.0, alpha0=1.0, beta0=1.0, bias=True, mean_rating=None,
                 init_precision=2.0, init_scale=0.1):
        check_rank(rank)
        for name, value in (("tau", tau), ("alpha0", alpha0), ("beta0", beta0),
                            ("init_precision", init_precision), ("init_scale", init_scale)):
            check_real(value, name, positive=True)
        if mean_rating is not None:
            check_real(mean_rating, "mean_rating")
        self.rank, self.tau = int(rank), float(tau)
        self.alpha0, self.beta0 = float(alpha0), float(beta0)
        self.bias = check_flag(bias, "bias")
        self.mean_rating = None if mean_rating is None else float(mean_rating)
        self.init_precision, self.init_scale = float(init_precision), float(init_scale)

    def params(self):
        return {"model": "bpmf", "rank": self.rank, "tau": self.tau, "alpha0": self.alpha0,
                "beta0": self.beta0, "bias": self.bias, "mean_rating": self.mean_rating,
                "init_precision": self.init_precision, "init_scale": self.init_scale}

    def __repr__(self):
        return f"BPMF(rank={self.rank}, tau={self.tau}, bias={self.bias})"

    def c_model(self, mean_rating):
        """The tuple the C bindings take."""
        return (self.rank, self.tau, float(mean_rating), self.bias, self.alpha0, self.beta0)

    def check_data(self, data, what="training data"):
        """Validated Ratings (NaN/inf, indices and duplicates are checked by pymf.Ratings)."""
        ratings = as_observed(data)
        if not isinstance(ratings, Ratings):
            ratings = Ratings.from_dense(ratings)
        if ratings.nnz == 0:
            raise ValueError(f"BPMF needs at least one rating; the {what} {'is' if what == 'test set' else 'are'} empty")
        if max(ratings.shape) > 2**31 - 1:
            raise ValueError(f"BPMF takes at most 2**31 - 1 users and items, got shape {ratings.shape}")
        return ratings


def as_round_step(step_size):
    if isinstance(step_size, (AnnealedStep, ConstantStep, PolynomialDecay)):
        return step_size
    if isinstance(step_size, numbers.Real) and not isinstance(step_size, bool):
        return ConstantStep(step_size)
    raise ValueError(f"step_size must be a float, AnnealedStep or PolynomialDecay, got {step_size!r}")


def _count(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def split_grid(split, blocks):
    """(P, Q) of a split scheme: square B -> B x B, column S -> S x 1, hybrid (P, Q)."""
    if split == "square":
        B = _count(2 if blocks is None else blocks, "blocks", 1)
        return B, B
    if split == "column":
        S = _count(4 if blocks is None else blocks, "blocks", 1)
        return S, 1
    if split == "hybrid":
        try:
            P, Q = blocks
        except (TypeError, ValueError):
            raise ValueError("split='hybrid' needs blocks=(row_stripes, column_stripes)") from None
        return _count(P, "row stripes", 1), _count(Q, "column stripes", 1)
    raise ValueError(f"split must be 'square', 'column' or 'hybrid', got {split!r}")


MAX_CHAINS = 4096  # each chain holds a copy of U and V and is evaluated at every kept sample


class DSGLD:
    """Distributed SGLD for BPMF (shared memory; pymf.mpi_bpmf runs the same chains over MPI).

    chains       number of chains (default: the number of orthogonal groups, max(P, Q), so
                 that every block is busy in every round, as in the paper)
    split        "square" (blocks=B: B x B grid, groups of B orthogonal blocks), "column"
                 (blocks=S: S row stripes, each block its own group) or "hybrid"
                 (blocks=(P, Q))
    workers      OpenMP threads over the (chain, block) tasks of a round (None: all cores)
    batch_size   m, ratings per minibatch (drawn with replacement from one block)
    round_length gamma, minibatch steps per block between exchanges
    step_size    AnnealedStep(eps0, kappa) (eps_t = eps0 (1 + t/kappa)^-0.51 per round) or a
                 float; convention theta += eps grad + N(0, 2 eps)
    hyper_every  Gibbs draw of the precisions every this many rounds (0: never)
    noise_correction  True (default): a touched row gets noise N(0, 2 eps / hbar_i), which
                 keeps the chain on the posterior; False: N(0, 2 eps) as in the paper, which
                 samples a tempered posterior (too narrow for rows with hbar_i < 1)
    """

    kind = "dsgld"

    def __init__(self, chains=None, split="square", blocks=None, workers=None, batch_size=1000,
                 round_length=50, step_size=AnnealedStep(1e-4), hyper_every=10, permute=True,
                 noise_correction=True):
        self.split = split
        self.grid = split_grid(split, blocks)
        self.blocks = blocks
        self.chains = None if chains is None else _count(chains, "chains", 1)
        if self.chains is not None and self.chains > MAX_CHAINS:
            raise ValueError(f"chains={chains} is too many (at most {MAX_CHAINS})")
        self.workers = _check_threads(workers, "workers") or None
        self.batch_size = _count(batch_size, "batch_size", 1)
        self.round_length = _count(round_length, "round_length", 1)
        if self.round_length > 2**31 - 1:
            raise ValueError(f"round_length={round_length} is too large (at most 2**31 - 1)")
        self.step_size = as_round_step(step_size)
        self.hyper_every = _count(hyper_every, "hyper_every", 0)
        self.permute = check_flag(permute, "permute")
        self.noise_correction = check_flag(noise_correction, "noise_correction")

    @property
    def n_chains(self):
        return self.chains if self.chains is not None else max(self.grid)

    def params(self):
        return {"sampler": "dsgld", "split": self.split, "grid": list(self.grid),
                "chains": self.n_chains, "workers": self.workers, "batch_size": self.batch_size,
                "round_length": self.round_length, "step_size": self.step_size.params(),
                "hyper_every": self.hyper_every, "permute": self.permute,
                "noise_correction": self.noise_correction}

    def __repr__(self):
        return (f"DSGLD(chains={self.n_chains}, split={self.split!r}, grid={self.grid}, "
                f"batch_size={self.batch_size}, step_size={self.step_size!r})")


def SGLD_BPMF(batch_size=1000, round_length=50, step_size=AnnealedStep(1e-4), hyper_every=10,
              workers=None):
    """Single-chain SGLD for BPMF: DSGLD with one chain and one block."""
    return DSGLD(chains=1, split="square", blocks=1, workers=workers, batch_size=batch_size,
                 round_length=round_length, step_size=step_size, hyper_every=hyper_every)


class BPMFGibbs:
    """Gibbs sampling of BPMF (Salakhutdinov & Mnih 2008): every u_i (with a_i) and v_j
    (with b_j) from its Gaussian conditional, in parallel, by Cholesky (GSL).

    hyperprior "wishart": Normal-Wishart on (mu_U, Lambda_U) and (mu_V, Lambda_V) with
    mu0 = 0, beta0=nw_beta0 (2), nu0=nw_nu0 (rank), W0 = nw_w0 I (I): the original BPMF.
    hyperprior "gamma": the diagonal precisions of pymf.BPMF, the exact sampler of the
    model DSGLD samples (used to check DSGLD). workers: OpenMP threads.
    """

    kind = "gibbs"

    def __init__(self, hyperprior="wishart", nw_beta0=2.0, nw_nu0=None, nw_w0=1.0, workers=None):
        if hyperprior not in ("wishart", "gamma"):
            raise ValueError(f"hyperprior must be 'wishart' or 'gamma', got {hyperprior!r}")
        self.hyperprior = hyperprior
        self.nw_beta0 = check_real(nw_beta0, "nw_beta0", positive=True)
        self.nw_w0 = check_real(nw_w0, "nw_w0", positive=True)
        self.nw_nu0 = None if nw_nu0 is None else check_real(nw_nu0, "nw_nu0", positive=True)
        self.workers = _check_threads(workers, "workers") or None
        self.n_chains = 1

    def params(self):
        return {"sampler": "bpmf_gibbs", "hyperprior": self.hyperprior, "nw_beta0": self.nw_beta0,
                "nw_nu0": self.nw_nu0, "nw_w0": self.nw_w0, "workers": self.workers}

    def __repr__(self):
        return f"BPMFGibbs(hyperprior={self.hyperprior!r})"


# ----------------------------------------------------------------------------- layout


def bpmf_seeds(seed, n_chains):
    check_seed(seed)
    children = np.random.SeedSequence(int(seed)).spawn(3 + 2 * n_chains)
    permute_rng = np.random.default_rng(children[0])
    init_rng = np.random.default_rng(children[1])
    gibbs = children[2].generate_state(2, np.uint64)
    noise = np.array([c.generate_state(1, np.uint64)[0] for c in children[3::2]], dtype=np.uint64)
    hyper = np.array([c.generate_state(1, np.uint64)[0] for c in children[4::2]], dtype=np.uint64)
    return permute_rng, init_rng, gibbs, noise, hyper


class Layout:
    """Users and items permuted into grid order and cut into P x Q blocks.

    user_of[g] is the original user at grid position g; user_pos is its inverse."""

    def __init__(self, ratings, grid, permute, rng):
        L, M = ratings.shape
        P, Q = grid
        if P > L or Q > M:
            raise ValueError(f"a {P} x {Q} block split needs at least {P} users and {Q} items "
                             f"(the data have {L} x {M}): too many blocks")
        self.user_of = rng.permutation(L) if permute else np.arange(L)
        self.item_of = rng.permutation(M) if permute else np.arange(M)
        self.user_pos = np.empty(L, dtype=np.int64)
        self.user_pos[self.user_of] = np.arange(L)
        self.item_pos = np.empty(M, dtype=np.int64)
        self.item_pos[self.item_of] = np.arange(M)
        row_start = np.linspace(0, L, P + 1).round().astype(np.int64)
        col_start = np.linspace(0, M, Q + 1).round().astype(np.int64)
        users = self.user_pos[ratings.rows]
        items = self.item_pos[ratings.cols]
        block = (np.searchsorted(row_start, users, side="right") - 1) * Q + \
            (np.searchsorted(col_start, items, side="right") - 1)
        order = np.lexsort((items, users, block))
        block_ptr = np.zeros(P * Q + 1, dtype=np.int64)
        np.cumsum(np.bincount(block, minlength=P * Q), out=block_ptr[1:])
        self.c = _bpmf.BlockLayout(L, M, row_start, col_start, block_ptr, users[order],
                                   items[order], ratings.values[order])
        self.shape = (L, M)

    def users_items(self, users, items):
        """Original (user, item) ids -> grid positions (validated)."""
        users = np.asarray(users)
        items = np.asarray(items)
        if users.shape != items.shape or users.ndim != 1:
            raise ValueError("users and items must be 1-D arrays of the same length")
        for name, ids, n in (("user", users, self.shape[0]), ("item", items, self.shape[1])):
            if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= n):
                raise ValueError(f"{name} ids must be integers in [0, {n})")
        return (self.user_pos[users.astype(np.int64)].astype(np.int32),
                self.item_pos[items.astype(np.int64)].astype(np.int32))

    def to_original(self, U, V, a, b):
        return U[self.user_pos], V[self.item_pos], a[self.user_pos], b[self.item_pos]

    def to_grid(self, U, V, a, b):
        return U[self.user_of], V[self.item_of], a[self.user_of], b[self.item_of]


def _initial_params(model, shape, rng):
    L, M = shape
    D = model.rank
    return (rng.normal(0.0, model.init_scale, (L, D)), rng.normal(0.0, model.init_scale, (M, D)),
            np.zeros(L), np.zeros(M), np.full(2 * D + 2, model.init_precision))


# ----------------------------------------------------------------------------- result


class Welford:
    """Streaming mean and variance of a vector of predictions."""

    def __init__(self, n):
        self.count = 0
        self.mean = np.zeros(n)
        self.m2 = np.zeros(n)

    def add(self, x):
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)

    def std(self):
        return np.sqrt(self.m2 / self.count) if self.count else np.full_like(self.mean, np.nan)


class BPMFResult:
    """What pymf.sample returns for a BPMF model.

    test_mean, test_std   posterior predictive mean and standard deviation of every test
                          rating over all kept samples of all chains (Welford, streaming)
    samples               dict of arrays (kept, chains, ...) of U, V, a, b (original order)
                          when keep_samples=True, else None
    trace                 iteration (rounds or sweeps), time (s), train_rmse (mean of the
                          chains' current states), test_rmse (the running average of the
                          kept samples; NaN during burn-in: the test RMSE of a single sample
                          is never reported)
    last_state            the chains' final (on divergence: last finite) U, V, a, b, each
                          (chains, ...) in the original order
    summaries             per kept sample and chain: train_rmse, norm_U, norm_V, lam_u_mean,
                          lam_v_mean (and lam_a, lam_b with biases): for diagnostics()
    """

    def __init__(self, test_mean, test_std, test_count, samples, trace, summaries, params,
                 burnin_end, mean_rating, tau, test_pairs=None, last_state=None):
        self.test_mean, self.test_std, self.test_count = test_mean, test_std, test_count
        self.samples, self.trace, self.summaries = samples, trace, summaries
        self.params, self.burnin_end = params, burnin_end
        self.mean_rating, self.tau = mean_rating, tau
        self.test_pairs = test_pairs
        self.last_state = last_state
        self.interrupted = False

    def __repr__(self):
        rmse = self.trace["test_rmse"][-1] if len(self.trace.get("test_rmse", [])) else float("nan")
        return (f"BPMFResult({self.params.get('sampler', {}).get('sampler')}, "
                f"test_rmse={rmse:.4f}, kept={self.test_count})")

    def predict(self, users, items, noise=False, return_std=True):
        """(mean, std) of the posterior predictive for (user, item) pairs (original ids).

        std is the posterior standard deviation of the expected rating; noise=True adds the
        observation noise 1/tau (the predictive distribution of a new rating). Uses the kept
        samples; without them only the test pairs (tracked by Welford) can be predicted."""
        shape = (self.last_state["U"].shape[1], self.last_state["V"].shape[1]) \
            if self.last_state is not None else (np.inf, np.inf)
        users, items = entry_ids(users, items, shape, ("user", "item"))
        if self.samples is not None:
            s = self.samples
            acc = Welford(len(users))
            for k in range(s["U"].shape[0]):
                for c in range(s["U"].shape[1]):
                    acc.add(self.mean_rating + np.einsum("nd,nd->n", s["U"][k, c][users],
                                                         s["V"][k, c][items])
                            + s["a"][k, c][users] + s["b"][k, c][items])
            mean, std = acc.mean, acc.std()
        elif self.test_pairs is not None and np.array_equal(users, self.test_pairs[0]) \
                and np.array_equal(items, self.test_pairs[1]):
            mean, std = self.test_mean.copy(), self.test_std.copy()
        else:
            raise ValueError("this result kept no samples (keep_samples=False): only the test "
                             "pairs can be predicted")
        if check_flag(noise, "noise"):
            std = np.sqrt(std ** 2 + 1.0 / self.tau)
        return (mean, std) if return_std else mean

    def diagnostics(self):
        """Split-R-hat and effective sample size across chains of the scalar summaries."""
        from pymf.diagnostics import ess, split_rhat
        return {name: {"rhat": split_rhat(x), "ess": ess(x)} for name, x in self.summaries.items()
                if x.shape[1] >= 4}

    def save(self, path):
        """One .npz (no pickle); pymf.load reads it back."""
        arrays = {"test_mean": self.test_mean, "test_std": self.test_std}
        for key, value in self.trace.items():
            arrays["trace_" + key] = np.asarray(value)
        for key, value in self.summaries.items():
            arrays["summary_" + key] = value
        if self.samples is not None:
            for key, value in self.samples.items():
                arrays["sample_" + key] = value
        if self.test_pairs is not None:
            arrays["test_users"], arrays["test_items"] = self.test_pairs
        if self.last_state is not None:
            for key, value in self.last_state.items():
                arrays["last_" + key] = value
        meta = {"kind": "bpmf", "params": self.params, "burnin_end": self.burnin_end,
                "mean_rating": self.mean_rating, "tau": self.tau, "test_count": self.test_count}
        from pymf.result import npz_path
        path = npz_path(path)
        tmp = path + ".tmp.npz"  # written whole, then renamed: a crash never leaves half a file
        np.savez(tmp, meta=json.dumps(meta), **arrays)
        os.replace(tmp, path)
        return path


def load_bpmf(archive, meta):
    get = {name: archive[name] for name in archive.files}
    trace = {k[6:]: v for k, v in get.items() if k.startswith("trace_")}
    summaries = {k[8:]: v for k, v in get.items() if k.startswith("summary_")}
    samples = {k[7:]: v for k, v in get.items() if k.startswith("sample_")} or None
    pairs = (get["test_users"], get["test_items"]) if "test_users" in get else None
    last = {k[5:]: v for k, v in get.items() if k.startswith("last_")} or None
    return BPMFResult(get["test_mean"], get["test_std"], meta["test_count"], samples, trace,
                      summaries, meta["params"], meta["burnin_end"], meta["mean_rating"],
                      meta["tau"], pairs, last)


# ----------------------------------------------------------------------------- driver


def _sum_sq(x):
    """Sum of squares without BLAS: on a small machine OpenBLAS's thread pool spinning next
    to the OpenMP threads of the samplers made every evaluation ~10x slower."""
    x = np.ravel(x)
    return float(np.einsum("i,i->", x, x))


def _rmse(sq_error, n):
    return math.sqrt(sq_error / n) if n else float("nan")


_CHAIN_ARRAYS = ("U", "V", "a", "b", "lambdas")  # a DSGLD chain's state (with the round)


class _Chains:
    """A common face for DSGLD chains and the Gibbs chain: run k units, predictions,
    squared training error, state summaries."""

    def __init__(self, model, ratings, sampler, seed, mean_rating, n_threads):
        self.model, self.sampler = model, sampler
        self.n_chains = sampler.n_chains
        permute_rng, init_rng, gibbs_seeds, noise_seeds, hyper_seeds = bpmf_seeds(seed, self.n_chains)
        self.c_model = model.c_model(mean_rating)
        self.nnz = ratings.nnz
        if isinstance(sampler, DSGLD):
            self.layout = Layout(ratings, sampler.grid, sampler.permute, permute_rng)
            self.c = _bpmf.DSGLDChains(self.layout.c, self.c_model, self.n_chains,
                                       sampler.batch_size, sampler.round_length,
                                       sampler.hyper_every, True, noise_seeds, hyper_seeds,
                                       n_threads, sampler.noise_correction)
            for c in range(self.n_chains):
                self.c.set_state(c, *_initial_params(model, ratings.shape, init_rng), 0)
            self.t = 0
        else:
            self.layout = Layout(ratings, (1, 1), False, permute_rng)
            L, M = ratings.shape
            by_user = np.lexsort((ratings.cols, ratings.rows))
            by_item = np.lexsort((ratings.rows, ratings.cols))
            user_ptr = np.zeros(L + 1, dtype=np.int64)
            np.cumsum(np.bincount(ratings.rows, minlength=L), out=user_ptr[1:])
            item_ptr = np.zeros(M + 1, dtype=np.int64)
            np.cumsum(np.bincount(ratings.cols, minlength=M), out=item_ptr[1:])
            self.c = _bpmf.BPMFGibbsChain(
                self.c_model, L, M, user_ptr, ratings.cols[by_user], ratings.values[by_user],
                item_ptr, ratings.rows[by_item], ratings.values[by_item], sampler.hyperprior,
                sampler.nw_beta0, sampler.nw_nu0, sampler.nw_w0, int(gibbs_seeds[0]),
                int(gibbs_seeds[1]), n_threads)
            U, V, a, b, lambdas = _initial_params(model, ratings.shape, init_rng)
            hyper = np.zeros(self.c.hyper_size)
            D = model.rank
            if sampler.hyperprior == "wishart":
                hyper[D:D + D * D] = np.eye(D).ravel() * model.init_precision
                hyper[2 * D + D * D:2 * D + 2 * D * D] = np.eye(D).ravel() * model.init_precision
                hyper[-2:] = model.init_precision
            else:
                hyper[:] = lambdas
            self.c.set_state(U, V, a, b, hyper, 0)
            self.train_pairs = (ratings.rows.astype(np.int32), ratings.cols.astype(np.int32))
            self.train_values = ratings.values
            self.t = 0

    @property
    def is_gibbs(self):
        return isinstance(self.c, _bpmf.BPMFGibbsChain)

    def set_initial(self, init):
        """Start every chain from init (check_init's dict, original order); the precisions
        keep their initial values."""
        for c in range(self.n_chains):
            U, V, a, b = self.layout.to_grid(*(init[key][c] for key in "UVab"))
            if self.is_gibbs:
                hyper = self.c.get_state()[4]
                self.c.set_state(U, V, a, b, hyper, 0)
            else:
                self.c.set_state(c, U, V, a, b, self.c.get_state(c).lambdas, 0)

    def checkpoint_state(self):
        """The chains' whole state (grid order) and their counter (round or sweep): with
        the counter-based noise and the per-round GSL seeds, nothing else is needed to go on."""
        if self.is_gibbs:
            U, V, a, b, hyper, sweep = self.c.get_state()
            return {"U": U, "V": V, "a": a, "b": b, "hyper": hyper, "counter": np.array(sweep)}
        params = [self.c.get_state(c) for c in range(self.n_chains)]
        state = {key: np.stack([getattr(p, key) for p in params]) for key in _CHAIN_ARRAYS}
        state["counter"] = np.array(self.c.round)
        return state

    def restore_state(self, state):
        counter = int(state["counter"])
        if self.is_gibbs:
            self.c.set_state(*(state[key] for key in ("U", "V", "a", "b", "hyper")), counter)
        else:
            for c in range(self.n_chains):
                self.c.set_state(c, *(state[key][c] for key in _CHAIN_ARRAYS), counter)
        self.t = counter

    def run(self, steps):
        if self.is_gibbs:
            self.c.run(len(steps))
        else:
            self.c.run(steps)
        self.t += len(steps)

    def predict(self, chain, users_grid, items_grid):
        if self.is_gibbs:
            return self.c.predict(self.layout.user_of[users_grid], self.layout.item_of[items_grid])
        return self.c.predict(chain, users_grid, items_grid)

    def train_rmse(self, chain):
        if self.is_gibbs:
            r = self.c.predict(*self.train_pairs) - self.train_values
            return _rmse(_sum_sq(r), self.nnz)
        return _rmse(self.c.sq_error(chain), self.nnz)

    def state(self, chain):
        """(U, V, a, b, lambda summary dict) in the original order."""
        if self.is_gibbs:
            U, V, a, b, hyper, _ = self.c.get_state()
            D = self.model.rank
            if self.sampler.hyperprior == "wishart":
                lam_u = np.diag(hyper[D:D + D * D].reshape(D, D))
                lam_v = np.diag(hyper[2 * D + D * D:2 * D + 2 * D * D].reshape(D, D))
            else:
                lam_u, lam_v = hyper[:D], hyper[D:2 * D]
            return U, V, a, b, {"lam_u_mean": lam_u.mean(), "lam_v_mean": lam_v.mean(),
                                "lam_a": hyper[-2], "lam_b": hyper[-1]}
        p = self.c.get_state(chain)
        D = self.model.rank
        U, V, a, b = self.layout.to_original(p.U, p.V, p.a, p.b)
        lam = p.lambdas
        return U, V, a, b, {"lam_u_mean": lam[:D].mean(), "lam_v_mean": lam[D:2 * D].mean(),
                            "lam_a": lam[2 * D], "lam_b": lam[2 * D + 1]}


def sample_bpmf(model, data, sampler, n_samples, burnin=0, thin=1, seed=0, test=None,
                trace_every=None, keep_samples=True, burnin_rmse=None, progress=None,
                callback=None, n_threads=None, init=None, checkpoint=None,
                checkpoint_every=None, sample_dir=None, _chains=None):
    """Runs a BPMF sampler (DSGLD or BPMFGibbs); see pymf.sample and the module docstring.

    burnin       rounds (DSGLD) or sweeps (Gibbs) of burn-in; with burnin_rmse, the largest
                 number of them
    burnin_rmse  burn-in ends as soon as the chains' mean training RMSE is at or below this
                 value (checked every trace_every units)
    callback     called as callback(t, trace) at every trace point; returning True stops
                 the run there (the result holds everything so far)
    init         the starting state instead of a random one: a dict with U (users x rank)
                 and V (items x rank), optionally a and b (the biases), in the original
                 order, each for all chains or stacked per chain (chains x ...); a previous
                 result's last_state continues its chains
    checkpoint   a .npz path: if it exists the run resumes from it (the same chains, bit for
                 bit, as a run that never stopped), and it is rewritten every
                 checkpoint_every units (default: a tenth of burnin + n_samples), at the end,
                 when the callback stops the run and on Ctrl-C
    sample_dir   stream the kept samples to .npy files there (U_samples.npy, ...: kept x
                 chains x ...) instead of memory; the result's samples are memory maps
    """
    if not isinstance(sampler, (DSGLD, BPMFGibbs)):
        raise ValueError(f"a BPMF model is sampled by pymf.DSGLD, pymf.SGLD or pymf.BPMFGibbs, "
                         f"got {sampler!r}")
    ratings = model.check_data(data)
    n_samples = _count(n_samples, "n_samples", 1)
    burnin = _count(burnin, "burnin", 0)
    thin = _count(thin, "thin", 1)
    if thin > n_samples:
        raise ValueError(f"thin={thin} is larger than n_samples={n_samples}: nothing would be kept")
    if isinstance(sampler, DSGLD) and sampler.batch_size > ratings.nnz:
        raise ValueError(f"batch_size={sampler.batch_size} is larger than the {ratings.nnz} "
                         "training ratings")
    if burnin_rmse is not None and not (isinstance(burnin_rmse, numbers.Real) and burnin_rmse > 0):
        raise ValueError(f"burnin_rmse must be a positive number, got {burnin_rmse!r}")
    if test is not None:
        test = model.check_data(test, "test set")
        if test.shape != ratings.shape:
            raise ValueError(f"the test set has shape {test.shape}, the training data {ratings.shape}")
    mean_rating = float(ratings.values.mean()) if model.mean_rating is None else model.mean_rating
    if n_threads is None:
        n_threads = sampler.workers or 0
    total_max = burnin + n_samples
    if trace_every is None:
        trace_every = max(1, min(thin, total_max // 100 or 1))
    trace_every = _count(trace_every, "trace_every", 1)
    checkpoint_every = _count(max(1, total_max // 10) if checkpoint_every is None
                              else checkpoint_every, "checkpoint_every", 1)
    if checkpoint is not None:
        from pymf.result import npz_path
        checkpoint = npz_path(checkpoint, "checkpoint")
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable, got {callback!r}")
    keep_samples = check_flag(keep_samples, "keep_samples")
    n_chains = _chains.n_chains if _chains is not None else sampler.n_chains
    init = check_init(init, model, ratings.shape, n_chains)
    # _chains: pymf.mpi_bpmf's parameter server, which has the same face as _Chains
    chains = _chains if _chains is not None else _Chains(model, ratings, sampler, seed,
                                                         mean_rating, n_threads)
    if init is not None:
        chains.set_initial(init)
    run = _BPMFRun(chains, model, ratings, sampler, seed, test, mean_rating, keep_samples)
    run.burnin_end = None if burnin_rmse is not None else burnin  # None: not reached yet
    fingerprint = None
    if checkpoint is not None:
        fingerprint = json.dumps({
            "model": model.params(), "sampler": _without_workers(sampler.params()),
            "seed": seed, "n_samples": n_samples, "burnin": burnin, "thin": thin,
            "burnin_rmse": burnin_rmse, "trace_every": trace_every, "keep_samples": bool(keep_samples),
            "data": _digest(ratings), "test": None if test is None else _digest(test),
            "init": None if init is None else _digest(init),
            "streamed": sample_dir is not None and bool(keep_samples)}, sort_keys=True)
    resuming = checkpoint is not None and os.path.exists(checkpoint)
    if sample_dir is not None and keep_samples:
        run.stream_samples(os.fspath(sample_dir), n_samples // thin, resuming)
    if resuming:
        run.restore(checkpoint, fingerprint)
    step = getattr(sampler, "step_size", None)
    show = progress if progress is not None else False
    interrupt = DeferredInterrupt()
    try:
        with interrupt:
            while True:
                # Ctrl-C takes effect here, where the chains and the bookkeeping agree
                interrupt.check()
                t, n_after = run.t, run.n_after
                if run.burnin_end is not None and n_after >= n_samples:
                    break
                if run.burnin_end is None and t >= burnin:
                    warnings.warn(f"burn-in did not reach training RMSE {burnin_rmse} within "
                                  f"{burnin} units; sampling starts anyway", RuntimeWarning,
                                  stacklevel=2)
                    run.burnin_end = t
                    continue
                # next event: a trace point, a kept sample, a checkpoint or the end
                if run.burnin_end is None:
                    k = min(trace_every - t % trace_every, burnin - t)
                else:
                    k = min(trace_every - t % trace_every, thin - n_after % thin,
                            n_samples - n_after)
                if checkpoint is not None:
                    k = min(k, checkpoint_every - t % checkpoint_every)
                start = time.perf_counter()
                steps = step(np.arange(t + 1, t + k + 1)) if step is not None else np.zeros(k)
                chains.run(np.ascontiguousarray(steps, dtype=np.float64))
                t += k
                if run.burnin_end is not None:
                    n_after += k
                    if n_after % thin == 0:
                        run.keep()
                finished = run.burnin_end is not None and n_after == n_samples
                traced = t % trace_every == 0 or finished
                if traced:
                    train = float(np.mean([chains.train_rmse(c) for c in range(chains.n_chains)]))
                    run.trace["iteration"].append(t)
                    run.trace["train_rmse"].append(train)
                    run.trace["test_rmse"].append(run.test_rmse)
                    if run.burnin_end is None and train <= burnin_rmse:
                        run.burnin_end = t
                run.t, run.n_after = t, n_after
                run.elapsed += time.perf_counter() - start
                stop = False
                if traced:
                    run.trace["time"].append(run.elapsed)
                    if show:
                        print(f"[{t}] train {run.trace['train_rmse'][-1]:.4f} test "
                              f"{run.test_rmse:.4f} {run.elapsed:.1f}s", flush=True)
                    # the caller may ask to stop (e.g. a wall-time budget)
                    stop = callback is not None and callback(t, run.trace) is True
                if checkpoint is not None and (t % checkpoint_every == 0 or finished or stop):
                    run.save(checkpoint, fingerprint)
                if stop:
                    break
    except ForcedInterrupt:
        raise
    except KeyboardInterrupt:
        # Ctrl-C: return what was sampled so far (the last unit finished or was undone)
        if checkpoint is not None:
            run.save(checkpoint, fingerprint)
        result = run.finish()
        result.interrupted = True
        return result
    except DivergenceError as exc:
        exc.partial = run.finish()
        raise
    return run.finish()


def _without_workers(params):
    """Sampler settings that decide the chains: the thread count (and the MPI layout) do not."""
    return {key: value for key, value in params.items() if key != "workers"}


def _digest(value):
    """A short hash of Ratings or of a dict of arrays (for checkpoint fingerprints)."""
    import hashlib
    digest = hashlib.sha256()
    if isinstance(value, Ratings):
        arrays = (value.rows, value.cols, value.values, np.asarray(value.shape))
    else:
        arrays = [np.asarray(value[key]) for key in sorted(value)]
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(repr(array.shape).encode())
    return digest.hexdigest()[:16]


def check_init(init, model, shape, n_chains):
    """The init= of a BPMF run, validated: a dict U, V, a, b of arrays (n_chains, ...) in the
    original order, or None."""
    if init is None:
        return None
    if not isinstance(init, dict) or "U" not in init or "V" not in init:
        raise ValueError("init must be a dict with U (users x rank) and V (items x rank), "
                         "optionally a and b (e.g. a previous result's last_state)")
    unknown = set(init) - set("UVab")
    if unknown:
        raise ValueError(f"init has unknown entries {sorted(unknown)}: use U, V, a and b")
    L, M = shape
    D = model.rank
    out = {}
    for key, single in (("U", (L, D)), ("V", (M, D)), ("a", (L,)), ("b", (M,))):
        if key not in init:
            out[key] = np.zeros((n_chains,) + single)
            continue
        value = real_array(init[key], f"init[{key!r}]")
        if value.shape == single:
            value = np.broadcast_to(value, (n_chains,) + single)
        if value.shape != (n_chains,) + single:
            raise ValueError(f"init[{key!r}] has shape {value.shape}: expected {single} or, one "
                             f"per chain, {(n_chains,) + single}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"init[{key!r}] contains NaN or inf")
        out[key] = np.ascontiguousarray(value)
    return out


class _BPMFRun:
    """What a BPMF run accumulates besides the chains' state (counters, Welford predictions,
    kept samples, summaries, traces), and its checkpoints."""

    def __init__(self, chains, model, ratings, sampler, seed, test, mean_rating, keep_samples):
        self.chains, self.model, self.ratings, self.sampler = chains, model, ratings, sampler
        self.n_kept = 0  # kept units (each one a sample of every chain)
        self.streamed = None  # {U, V, a, b}: .npy memory maps (stream_samples)
        self.seed, self.test, self.mean_rating = seed, test, mean_rating
        self.t = 0
        self.n_after = 0  # units run since burn-in ended
        self.burnin_end = None
        self.elapsed = 0.0  # time in the samplers and their bookkeeping, not in callbacks
        self.test_rmse = float("nan")
        if test is not None:
            self.test_users, self.test_items = chains.layout.users_items(test.rows, test.cols)
        self.welford = Welford(test.nnz) if test is not None else None
        self.kept_samples = {"U": [], "V": [], "a": [], "b": []} if keep_samples else None
        self.summaries = {}
        self.trace = {"iteration": [], "time": [], "train_rmse": [], "test_rmse": []}

    def keep(self):
        """A kept sample of every chain: predictions, samples, summaries."""
        chains, test = self.chains, self.test
        C = chains.n_chains
        for c in range(C):
            if test is not None:
                self.welford.add(chains.predict(c, self.test_users, self.test_items))
            U, V, a, b, lam = chains.state(c)
            for key, value in zip("UVab", (U, V, a, b)):
                if self.streamed is not None:
                    self.streamed[key][self.n_kept, c] = value
                elif self.kept_samples is not None:
                    self.kept_samples[key].append(value)
            row = {"train_rmse": chains.train_rmse(c), "norm_U": math.sqrt(_sum_sq(U)),
                   "norm_V": math.sqrt(_sum_sq(V)), **lam}
            for key, value in row.items():
                if key not in self.summaries:
                    self.summaries[key] = [[] for _ in range(C)]
                self.summaries[key][c].append(value)
        if test is not None:
            self.test_rmse = _rmse(_sum_sq(self.welford.mean - test.values), test.nnz)
        self.n_kept += 1

    def stream_samples(self, sample_dir, n_keep, resuming):
        """Kept samples go to sample_dir/{U,V,a,b}_samples.npy, each (n_keep, chains, ...)
        in the original order, instead of memory; a resumed run reopens them (never
        truncates)."""
        open_memmap = np.lib.format.open_memmap
        os.makedirs(sample_dir, exist_ok=True)
        (L, M), D, C = self.ratings.shape, self.model.rank, self.chains.n_chains
        shapes = {"U": (n_keep, C, L, D), "V": (n_keep, C, M, D), "a": (n_keep, C, L),
                  "b": (n_keep, C, M)}
        self.streamed = {}
        for key, shape in shapes.items():
            path = os.path.join(sample_dir, f"{key}_samples.npy")
            if not resuming:
                self.streamed[key] = open_memmap(path, mode="w+", dtype=np.float64, shape=shape)
                continue
            if not os.path.exists(path):
                raise ValueError(f"resuming from a checkpoint, but the streamed samples {path!r} "
                                 "are missing")
            self.streamed[key] = open_memmap(path, mode="r+")
            if self.streamed[key].shape != shape:
                raise ValueError(f"the streamed samples {path!r} do not match this run")
        self.kept_samples = None

    def save(self, path, fingerprint):
        """Everything needed to go on as if the run had not stopped, in one .npz written
        whole and then renamed (a crash never leaves half a checkpoint)."""
        arrays = {"fingerprint": np.array(fingerprint),
                  "counters": np.array([self.t, self.n_after,
                                        -1 if self.burnin_end is None else self.burnin_end,
                                        self.n_kept]),
                  "elapsed": np.array(self.elapsed), "test_rmse": np.array(self.test_rmse)}
        for key, value in self.chains.checkpoint_state().items():
            arrays["chain_" + key] = value
        if self.welford is not None:
            arrays["welford_count"] = np.array(self.welford.count)
            arrays["welford_mean"], arrays["welford_m2"] = self.welford.mean, self.welford.m2
        if self.streamed is not None:
            for value in self.streamed.values():
                value.flush()  # before the checkpoint that counts these samples
        elif self.kept_samples is not None:
            for key, value in self.kept_samples.items():
                arrays["kept_" + key] = np.asarray(value)
        for key, value in self.summaries.items():
            arrays["summary_" + key] = np.asarray(value, dtype=np.float64)
        for key, value in self.trace.items():
            arrays["trace_" + key] = np.asarray(value, dtype=np.float64)
        tmp = path + ".tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, path)

    def restore(self, path, fingerprint):
        from pymf.result import open_checkpoint
        with open_checkpoint(path) as ck:
            if str(ck["fingerprint"]) != fingerprint:
                raise ValueError(
                    f"the checkpoint {path!r} was written by a different run (model, sampler, "
                    "seed, data, init or run length differ); remove it or pass another path")
            self.chains.restore_state({key[6:]: ck[key] for key in ck.files
                                       if key.startswith("chain_")})
            t, n_after, burnin_end, self.n_kept = (int(x) for x in ck["counters"])
            self.t, self.n_after = t, n_after
            self.burnin_end = None if burnin_end < 0 else burnin_end
            self.elapsed, self.test_rmse = float(ck["elapsed"]), float(ck["test_rmse"])
            if self.welford is not None:
                self.welford.count = int(ck["welford_count"])
                self.welford.mean = ck["welford_mean"].copy()
                self.welford.m2 = ck["welford_m2"].copy()
            if self.kept_samples is not None:
                self.kept_samples = {key: list(ck["kept_" + key]) for key in "UVab"}
            self.summaries = {key[8:]: [list(row) for row in ck[key]] for key in ck.files
                              if key.startswith("summary_")}
            self.trace = {key: list(ck["trace_" + key]) for key in self.trace}
            self.trace["iteration"] = [int(x) for x in self.trace["iteration"]]

    def finish(self):
        chains, test, C = self.chains, self.test, self.chains.n_chains
        n = len(self.trace["time"])
        trace = {k: np.asarray(v[:n], dtype=np.float64) for k, v in self.trace.items()}
        samples = None
        if self.streamed is not None:
            if self.n_kept:
                samples = {key: value[:self.n_kept] for key, value in self.streamed.items()}
        elif self.kept_samples is not None and self.kept_samples["U"]:
            samples = {key: np.stack(value).reshape((-1, C) + value[0].shape)
                       for key, value in self.kept_samples.items()}
        summaries = {k: np.asarray(v, dtype=np.float64) for k, v in self.summaries.items()}
        states = [chains.state(c)[:4] for c in range(C)]
        last_state = {key: np.stack([st[k] for st in states]) for k, key in enumerate("UVab")}
        params = {"model": self.model.params(), "sampler": self.sampler.params(),
                  "seed": self.seed, "shape": list(self.ratings.shape), "nnz": self.ratings.nnz}
        if test is not None:
            return BPMFResult(self.welford.mean.copy(), self.welford.std(), self.welford.count,
                              samples, trace, summaries, params, self.burnin_end,
                              self.mean_rating, self.model.tau,
                              (test.rows.copy(), test.cols.copy()), last_state)
        return BPMFResult(np.zeros(0), np.zeros(0), 0, samples, trace, summaries, params,
                          self.burnin_end, self.mean_rating, self.model.tau, None, last_state)


# ----------------------------------------------------------------------------- optimisers


class BPMFFit:
    """MAP estimate of BPMF by (D)SGD: U, V, a, b (original order), trace, predict()."""

    def __init__(self, U, V, a, b, mean_rating, trace, params):
        self.U, self.V, self.a, self.b = U, V, a, b
        self.mean_rating, self.trace, self.params = mean_rating, trace, params

    def predict(self, users, items):
        users, items = entry_ids(users, items, (len(self.U), len(self.V)), ("user", "item"))
        return self.mean_rating + np.einsum("nd,nd->n", self.U[users], self.V[items]) + \
            self.a[users] + self.b[items]


def fit_bpmf(model, data, optimizer, n_epochs=10, seed=0, test=None, trace_every=None,
             n_threads=None, callback=None):
    """SGD (one block) or DSGD (B x B blocks, one orthogonal group per round) on the BPMF
    log posterior with the precisions fixed at model.init_precision: the DSGLD estimator
    without noise. One epoch = as many minibatch steps as ratings / batch_size. callback(epoch,
    trace) is called after every epoch; returning True stops there."""
    from pymf.optim import DSGD, SGD
    if isinstance(optimizer, SGD):
        grid = (1, 1)
    elif isinstance(optimizer, DSGD):
        grid = (optimizer.blocks, optimizer.blocks)
    else:
        raise ValueError(f"a BPMF model is fitted by pymf.SGD or pymf.DSGD, got {optimizer!r}")
    ratings = model.check_data(data)
    n_epochs = _count(n_epochs, "n_epochs", 1)
    mean_rating = float(ratings.values.mean()) if model.mean_rating is None else model.mean_rating
    batch = optimizer.batch_size(ratings.nnz) if callable(getattr(optimizer, "batch_size", None)) \
        else None
    batch = min(ratings.nnz, batch or 1000)
    permute_rng, init_rng, _, noise_seeds, hyper_seeds = bpmf_seeds(seed, 1)
    layout = Layout(ratings, grid, True, permute_rng)
    P, Q = grid
    # a round visits one group: each of its blocks gets about |block| / m steps
    round_length = max(1, int(round(ratings.nnz / (P * Q) / batch)))
    rounds_per_epoch = max(P, Q)
    chains = _bpmf.DSGLDChains(layout.c, model.c_model(mean_rating), 1, batch, round_length, 0,
                               False, noise_seeds, hyper_seeds,
                               n_threads if n_threads is not None else (optimizer.n_threads or 0))
    chains.set_state(0, *_initial_params(model, ratings.shape, init_rng), 0)
    step = as_round_step(optimizer.step_size)
    if test is not None:
        test = model.check_data(test, "test set")
        if test.shape != ratings.shape:
            raise ValueError(f"the test set has shape {test.shape}, the training data {ratings.shape}")
        tu, ti = layout.users_items(test.rows, test.cols)
    trace = {"epoch": [], "time": [], "train_rmse": [], "test_rmse": []}
    elapsed = 0.0
    for epoch in range(1, n_epochs + 1):
        start = time.perf_counter()
        r0 = (epoch - 1) * rounds_per_epoch
        chains.run(step(np.arange(r0 + 1, r0 + rounds_per_epoch + 1)))
        elapsed += time.perf_counter() - start
        trace["epoch"].append(epoch)
        trace["time"].append(elapsed)
        trace["train_rmse"].append(_rmse(chains.sq_error(0), ratings.nnz))
        if test is not None:
            r = chains.predict(0, tu, ti) - test.values
            trace["test_rmse"].append(_rmse(_sum_sq(r), test.nnz))
        else:
            trace["test_rmse"].append(float("nan"))
        if callback is not None and callback(epoch, trace) is True:
            break
    p = chains.get_state(0)
    U, V, a, b = layout.to_original(p.U, p.V, p.a, p.b)
    return BPMFFit(U, V, a, b, mean_rating, {k: np.asarray(v) for k, v in trace.items()},
                   {"model": model.params(), "optimizer": type(optimizer).__name__,
                    "grid": list(grid), "batch_size": batch, "round_length": round_length})
