"""The NMF family's kernel: a C chain (pymf.nmf._chain.FactorChain subclasses: the Langevin
samplers, Gibbs; or the GPU chain of pymf.gpu) on the block grid of the data, seen by the
engine's run loop in the user's row and column order.

Seeding: the run's SeedSequence spawns four independent streams:
  0: the Philox key of the Langevin noise, 1: the GSL stream of minibatches / random parts,
  2: the row/column permutation of the block grid, 3: the initial state.
The draws of a sampled phi (TweedieNMF(phi="sample")) come from a GSL stream whose seed is
derived from the noise key (phi_stream_seed), reseeded at every draw's iteration (rng.h).
The chain is a pure function of (seed, data, settings): the same for any thread count,
and a run resumed from a checkpoint continues exactly as if it had not stopped.
"""
import copy
import math
import time

import numpy as np

from pymf import _core_info
from pymf.engine import autostep
from pymf.engine.steps import ConstantStep, with_burnin
from pymf.nmf import _blocks, _gibbs_nmf, _sgd, _sgld, _tweedie
from pymf.data import Ratings, as_observed, real_array
from pymf.engine.driver import digest, rmse
from pymf.engine.rowsteps import RowStepKernel, measure_side_by_side
from pymf.engine.seeds import seed_sequence
from pymf.errors import DivergenceError


def run_seeds(seed):
    """(noise key, schedule seed, permutation seed, initial-state rng) of a recorded seed."""
    children = seed_sequence(seed).spawn(4)
    noise = int(children[0].generate_state(1, np.uint64)[0])
    schedule = int(children[1].generate_state(1, np.uint64)[0])
    permute = int(children[2].generate_state(1, np.uint32)[0])
    return noise, schedule, permute, np.random.default_rng(children[3])


def blocked_data(observed, n_blocks, permute, permute_seed):
    """The C core's block layout of validated data."""
    if isinstance(observed, Ratings):
        return sparse_blocked_data(observed.rows, observed.cols, observed.values,
                                   observed.shape, n_blocks, permute, permute_seed)
    return _blocks.BlockedData.from_dense(observed, n_blocks, permute, permute_seed)


def sparse_blocked_data(rows, cols, values, shape, n_blocks, permute, permute_seed):
    """The block layout of entries of a matrix of this shape (all of them, or one rank's
    row piece in the MPI ring; none: the grid alone). The grid depends only on (shape,
    n_blocks, permute, permute_seed)."""
    return _blocks.BlockedData.from_sparse(rows, cols, values, shape, n_blocks, permute,
                                          permute_seed)


class GridMap:
    """Converts factors between the user's order and the block grid's order."""

    def __init__(self, data):
        self.row_of, self.col_of = data.row_of, data.col_of
        self.row_pos = np.empty_like(self.row_of)
        self.row_pos[self.row_of] = np.arange(len(self.row_of))
        self.col_pos = np.empty_like(self.col_of)
        self.col_pos[self.col_of] = np.arange(len(self.col_of))

    def to_grid(self, W, H):
        """(W, H) in user order -> (W, H^T) in grid order, C-contiguous."""
        return (np.ascontiguousarray(W[self.row_of], dtype=np.float64),
                np.ascontiguousarray(H.T[self.col_of], dtype=np.float64))

    def from_grid(self, W_grid, Ht_grid):
        W = np.empty_like(W_grid)
        W[self.row_of] = W_grid
        H = np.empty((Ht_grid.shape[1], Ht_grid.shape[0]))
        H[:, self.col_of] = Ht_grid.T
        return W, H

    def test_indices(self, test):
        return (np.ascontiguousarray(self.row_pos[test.rows]),
                np.ascontiguousarray(self.col_pos[test.cols]))


def prepare_test(test, shape):
    """Validate a held-out set against training data of this shape; returns Ratings or
    None."""
    if test is None:
        return None
    try:
        test = as_observed(test)
    except ValueError as exc:
        raise ValueError(f"the test set: {exc}") from None
    if not isinstance(test, Ratings):
        test = Ratings.from_dense(test)
    if tuple(test.shape) != tuple(shape):
        raise ValueError(f"the test set has shape {test.shape}, the data {tuple(shape)}")
    if test.nnz == 0:
        raise ValueError("the test set is empty: pass test=None to run without one")
    return test


def check_init(init, shape, rank, model):
    if isinstance(init, dict):
        raise ValueError("init must be a pair (W0, H0) of arrays, got a dict")
    try:
        W0, H0 = init
    except (TypeError, ValueError):
        raise ValueError("init must be a pair (W0, H0)") from None
    W0 = real_array(W0, "init's W0")
    H0 = real_array(H0, "init's H0")
    if W0.shape != (shape[0], rank) or H0.shape != (rank, shape[1]):
        raise ValueError(f"init must be W0 of shape {(shape[0], rank)} and H0 of shape "
                         f"{(rank, shape[1])}, got {W0.shape} and {H0.shape}")
    if not (np.all(np.isfinite(W0)) and np.all(np.isfinite(H0))):
        raise ValueError("init contains NaN or inf")
    if model.non_negative and (W0.min() < 0 or H0.min() < 0):
        raise ValueError("init must be non-negative for a non-negative model")
    with np.errstate(over="ignore", invalid="ignore"):
        if not np.all(np.isfinite(W0 @ H0)):
            raise ValueError("init is too large: W0 @ H0 overflows")
    return W0, H0


_PHI_STREAM = 0x706869  # "phi": labels the phi draws' stream, derived from the noise key


def phi_stream_seed(noise_seed):
    """The seed of the GSL stream of phi's draws (independent of the noise and minibatches)."""
    return int(np.random.SeedSequence([int(noise_seed), _PHI_STREAM]).generate_state(1, np.uint64)[0])


def phi_every(sampler, n_blocks, n_observed, batch_size):
    """Iterations between draws of a sampled phi: one pass over the data, so that the full
    residual sum of squares it needs costs at most as much as the iterations in between.
    LD: every iteration (each is a pass); SGLD: ceil(N / batch) iterations; PSGLD: B
    iterations (B parts cover every entry once; on the MPI ring one trip of the H pieces)."""
    if sampler.kind == "ld":
        return 1
    if sampler.kind == "sgld":
        return int(math.ceil(n_observed / batch_size))
    if sampler.kind == "psgld":
        return int(n_blocks)
    raise ValueError(f"phi='sample' is drawn by the Langevin samplers (LD, SGLD, PSGLD); "
                     f"{sampler.kind!r} needs a fixed phi")


def check_sampled_phi(model, sampler):
    """A clear error where phi='sample' cannot be run."""
    if not getattr(model, "sample_phi", False):
        return
    if sampler.kind in ("sgd", "dsgd"):
        raise ValueError("phi='sample' is for the samplers: an optimiser's MAP estimate needs "
                         "a fixed phi (a number)")
    if sampler.kind not in ("ld", "sgld", "psgld"):
        raise ValueError(f"phi='sample' is drawn by pymf.LD, pymf.SGLD and pymf.PSGLD only, "
                         f"not by {sampler!r}: give phi a number")
    if getattr(sampler, "backend", "cpu") != "cpu":
        raise ValueError("phi='sample' runs on the CPU sampler (backend='cpu'); the GPU chain "
                         "takes a fixed phi")


def make_chain(sampler, data, model, noise_seed, schedule_seed, batch_size, only_row_block=-1):
    """The C (or GPU) chain of an NMF sampler (or optimiser) on blocked data. only_row_block
    (PSGLD on the CPU): the chain updates only that row piece and the column piece it is
    given each iteration (one rank of the MPI ring)."""
    check_sampled_phi(model, sampler)
    if sampler.kind == "gibbs":
        if model.beta != 1.0 or model.phi != 1.0 or model.prior != "exponential":
            raise ValueError("pymf.Gibbs is for Poisson NMF: TweedieNMF(beta=1, phi=1, "
                             f"prior='exponential'), got {model!r}")
        return _gibbs_nmf.GibbsChain(data, model.rank, model.lam_w, model.lam_h, schedule_seed,
                                     n_threads=sampler.n_threads)
    if sampler.kind in ("sgd", "dsgd"):
        return _sgd.Optimiser(data, sampler.kind, model.rank, model.beta, model.phi, model.prior,
                              model.lam_w, model.lam_h, schedule_seed, batch_size=batch_size,
                              part_order=sampler.part_order, n_threads=sampler.n_threads)
    if getattr(sampler, "backend", "cpu") == "cuda":
        from pymf.nmf.gpu import CudaPSGLDChain
        return CudaPSGLDChain(data, model, sampler, noise_seed, dtype=np.dtype(sampler.dtype))
    phi = {}
    if model.sample_phi:
        # an "auto" step is chosen for the curvature at phi_init, which scales as 1 / phi:
        # the chain runs it as eps phi_t / phi_init (a given step runs as given)
        phi = {"phi_every": phi_every(sampler, data.n_blocks, data.n_observed, batch_size),
               "phi_shape": model.phi_shape, "phi_rate": model.phi_rate,
               "phi_seed": phi_stream_seed(noise_seed),
               "scale_step_by_phi": autostep.is_auto(sampler.step_size)}
    return _sgld.LangevinChain(
        data, sampler.kind, model.rank, model.beta, model.initial_phi, model.prior, model.lam_w,
        model.lam_h, noise_seed, schedule_seed, batch_size=batch_size,
        part_order=getattr(sampler, "part_order", "cyclic"), n_threads=sampler.n_threads,
        only_row_block=only_row_block, **phi)


def minibatch_scale(sampler, data):
    """What the sampler's stochastic gradient scales its likelihood term by, for
    AutoStep(minibatch_noise=...): LD 1, SGLD N / batch, PSGLD B (a part of its B x B grid
    holds 1/B of the data); None for the others (HAMCMC), which refuse the bound."""
    if sampler.kind == "ld":
        return 1.0
    if sampler.kind == "sgld":
        return data.n_observed / sampler.batch_size(data.n_observed)
    if sampler.kind == "psgld":
        return float(data.n_blocks)
    return None


KICK_QUANTILE = 0.999


def poisson_quantile(mean, level):
    """The smallest k with P(Poisson(mean) <= k) >= level (a normal bound for large means)."""
    if mean > 100.0:
        return math.ceil(mean + 3.3 * math.sqrt(mean) + 1.0)
    k, pmf = 0, math.exp(-mean)
    cdf = pmf
    while cdf < level:
        k += 1
        pmf *= mean / k
        cdf += pmf
    return k


def minibatch_kick(sampler, data):
    """SGLD's curvature factor for step_size="auto": a row (column) with n of the N entries
    gets Poisson(n m / N) of an iteration's m draws, each scaled by s = N / m, so in one
    iteration its curvature is about (draws) s / n times its full-data curvature (the
    entries' curvatures spread evenly over the row). The stability rule is applied to
    lambda_max times the KICK_QUANTILE quantile of that factor for the sparsest row or
    column: at most one row-iteration in a thousand sees a larger kick. Without it, the
    rule's step diverged in 4 of 6 seeds on a sparse Gaussian MF (about 36 entries in the
    sparsest row, s = 32: a row drawn 5 times sees 4.4 times its curvature); 1 for the
    other samplers (PSGLD's parts are whole blocks, DSGLD's server runs its own rule)."""
    if sampler.kind != "sgld":
        return 1.0
    s = minibatch_scale(sampler, data)
    row_counts, col_counts = data.line_counts()
    counts = np.concatenate([row_counts[row_counts > 0], col_counts[col_counts > 0]])
    if s <= 1.0 or counts.size == 0:
        return 1.0
    n_min = float(counts.min())
    return max(1.0, poisson_quantile(n_min / s, KICK_QUANTILE) * s / n_min)


def pilot_states(chain, W, Ht, data, model, n_threads):
    """(W, Ht, log-likelihood) of every state a pilot's end holds (W, Ht: get_state's).
    HAMCMC on MF keeps a window of `memory` interleaved states, each its own sub-chain, and
    one could blow up (a log-likelihood of -1e262) while get_state's stayed sane: a chain
    with a window says so by its snapshot's W_planes, the window's states first. Other
    chains: their one state."""
    planes = chain.snapshot() if hasattr(chain, "memory") else {}
    if "W_planes" not in planes:
        return [(W, Ht, chain.loglik())]
    return [(Wm, Hm, _tweedie.loglik(data, Wm, Hm, model.beta, model.initial_phi, n_threads))
            for Wm, Hm in zip(planes["W_planes"][:chain.memory], planes["Ht_planes"][:chain.memory])]


def resolve_auto_step(sampler, chain, data, model, seed, burnin=0, kept=None):
    """(sampler, info): a sampler with step_size="auto" gets a constant step chosen at the
    chain's starting state (pymf.engine.autostep: Lanczos steps on finite-difference
    Hessian-vector products of the full-data log posterior, half the stability limit,
    a pilot of the chain itself that halves the step while it diverges); the chain is put
    back at its start; with AutoStep(minibatch_noise=...), the stable step for the burnin
    units and the bounded one after them (pymf.engine.steps.with_burnin). Any other
    sampler comes back unchanged with info None. kept (a list): a CPU Langevin chain's
    accepted pilot units are appended to it as an autostep.KeptPilot (the snapshot
    FactorKernel takes), for the run's first call to take (pymf.engine.driver)."""
    if not autostep.is_auto(getattr(sampler, "step_size", None)):
        return sampler, None
    W0, Ht0, _ = chain.get_state()
    W0, Ht0 = np.array(W0), np.array(Ht0)
    n_w = W0.size
    # a sampler preconditioned by c I (HAMCMC's H^0 = gamma I) is stable for
    # eps c lambda_max < 2: the rule is applied to the curvature of c log p
    scale = getattr(sampler, "preconditioner_scale", 1.0)

    def gradient(theta):
        W = theta[:n_w].reshape(W0.shape)
        Ht = theta[n_w:].reshape(Ht0.shape)
        gW, gHt = _tweedie.gradient(data, W, Ht, model.beta, model.initial_phi,
                                      sampler.n_threads or 0)
        if not model.non_negative:  # the Gaussian prior's curvature; the exponential's is 0
            gW -= model.lam_w * W
            gHt -= model.lam_h * Ht
        return scale * np.concatenate([gW.ravel(), gHt.ravel()])

    start = chain.loglik()
    # a pilot fails where its log-likelihood fell by more than this: as much as the start's
    # own (a diverging chain falls by orders of magnitude), and at least a nat per observed
    # entry, since a start that fits tiny values (all zeros, 1e-8) has a log-likelihood
    # near 0, below which every sane move fell (the pilot "diverged" at every step)
    tolerance = max(abs(start), float(data.n_observed))
    phi0 = model.initial_phi

    accepted = []

    def pilot(eps):
        accepted.clear()
        steps = np.full(autostep.PILOT_UNITS, eps)
        try:
            started = time.perf_counter()
            chain.run(steps)
            W, Ht, _ = chain.get_state()
            ok = all(bool(np.all(np.isfinite(W)) and np.all(np.isfinite(Ht)))
                     and math.isfinite(value) and value >= start - tolerance
                     for W, Ht, value in pilot_states(chain, W, Ht, data, model,
                                                      sampler.n_threads or 0))
            if ok and kept is not None and isinstance(chain, _sgld.LangevinChain):
                # FactorKernel.snapshot()'s arrays at the pilot's end (the CPU Langevin
                # chains'; HAMCMC's and alpha-stable MF's snapshots hold more: they keep
                # nothing)
                snapshot = {"W_grid": np.array(W), "Ht_grid": np.array(Ht),
                            "t": np.array(autostep.PILOT_UNITS)}
                if getattr(model, "sample_phi", False):
                    snapshot["phi"] = np.array(chain.phi)
                accepted.append(autostep.KeptPilot(steps, snapshot,
                                                   time.perf_counter() - started))
            return ok
        finally:
            chain.set_state(W0, Ht0, 0)
            if getattr(model, "sample_phi", False):  # the pilot drew phi too
                chain.set_phi(phi0)

    eps, info = autostep.choose(gradient, np.concatenate([W0.ravel(), Ht0.ravel()]),
                                seed_sequence(seed), pilot, step=sampler.step_size,
                                minibatch_scale=minibatch_scale(sampler, data),
                                curvature_factor=minibatch_kick(sampler, data))
    if scale != 1.0:
        info["preconditioner_scale"] = scale
    if getattr(model, "sample_phi", False):
        info["scaled_by_phi"] = model.initial_phi  # eps runs as eps phi_t / phi_init
    step = sampler.step_size
    # PSGLD's own chains only, CPU or GPU (not another family's chain on PSGLD settings:
    # alpha-stable MF)
    on_gpu = getattr(sampler, "backend", "cpu") == "cuda"
    own_chain = isinstance(chain, _sgld.LangevinChain) or on_gpu
    if (sampler.kind == "psgld" and own_chain and step.per_row and step.minibatch_noise is None
            and minibatch_scale(sampler, data) > 1.0):
        if burnin <= 0:
            # measured at the start, the bound slowed the way from a cold start (256^2
            # Poisson NMF, B = 4, 300 iterations: 5.4 % lower log-likelihood), and the
            # kept draws of that way are not calibrated by any step
            info["per_row"] = ("not applied: no burn-in (the rows' curvature is measured at "
                               "the burn-in's end; give burnin= for calibrated intervals)")
        else:
            # the per-row bound (pymf.engine.autostep, point 5) after the burn-in, measured
            # at its end by the kernel (pymf.engine.rowsteps, FactorKernel.measure_row_steps)
            info.update(row_noise=autostep.ROW_NOISE,
                        minibatch_scale=minibatch_scale(sampler, data),
                        row_steps_from=int(burnin) + 1)
    resolved = copy.copy(sampler)
    resolved.step_size = with_burnin(ConstantStep, eps, info, burnin)
    if kept is not None:
        kept.extend(accepted)
    return resolved, info


def run_facts(model, sampler, seed, shape, n_observed, n_blocks, batch_size):
    """What a result's params record of the run (the ring and shared memory alike)."""
    facts = {"model": model.params(), "sampler": sampler.params(), "seed": seed,
             "shape": list(shape), "n_observed": int(n_observed), "n_blocks": int(n_blocks),
             "batch_size": int(batch_size)}
    if getattr(model, "sample_phi", False):
        facts["phi_every"] = phi_every(sampler, n_blocks, n_observed, batch_size)
    return facts


def run_fingerprint(facts, data_digest, test, init):
    """The settings that decide the chain (the thread count does not) with digests of the
    data (driver.digest of the validated data: an array or Ratings), the test set and the
    initial state: a checkpoint is refused by a run with another fingerprint. The MPI ring
    and shared memory give the same fingerprint to the same run, so either resumes the
    other's checkpoint."""
    sampler = {key: value for key, value in facts["sampler"].items() if key != "n_threads"}
    return {**facts, "sampler": sampler, "data": data_digest, "test": digest(test),
            "init": None if init is None else digest(*init)}


def sample_params(facts, n_samples, burnin, thin, sampler, test):
    """A SampleResult's params: the run's facts and its length."""
    params = {**facts, "n_samples": n_samples, "burnin": burnin, "thin": thin,
              "threads": sampler.n_threads or None}
    if test is not None:
        params["test"] = {"nnz": test.nnz}
    return params


# the per-row measurement's curvature buffers held at once by its threads (one piece each;
# a piece larger than this is measured alone): FactorKernel.measure_row_steps
MEASURE_BYTES = 256 << 20

# A chain whose fitted values W H have run away (their RMS past BLOWUP_FACTOR times the
# larger of the data's RMS and the prior's) has diverged, though nothing is inf or NaN yet:
# LD with a step of 0.05 on a 40 x 30 Poisson matrix had |W| of 1e152 when W H overflowed
# at iteration 1033, 1,000 iterations after it left the posterior, and LD or PSGLD with
# "auto" on a 2 x 2 count matrix sampled fitted values of 1,700 against an exact 1.3 (the
# drift v / w near w = 0 throws a factor far off). Checked on fully observed data, where
# the RMS needs only W'W and H H' (O((I + J) K^2)); as BPMF's pymf.bpmf.kernel.BLOWUP_FACTOR.
BLOWUP_FACTOR = 100.0


def blowup_limit(sum_of_squares, n_entries, prior_rms):
    """BLOWUP_FACTOR times the larger of the data's RMS (from the sum of the squared values
    of its n_entries) and the prior's RMS of a fitted value (TweedieNMF.prior_fitted_rms),
    to 3 significant digits: the MPI ring sums the squares in another order than shared
    memory, and the same limit keeps its chain the same."""
    data_rms = math.sqrt(sum_of_squares / n_entries) if n_entries else 0.0
    return float(f"{BLOWUP_FACTOR * max(data_rms, prior_rms):.3g}")


class FactorKernel(RowStepKernel):
    """W (I x K) and H (K x J) of one chain; the trace holds the log-likelihood (sum of
    -d_beta/phi), the log posterior and, with a test set, the RMSE of the running mean
    prediction (test_rmse; of the current state before any draw is kept) and of the
    current state (test_rmse_sample). With phi="sample", phi is traced, recorded with every
    kept draw (sample_stats["phi"]) and carried by checkpoints.

    PSGLD's step_size="auto" has the per-row plan (pymf.engine.rowsteps): this kernel
    measures the Fisher curvature of the rows of W and of H^T (measure_row_steps) and
    hands the factors to the chain's set_row_steps (the C chain's or the GPU chain's)."""

    # the per-row bound's factors in a checkpoint (W, H^T; grid order)
    row_step_keys = ("row_steps_W", "row_steps_Ht")

    def __init__(self, chain, grid, model, test=None):
        self.chain, self.grid, self.model, self.test = chain, grid, model, test
        self.sample_phi = getattr(model, "sample_phi", False)
        self.shape = (len(grid.row_of), len(grid.col_of))
        self._loglik = None
        self.blowup_limit = None  # set_blowup_limit: fully observed data only
        self._passed = None  # the state at the last trace point that passed check_state
        if test is not None:
            self.test_rows, self.test_cols = grid.test_indices(test)

    @property
    def counter(self):
        return self.chain.iteration

    def draw_shapes(self):
        K = self.model.rank
        return {"W": (1, self.shape[0], K), "H": (1, K, self.shape[1])}

    def _run_units(self, steps):
        self._loglik = None
        self.chain.run(steps)

    # --- the per-row bound of PSGLD's step_size="auto" ----------------------------------

    def apply_row_steps(self, step_W, step_Ht, from_iteration):
        self.chain.set_row_steps(step_W, step_Ht, from_iteration)

    def summarise_row_steps(self, factors, minibatch_scale, row_noise):
        return autostep.factor_steps_summary(*factors, minibatch_scale, row_noise)

    def _row_step_factors(self, fisher):
        """c = min(1, 2 delta / ((s - 1) eps H_kk rho)) for a stack of Fisher curvatures at
        phi = 1. The chain runs eps phi_t / phi_ref (a sampled phi) and the likelihood's
        curvature is fisher / phi_t, so eps c H_kk stays at eps c fisher_kk / phi_ref for any
        phi_t: phi_ref is the model's initial phi (the fixed one where phi is fixed)."""
        info = self.row_plan
        diag, rho = autostep.diag_and_rho(fisher)
        return autostep.row_step_factors(diag * rho[:, None] / self.model.initial_phi,
                                         info["eps"], info["minibatch_scale"],
                                         info["row_noise"])

    def _piece_fisher(self, b, c_pieces, rows):
        """The Fisher curvatures of row piece b (rows=True: blocks (b, c) for c in
        c_pieces) or of column piece b (rows=False: blocks (c, b) for c in c_pieces),
        added in that order into a fresh buffer, completed by mirroring. With every piece
        of the other side this is the whole curvature; the MPI ring passes the column
        buffer along its ranks instead (RingKernel.measure_row_steps)."""
        data, K = self.chain.data, self.model.rank
        start = data.row_start if rows else data.col_start
        fisher = np.zeros((int(start[b + 1] - start[b]), K, K))
        for c in c_pieces:
            if rows:
                self.chain.fisher_block(b, c, fisher, None)
            else:
                self.chain.fisher_block(c, b, None, fisher)
        return _sgld.fisher_mirror(fisher)

    def measure_row_steps(self):
        """(factors of W's rows, of H^T's rows) from the Fisher curvature at the current
        state, one piece at a time: a row piece's rows over blocks (b, 0..B-1), a column
        piece's columns over blocks (0..B-1, c), each in the layout's order (the MPI ring
        adds the same blocks in the same order). The 2B pieces are independent: with the
        chain's n_threads > 1 they are shared among that many Python threads (the curvature
        pass, the mirror, NumPy's element-wise products and the largest eigenvalues all
        release the GIL), each piece computed whole by one thread exactly as alone, so the
        factors have the same bits for any thread count. Memory: one piece's K x K matrices
        per thread, as many threads as fit in MEASURE_BYTES (one at least)."""
        data = self.chain.data
        pieces = range(data.n_blocks)
        jobs = [(b, True) for b in pieces] + [(c, False) for c in pieces]

        def piece_factors(job, _threads):  # a piece's pass is one thread's
            return self._row_step_factors(self._piece_fisher(job[0], pieces, job[1]))

        # at most MEASURE_BYTES of curvatures at once (and at least one piece): a run's
        # threads measure side by side where the pieces are small (1 MB at 1024^2, K = 32,
        # 8 x 8), one after the other where one piece is already large
        largest = max(np.max(np.diff(data.row_start)), np.max(np.diff(data.col_start)))
        piece_bytes = max(int(largest), 1) * self.model.rank ** 2 * 8
        factors = measure_side_by_side(piece_factors, jobs, self._measure_threads(),
                                       piece_bytes, MEASURE_BYTES)
        B = len(pieces)
        return np.concatenate(factors[:B]), np.concatenate(factors[B:])

    def _measure_threads(self):
        """The threads of the per-row measurement: the CPU chain's OpenMP threads (its
        n_threads, or the core's default); 1 for any other chain (the GPU chain's
        fisher_block synchronises one host copy of its state on first use)."""
        if not isinstance(self.chain, _sgld.LangevinChain):
            return 1
        return self.chain.n_threads or _core_info.default_threads()

    def grid_state(self):
        """(W, H^T) in grid order, not to be modified (the ring's are gathered from every
        rank)."""
        W_grid, Ht_grid, _ = self.chain.get_state()
        return W_grid, Ht_grid

    def loglik(self):
        """-sum d_beta / phi over the observed entries at the current state."""
        return self.chain.loglik()

    def state(self):
        return self.grid.from_grid(*self.grid_state())

    def draw(self):
        W, H = self.state()
        return {"W": W[None], "H": H[None]}

    def draw_stats(self):
        """The Frobenius norms of W and H: cheap scalars whose R-hat and ESS say whether the
        factors' scale has mixed (the factors themselves are identified only up to
        permutation and scale)."""
        W_grid, Ht_grid = self.grid_state()
        stats = {"norm_W": np.array([np.sqrt(np.einsum("ik,ik->", W_grid, W_grid))]),
                 "norm_H": np.array([np.sqrt(np.einsum("jk,jk->", Ht_grid, Ht_grid))])}
        if self.sample_phi:
            stats["phi"] = np.array([self.chain.phi])
        return stats

    def _current_predictions(self):
        W_grid, Ht_grid = self.grid_state()
        return _tweedie.predict_entries(W_grid, Ht_grid, self.test_rows, self.test_cols)

    def test_predictions(self):
        return None if self.test is None else self._current_predictions()[None]

    def set_blowup_limit(self, sum_of_squares, n_entries):
        """Check the fitted values' RMS at every trace point (blowup_limit), where every
        entry is observed (n_entries = I J) and the model says its prior's RMS (TweedieNMF;
        alpha-stable MF's tamed steps cannot throw a factor far, and its data's heavy tails
        have no RMS to compare with)."""
        prior_rms = getattr(self.model, "prior_fitted_rms", None)
        if prior_rms is not None and n_entries == self.shape[0] * self.shape[1]:
            self.blowup_limit = blowup_limit(sum_of_squares, n_entries, prior_rms())

    def fitted_rms(self, W_grid, Ht_grid):
        """sqrt(mean over every entry of (W H)_ij^2) = sqrt(sum(W'W * H H') / (I J)), from
        the factors in grid order (grid_state)."""
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(np.sum((W_grid.T @ W_grid) * (Ht_grid.T @ Ht_grid)))
        return math.sqrt(max(total, 0.0) / (self.shape[0] * self.shape[1]))

    def check_state(self):
        t = self.counter
        self._loglik = self.loglik()
        if not np.isfinite(self._loglik):
            # W and H are finite but W H overflows (huge priors, data or steps)
            raise DivergenceError(
                f"the chain diverged at iteration {t}: its log-likelihood is not finite "
                "(W H overflows; extreme data, priors or step sizes?)", iteration=t)
        if self.blowup_limit is not None:
            W_grid, Ht_grid = self.grid_state()
            rms = self.fitted_rms(W_grid, Ht_grid)
            if not rms <= self.blowup_limit:  # NaN too
                kept = ("the last state that passed, at iteration "
                        f"{self._passed[0]}, is kept" if self._passed is not None else
                        "no earlier trace point passed this check")
                gibbs = (", and pymf.Gibbs samples Poisson NMF exactly"
                         if self.model.beta == 1.0 else "")
                raise DivergenceError(
                    f"the chain diverged at iteration {t}: the RMS of its fitted values W H "
                    f"is {rms:.3g}, more than {BLOWUP_FACTOR:g} times the larger of the "
                    f"data's and the prior's ({self.blowup_limit / BLOWUP_FACTOR:.3g}): its "
                    "factors run away, finite but far from the posterior (a step too large "
                    "for these data: give a smaller step_size; on small counts, a factor "
                    f"near zero throws Langevin steps far off{gibbs}); {kept}",
                    iteration=t, state=self._passed_state())
            # the grid-order factors as they are (one copy, no reordering at every trace
            # point: they are put in the user's order only for an error)
            self._passed = (t, (np.array(W_grid), np.array(Ht_grid)))

    def _passed_state(self):
        """The state at the last trace point that passed check_state ({"W", "H"}), or None."""
        if self._passed is None:
            return None
        W, H = self.grid.from_grid(*self._passed[1])
        return {"W": W, "H": H}

    def trace_point(self, run):
        test_mean = None if run is None else run.test_mean()
        loglik = self.loglik() if self._loglik is None else self._loglik
        W, H = self.state()
        point = {"loglik": loglik, "logpost": loglik + self.model.log_prior(W, H)}
        if self.sample_phi:
            point["phi"] = self.chain.phi
        if self.test is not None:
            current = self._current_predictions()
            mean = current if test_mean is None else test_mean
            point["test_rmse"] = rmse(mean, self.test.values)
            point["test_rmse_sample"] = rmse(current, self.test.values)
        return point

    def snapshot(self):
        W_grid, Ht_grid = self.grid_state()
        out = {"W_grid": W_grid, "Ht_grid": Ht_grid, "t": np.array(self.counter)}
        if self.sample_phi:
            out["phi"] = np.array(self.chain.phi)
        return self.add_row_steps(out)

    def restore(self, arrays):
        self.chain.set_state(arrays["W_grid"], arrays["Ht_grid"], int(arrays["t"]))
        if self.sample_phi:
            self.chain.set_phi(float(arrays["phi"]))
        self.restore_row_steps(arrays)

    def last_finite_state(self):
        W, H = self.state()
        return {"W": W, "H": H}
