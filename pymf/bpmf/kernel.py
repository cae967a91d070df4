"""The BPMF family's kernels: DSGLD chains and the BPMF Gibbs chain (pymf.bpmf._bpmf) seen by
the engine's run loop."""
import math
import time

import numpy as np

from pymf._linalg import LAPACK_ABOVE, largest_eigenvalues
from pymf.bpmf import _bpmf
from pymf.bpmf.layout import Layout, _initial_params, bpmf_seeds
from pymf.bpmf.samplers import DSGLD
from pymf.data import stable_order
from pymf.engine import autostep
from pymf.engine.rowsteps import RowStepKernel
from pymf.engine.seeds import seed_sequence
from pymf.errors import DivergenceError


def _sum_sq(x):
    """Sum of squares without BLAS: on a small machine OpenBLAS's thread pool spinning next
    to the OpenMP threads of the samplers made every evaluation ~10x slower."""
    x = np.ravel(x)
    return float(np.einsum("i,i->", x, x))


def precision_stats(lambdas, model):
    """The per-draw summary of a chain's precisions lam_u[D], lam_v[D], lam_a, lam_b, tau
    (tau only when it is sampled: a fixed one is no draw)."""
    D = model.rank
    stats = {"lam_u_mean": lambdas[:D].mean(), "lam_v_mean": lambdas[D:2 * D].mean(),
             "lam_a": lambdas[2 * D], "lam_b": lambdas[2 * D + 1]}
    if model.sample_tau:
        stats["tau"] = lambdas[2 * D + 2]
    return stats


def _rmse(sq_error, n):
    return math.sqrt(sq_error / n) if n else float("nan")


_CHAIN_ARRAYS = ("U", "V", "a", "b", "lambdas")  # a DSGLD chain's state (with the round)

# A chain whose training RMSE passes this many times that of predicting the offset (the
# training mean, or the model's mean_rating) everywhere has diverged. A step too large for
# the data lets the factors grow without bound while the sampled precisions (tau, the
# factors' Lambda) collapse: the gradient flattens, so nothing becomes inf or NaN and the
# chain runs on, finite and useless (1e35 factors and tau 1e-75 on 100 MovieLens ratings
# with a minibatch of 2). No posterior draw predicts 100 times worse than the mean.
BLOWUP_FACTOR = 100.0


def rmse_limit(values, mean_rating):
    """BLOWUP_FACTOR times the RMSE of predicting mean_rating for every rating in values
    (times max(|mean_rating|, 1) where they all equal it)."""
    values = np.asarray(values, dtype=np.float64)
    scale = _rmse(_sum_sq(values - mean_rating), values.size) if values.size else 0.0
    if not scale > 0.0:
        scale = max(abs(float(mean_rating)), 1.0)
    return BLOWUP_FACTOR * scale


class ChainsKernel(RowStepKernel):
    """The engine's kernel protocol on top of a BPMF chains face (n_chains, layout, t,
    _run_units, predict, train_rmse, state, checkpoint_state, restore_state), which the
    shared-memory chains below and the MPI parameter server (pymf.bpmf.mpi) both have.

    A draw holds U, V, a, b of every chain in the original user/item order; the per-draw
    statistics are every chain's training RMSE, the norms of U and V and the precisions'
    means; the trace holds the chains' mean training RMSE and the test RMSE of the running
    mean prediction (NaN before the first kept draw: a single sample's is never reported).

    DSGLD's step_size="auto" has the per-row plan (pymf.engine.rowsteps): this kernel
    measures the rows' curvature (row_curvatures) and hands the factors to
    apply_row_steps (the C chains, or the MPI server's workers).
    """

    # the per-row bound's factors in a checkpoint (step, noise; users, items)
    row_step_keys = ("row_steps_user", "row_steps_item", "row_noise_user", "row_noise_item")
    # step_size="auto" with tau sampled: each chain's steps shrink by tau_reference / tau
    # where its tau exceeds its reference (pymf_dsgld_tau_scaled_step); None: never
    tau_reference = None
    test = None
    _drawn = None  # (counter, states) of the last draw(), for the draw_stats() that follows
    rmse_limit = math.inf  # a training RMSE past it is a divergence (set by the constructors)
    _passed = None  # (counter, snapshot()) at the last trace point check_state passed

    @property
    def counter(self):
        return self.t

    def attach_test(self, test):
        self.test = test
        self.test_users, self.test_items = self.layout.users_items(test.rows, test.cols)

    def draw_shapes(self):
        (L, M), D, C = self.layout.shape, self.model.rank, self.n_chains
        return {"U": (C, L, D), "V": (C, M, D), "a": (C, L), "b": (C, M)}

    def draw(self):
        states = [self.state(c) for c in range(self.n_chains)]
        # the driver asks for draw_stats next, at the same state: it reuses these (at 10^7
        # ratings a chain's reordering into the original order costs 10 ms)
        self._drawn = (self.counter, states)
        return {key: np.stack([st[k] for st in states]) for k, key in enumerate("UVab")}

    def train_rmses(self):
        """Every chain's training RMSE."""
        return [self.train_rmse(c) for c in range(self.n_chains)]

    def blown_up(self, rmses):
        """(chain, RMSE) of the first chain whose training RMSE is not finite or is past
        rmse_limit, else None."""
        # Gibbs draws exact conditionals (no step to be too large): only a non-finite RMSE
        # is a divergence there. On ratings of a scale far below the priors' (times 1e-4),
        # its first sweeps sit at the priors' scale, past the limit, and were called a
        # blow-up "of a step too large" (check_data's warning names the remedy)
        limit = math.inf if self.is_gibbs else self.rmse_limit
        for chain, value in enumerate(rmses):
            if not value <= limit:  # NaN too
                return chain, value
        return None

    def check_state(self):
        """At a trace point, before a draw is kept: a chain that has blown up (blown_up)
        raises DivergenceError, the chains put back where the last trace point found them
        (the state the error keeps), so that no garbage draw is kept or returned."""
        bad = self.blown_up(self.train_rmses())
        if bad is None:
            self._passed = (self.counter, self.snapshot())
            return
        chain, value = bad
        t = self.counter
        if self._passed is not None:
            self.restore(self._passed[1])
            kept = f"the chains keep their state after {self.unit} {self._passed[0]}"
        else:
            kept = "no earlier trace point passed this check: the chains keep their state now"
        raise DivergenceError(
            f"{self.unit} {t} of chain {chain}: the chain diverged: its training RMSE is "
            f"{value:.3g}, more than {BLOWUP_FACTOR:g} times that of predicting the mean "
            f"rating everywhere ({self.rmse_limit / BLOWUP_FACTOR:.3g}); its factors grow "
            f"without bound (a step too large for these data: give a smaller step_size); "
            f"{kept}", iteration=t)

    def precisions(self, chain):
        """The precisions' summary dict of one chain (state(chain)[4])."""
        return self.state(chain)[4]

    def draw_stats(self):
        drawn, self._drawn = self._drawn, None
        states = drawn[1] if drawn is not None and drawn[0] == self.counter else \
            [self.state(c) for c in range(self.n_chains)]
        rows = []
        for train, (U, V, a, b, lam) in zip(self.train_rmses(), states):
            rows.append({"train_rmse": train, "norm_U": math.sqrt(_sum_sq(U)),
                         "norm_V": math.sqrt(_sum_sq(V)), **lam})
        return {key: np.array([row[key] for row in rows], dtype=np.float64) for key in rows[0]}

    def test_predictions(self):
        if self.test is None:
            return None
        return np.stack([self.predict(c, self.test_users, self.test_items)
                         for c in range(self.n_chains)])

    def trace_point(self, run):
        test_mean = run.test_mean()
        train = float(np.mean(self.train_rmses()))
        test = float("nan")
        if test_mean is not None:
            test = _rmse(_sum_sq(test_mean - self.test.values), self.test.nnz)
        point = {"train_rmse": train, "test_rmse": test}
        if self.model.sample_tau:
            point["tau"] = float(np.mean([self.precisions(c)["tau"] for c in range(self.n_chains)]))
        return point

    def snapshot(self):
        arrays = self.add_row_steps(self.checkpoint_state())
        if self.tau_reference is not None:
            arrays["tau_reference"] = self.tau_reference.copy()
        return arrays

    def restore(self, arrays):
        self.restore_state(arrays)
        self.restore_row_steps(arrays)
        if self.tau_reference is not None and "tau_reference" in arrays:
            # the references the run had at this state (a checkpoint of pymf 0.2's last
            # releases holds references raised to the chains' tau after the burn-in)
            self.use_tau_reference(arrays["tau_reference"])

    # --- tau and the automatic step ------------------------------------------------------

    def current_taus(self):
        """Every chain's noise precision tau now (the last of its precisions)."""
        return np.array([float(self.chain_params(c).lambdas[-1]) for c in range(self.n_chains)])

    def use_tau_reference(self, tau_reference):
        """From now on chain c's steps shrink by tau_reference[c] / tau where its tau exceeds
        tau_reference[c]. step_size="auto" sets the chains' starting tau before its pilot:
        the curvature, which is proportional to tau, was measured there, so eps tau never
        grows past its chosen value (as tau climbs towards the data's, a step kept at the
        start's size diverged on precise data). The reference stays for the whole run: the
        per-row factors measured after the burn-in shrink that step further and never
        stand in for it (raising the reference to the chains' tau there, as before, let
        the steps of rows the factors leave at 1 grow by tau / tau_start at once, which
        diverged on ratings of a smaller scale: docs/tuning.md). Steps never grow:
        MovieLens's tau stays below its start of 2, and its chains are the same as without
        the references."""
        self.tau_reference = np.array(tau_reference, dtype=np.float64).reshape(self.n_chains)
        self._apply_tau_reference(self.tau_reference)
        if self.row_plan is not None:  # params["auto_step"] records them
            self.row_plan["tau_reference"] = self.tau_reference.tolist()

    # --- the per-row bound of step_size="auto" (pymf.engine.autostep, point 5) ----------

    def summarise_row_steps(self, factors, minibatch_scale, row_noise):
        step_user, step_item = factors[:2]
        D = self.model.rank
        return autostep.row_steps_summary(step_user.reshape(-1, D + 1),
                                          step_item.reshape(-1, D + 1), minibatch_scale,
                                          row_noise)

    def measure_row_steps(self):
        """(step_user, step_item, noise_user, noise_item), grid order: the curvature is the
        chains' mean at their current state, each chain with its own tau, summed in chain
        order (row_curvatures: every chain in one C pass on the run's threads)."""
        info = self.row_plan
        params = [self.chain_params(c) for c in range(self.n_chains)]
        sums = None
        for curv in row_curvatures(self.layout.c, self.c_model, params, self.n_threads):
            parts = [x for side in curv for x in side]  # diag_u, rho_u, diag_v, rho_v
            sums = parts if sums is None else [a + b for a, b in zip(sums, parts)]
        diag_u, rho_u, diag_v, rho_v = (x / self.n_chains for x in sums)
        # a constant diagonal preconditioner: each coordinate's noise scaled as its step
        # (the C core could inject less, leaving room for the minibatch's own noise; measured
        # on MovieLens that mixed slower for the same calibration: docs/tuning.md)
        su, si = (autostep.row_step_factors(diag * rho[:, None], info["eps"],
                                            info["minibatch_scale"], info["row_noise"]).ravel()
                  for diag, rho in ((diag_u, rho_u), (diag_v, rho_v)))
        return su, si, su.copy(), si.copy()


def row_curvatures(layout, c_model, params, n_threads=0):
    """For each state p of the list `params`: ((diag, rho) of the users, (diag, rho) of the
    items), diag (rows, D + 1, grid order) the curvature H_kk of each row's coordinates
    (factors, then the bias), and rho (rows). H = tau sum_j x_j x_j^T is the row's
    likelihood Hessian at the state p, x_j = (v_j, 1) (the other side's factor row and bias;
    its tau); rho, the largest eigenvalue of its correlation matrix diag(H)^-1/2 H
    diag(H)^-1/2 (1 to D + 1, and 1 where a row has no ratings), so that steps c_k <= kappa
    / (H_kk rho) keep the preconditioned curvature at most kappa in every direction (H_kk
    rho is what bounds coordinate k's share of the minibatch noise). 0 where a row has no
    ratings (and for the bias without biases). The sums are the C core's (each row's terms
    in the layout's order: the same bits for any thread count), and so are the largest
    eigenvalues (pymf._linalg: Householder and bisection, NumPy's eigvalsh to a few units of
    rounding at 2-3x its speed), row by row without keeping the matrices
    (_bpmf.row_curvatures); past pymf._linalg.LAPACK_ABOVE coordinates, NumPy's eigenvalues
    of _bpmf.row_correlations' matrices, one state at a time."""
    if c_model[0] + 1 <= LAPACK_ABOVE:  # c_model[0]: the rank
        (du, ru), (di, ri) = _bpmf.row_curvatures(layout, c_model, params, n_threads)
        per_state = [((du[k], ru[k]), (di[k], ri[k])) for k in range(len(params))]
    else:
        per_state = [tuple((diag, largest_eigenvalues(R))
                           for diag, R in _bpmf.row_correlations(layout, c_model, p, n_threads))
                     for p in params]
    out = []
    for p, sides in zip(params, per_state):
        tau = float(p.lambdas[-1])
        # np.maximum: 1 where a row has no ratings (an empty stack gives an empty rho)
        out.append(tuple((tau * diag, np.maximum(rho, 1.0)) for diag, rho in sides))
    return out


class BPMFKernel(ChainsKernel):
    """DSGLD chains or the Gibbs chain in shared memory (OpenMP)."""

    _gibbs_rmse = None  # (sweep, [training RMSE]) of the Gibbs chain

    def __init__(self, model, ratings, sampler, seed, mean_rating, n_threads, add_noise=True):
        """add_noise=False: the same minibatch steps without noise (pymf.fit's (D)SGD)."""
        self.model, self.sampler = model, sampler
        self.n_threads = n_threads or 0
        self.unit = "round" if isinstance(sampler, DSGLD) else "sweep"
        self.n_chains = sampler.n_chains
        permute_rng, init_rng, gibbs_seeds, noise_seeds, hyper_seeds = bpmf_seeds(seed, self.n_chains)
        self.c_model = model.c_model(mean_rating)
        self.nnz = ratings.nnz
        self.rmse_limit = rmse_limit(ratings.values, mean_rating)
        if isinstance(sampler, DSGLD):
            self.layout = Layout(ratings, sampler.grid, sampler.permute, permute_rng)
            self.c = _bpmf.DSGLDChains(self.layout.c, self.c_model, self.n_chains,
                                       sampler.batch_size, sampler.round_length,
                                       sampler.hyper_every, add_noise, noise_seeds, hyper_seeds,
                                       n_threads, sampler.noise_correction)
            for c in range(self.n_chains):
                self.c.set_state(c, *_initial_params(model, ratings.shape, init_rng), 0)
            self.t = 0
        else:
            self.layout = Layout(ratings, (1, 1), False, permute_rng)
            L, M = ratings.shape
            by_user = stable_order((ratings.rows, ratings.cols), (L, M))
            by_item = stable_order((ratings.cols, ratings.rows), (M, L))
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
                hyper[-3:-1] = model.init_precision
                hyper[-1] = model.initial_tau
            else:
                hyper[:] = lambdas
            self.c.set_state(U, V, a, b, hyper, 0)
            self.train_pairs = (ratings.rows.astype(np.int32), ratings.cols.astype(np.int32))
            self.train_values = ratings.values
            self.t = 0

    def auto_step(self, seed, schedule=None, burnin=0):
        """The step chosen for step_size="auto" (pymf.engine.autostep) at the chains'
        starting state (chain 0): lambda_max of the full-data log posterior given the
        precisions, by finite-difference Hessian-vector products; eps0 = half the stability
        limit (and, with AutoStep(minibatch_noise=delta), at most the bound on the minibatch
        noise, for minibatch_scale), halved while a pilot of every chain diverges
        (autostep.pilot_units: 20 rounds, or up to the whole burnin where 10^6 minibatch
        draws pay for it); the chains are put back at their start. schedule(eps): the steps the
        run will take from eps (a callable of the rounds 1, 2, ...), which the pilot runs; its
        accepted end state is kept as kept_pilot for the run's first call (None: the pilot
        runs eps itself and nothing is kept). Returns (eps0, info)."""
        start = [self.c.get_state(c) for c in range(self.n_chains)]
        p0 = start[0]
        D = self.model.rank
        shapes = [p0.U.shape, p0.V.shape, p0.a.shape, p0.b.shape]
        sizes = [int(np.prod(shape)) for shape in shapes]

        def unpack(theta):
            parts, k = [], 0
            for shape, n in zip(shapes, sizes):
                parts.append(theta[k:k + n].reshape(shape))
                k += n
            return parts

        def gradient(theta):
            U, V, a, b = unpack(theta)
            params = _bpmf.Params(D, U, V, a, b, p0.lambdas)
            grads = _bpmf.log_posterior_gradient(self.layout.c, self.c_model, params,
                                                 self.n_threads)
            if not self.model.bias:
                grads = grads[:2] + (np.zeros_like(a), np.zeros_like(b))
            return np.concatenate([g.ravel() for g in grads])

        def pilot(eps):
            self.kept_pilot = None
            units = np.arange(1, n_pilot_units + 1)
            steps = np.full(len(units), eps) if schedule is None else \
                np.ascontiguousarray(schedule(eps)(units), dtype=np.float64)
            try:
                started = time.perf_counter()
                self._run_units(steps)
                # finite is not enough: a blown-up chain stays finite (BLOWUP_FACTOR)
                ok = self.blown_up([_rmse(sq, self.nnz) for sq in self.c.sq_errors()]) is None
                if ok and schedule is not None:
                    self.kept_pilot = autostep.KeptPilot(steps, self.snapshot(),
                                                         time.perf_counter() - started)
                return ok
            finally:
                for c, p in enumerate(start):
                    self.c.set_state(c, p.U, p.V, p.a, p.b, p.lambdas, 0)
                self.t = 0

        n_pilot_units = autostep.pilot_units(burnin, self.draws_per_round)
        theta = np.concatenate([p0.U.ravel(), p0.V.ravel(), p0.a.ravel(), p0.b.ravel()])
        eps, info = autostep.choose(gradient, theta, seed_sequence(seed), pilot,
                                    step=self.sampler.step_size,
                                    minibatch_scale=self.minibatch_scale,
                                    n_pilot_units=n_pilot_units)
        step = self.sampler.step_size
        if step.minibatch_noise is None and step.per_row and self.minibatch_scale > 1.0:
            info.update(row_noise=autostep.ROW_NOISE, minibatch_scale=self.minibatch_scale)
        return eps, info

    def chain_params(self, chain):
        return self.c.get_state(chain)

    def apply_row_steps(self, step_user, step_item, noise_user, noise_item, from_round):
        self.c.set_row_steps(step_user, step_item, noise_user, noise_item, from_round)

    def _apply_tau_reference(self, tau_reference):
        self.c.set_tau_reference(tau_reference)

    @property
    def draws_per_round(self):
        """Minibatch draws of one round of every chain: each chain steps through one group
        of P Q / G blocks on average, round_length minibatches of batch_size each."""
        P, Q = self.sampler.grid
        return (self.n_chains * self.sampler.round_length * self.sampler.batch_size
                * P * Q / self.layout.c.n_groups)

    @property
    def minibatch_scale(self):
        """s = N G / (P Q m): what a minibatch's likelihood gradient is scaled by, on
        average over the blocks (a block's N / (P Q) entries over its visit rate 1 / G,
        per m ratings drawn)."""
        P, Q = self.sampler.grid
        return self.nnz * self.layout.c.n_groups / (P * Q * self.sampler.batch_size)

    @property
    def is_gibbs(self):
        return isinstance(self.c, _bpmf.BPMFGibbsChain)

    def set_initial(self, init):
        """Start every chain from init (check_init's dict, original order); the precisions
        keep their initial values."""
        self._gibbs_rmse = None
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
        self._drawn = self._gibbs_rmse = None
        counter = int(state["counter"])
        if self.is_gibbs:
            self.c.set_state(*(state[key] for key in ("U", "V", "a", "b", "hyper")), counter)
        else:
            for c in range(self.n_chains):
                self.c.set_state(c, *(state[key][c] for key in _CHAIN_ARRAYS), counter)
        self.t = counter

    def _run_units(self, steps):
        if self.is_gibbs:
            self.c.run(len(steps))
            self.t += len(steps)
            return
        if len(steps):
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

    def train_rmses(self):
        if self.is_gibbs:
            # a pass of predictions over the ratings, asked for by check_state and then by
            # the trace point and the kept draw of the same sweep: computed once a sweep
            if self._gibbs_rmse is None or self._gibbs_rmse[0] != self.t:
                self._gibbs_rmse = (self.t, [self.train_rmse(0)])
            return list(self._gibbs_rmse[1])
        # every chain in one pass over the ratings, or the sums that tau's draw, a trace
        # point or a kept draw left at this round (at 10^7 ratings a pass of 4 chains costs
        # about a round and a half)
        return [_rmse(sq, self.nnz) for sq in self.c.sq_errors()]

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
            stats = {"lam_u_mean": lam_u.mean(), "lam_v_mean": lam_v.mean(),
                     "lam_a": hyper[-3], "lam_b": hyper[-2]}
            if self.model.sample_tau:
                stats["tau"] = hyper[-1]
            return U, V, a, b, stats
        p = self.c.get_state(chain)
        U, V, a, b = self.layout.to_original(p.U, p.V, p.a, p.b)
        return U, V, a, b, precision_stats(p.lambdas, self.model)

    def precisions(self, chain):
        if self.is_gibbs:
            return self.state(chain)[4]
        return precision_stats(self.c.precisions(chain), self.model)
