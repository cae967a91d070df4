"""Samplers of a BPMF model: DSGLD (several chains, square / column / hybrid block splits)
and BPMFGibbs (Salakhutdinov & Mnih 2008). pymf.SGLD on a BPMF model runs DSGLD with one
chain and one block."""
import copy

from pymf.engine.checks import C_INT_MAX, check_count, check_flag, check_real, check_threads
from pymf.engine.steps import as_step_size


def split_grid(split, blocks):
    """(P, Q) of a split scheme: square B -> B x B, column S -> S x 1, hybrid (P, Q)."""
    if split == "square":
        B = check_count(2 if blocks is None else blocks, "blocks", 1)
        return B, B
    if split == "column":
        S = check_count(4 if blocks is None else blocks, "blocks", 1)
        return S, 1
    if split == "hybrid":
        try:
            P, Q = blocks
        except (TypeError, ValueError):
            raise ValueError("split='hybrid' needs blocks=(row_stripes, column_stripes)") from None
        return check_count(P, "row stripes", 1), check_count(Q, "column stripes", 1)
    raise ValueError(f"split must be 'square', 'column' or 'hybrid', got {split!r}")


def batch_rule(n_ratings, P, Q):
    """DSGLD's default minibatch: 1000 ratings (bench/bpmf_movielens.py's), at most a tenth
    of an average block's N / (P Q) ratings, at least 1; and at least a hundredth of an
    average block, which is more than 1000 once blocks hold over 100,000 ratings (on
    bench/dsgld_large.py's 10M matrix, blocks of 1.1M ratings, a minibatch of 1,000 ended
    0.0033 RMSE behind 10,000 in the same time: docs/benchmarks.md, "DSGLD at 10M ratings")."""
    block = n_ratings // (P * Q)
    return int(max(min(1000, max(1, block // 10)), block // 100))


MAX_CHAINS = 4096  # each chain holds a copy of U and V and is evaluated at every kept sample


class DSGLD:
    """Distributed SGLD for BPMF (shared memory; pymf.mpi.sample and python -m pymf.mpi dsgld
    run the same chains over MPI).

    chains       number of chains (default: the number of orthogonal groups, max(P, Q), so
                 that every block is busy in every round, as in the paper)
    split        "square" (blocks=B: B x B grid, groups of B orthogonal blocks), "column"
                 (blocks=S: S row stripes, each block its own group) or "hybrid"
                 (blocks=(P, Q))
    n_threads    OpenMP threads over the (chain, block) tasks of a round (None: all cores)
    batch_size   m, ratings per minibatch (drawn with replacement from one block); None
                 (default): batch_rule(N, P, Q): 1000 (bench/bpmf_movielens.py's) unless
                 that is more than a tenth of an average block of N / (P Q) ratings (so a
                 matrix of a few hundred ratings works too) or less than a hundredth of one
                 (blocks of over 100,000 ratings: bench/dsgld_large.py's best at 10M)
    round_length gamma, minibatch steps per block between exchanges
    step_size    "auto" (the default), AnnealedStep(eps0, kappa) (eps_t = eps0 (1 +
                 t/kappa)^-0.51 per round) or a float; convention theta += eps grad +
                 N(0, 2 eps). "auto": eps0 = 1 / lambda_max of the full-data log posterior at
                 the start (half the stability limit, halved while a pilot diverges;
                 pymf.engine.autostep), annealed with kappa = 1000 as the benchmarked default
                 below; after the burn-in each row's coordinates get their own step,
                 eps c_k with c_k in (0, 1] measured at the end of the burn-in, so that the
                 minibatch noise inflates no row's variance by more than 1 + 0.35 (the
                 per-row bound, pymf.engine.autostep point 5: calibrated intervals on
                 BPMF's own model at MovieLens's speed); recorded in params["auto_step"]
                 (row_noise, row_steps_from, row_steps). With tau sampled, each chain's
                 step is also times min(1, tau_ref / tau), tau_ref its starting tau (raised
                 to its tau when the row factors are measured): the step was chosen for
                 the curvature at tau_ref, which grows with tau (params["auto_step"]
                 ["tau_reference"]). pymf.AutoStep(per_row=False): the
                 stability rule alone. pymf.AutoStep(minibatch_noise=0.1):
                 the same, bounded after the burn-in so that the minibatch noise inflates
                 the posterior variance by at most 10 % (calibrated intervals on BPMF's own
                 model; far slower mixing where the minibatch scale and curvature are large,
                 as on MovieLens: docs/tuning.md, "Calibrated SG-MCMC")
    hyper_every  Gibbs draw of the precisions (and of tau, when the model samples it) every
                 this many rounds (0: never)

    Where the defaults come from: round_length=10, the annealing AnnealedStep(eps0, 1000)
    and hyper_every=10 are the settings bench/bpmf_movielens.py found best on MovieLens-100K
    (a 2 x 2 square split, D = 10 and 30, eps0 = 1e-3; pymf <= 0.2 had rounds of 50, eps0 =
    1e-4 and kappa = 100, which reached test RMSE 0.911 in 67 s; AnnealedStep(1e-3, 1000)
    reaches 0.8988 in 9.8 s with 2 threads, bench/defaults.py). eps0 itself is "auto": the
    same rule as every other Langevin sampler's, so a data set of another scale needs no
    step; pass step_size=pymf.AnnealedStep(1e-3, 1000) for the chain of pymf 0.2's tuned
    setting. The per-row bound's 0.35 is the largest of 0.25 / 0.35 / 0.5 that kept test
    RMSE <= 0.900 on MovieLens-100K after 3,000 rounds while covering within binomial
    error on tests/test_calibration.py's BPMF data (docs/tuning.md, "DSGLD's default: a
    per-row bound").
    noise_correction  True (default): a touched row gets noise N(0, 2 eps / hbar_i), which
                 keeps the chain on the posterior; False: N(0, 2 eps) as in the paper, which
                 samples a tempered posterior (too narrow for rows with hbar_i < 1)
    """

    kind = "dsgld"

    def __init__(self, chains=None, split="square", blocks=None, n_threads=None, batch_size=None,
                 round_length=10, step_size="auto", hyper_every=10,
                 permute=True, noise_correction=True):
        self.split = split
        self.grid = split_grid(split, blocks)
        self.blocks = blocks
        self.chains = None if chains is None else check_count(chains, "chains", 1)
        if self.chains is not None and self.chains > MAX_CHAINS:
            raise ValueError(f"chains={chains} is too many (at most {MAX_CHAINS})")
        self.n_threads = check_threads(n_threads) or None
        self.batch_size = None if batch_size is None else check_count(batch_size, "batch_size", 1)
        self.round_length = check_count(round_length, "round_length", 1, C_INT_MAX)
        self.step_size = as_step_size(step_size)
        self.hyper_every = check_count(hyper_every, "hyper_every", 0, C_INT_MAX)
        self.permute = check_flag(permute, "permute")
        self.noise_correction = check_flag(noise_correction, "noise_correction")

    def for_data(self, n_ratings):
        """These settings with batch_size resolved for n_ratings training ratings
        (batch_rule when it is None); an explicit batch_size larger than the data is an
        error."""
        if self.batch_size is not None:
            if self.batch_size > n_ratings:
                raise ValueError(f"batch_size={self.batch_size} is larger than the {n_ratings} "
                                 "training ratings")
            return self
        resolved = copy.copy(self)
        resolved.batch_size = batch_rule(n_ratings, *self.grid)
        return resolved

    @property
    def n_chains(self):
        return self.chains if self.chains is not None else max(self.grid)

    def params(self):
        return {"sampler": "dsgld", "split": self.split, "grid": list(self.grid),
                "chains": self.n_chains, "n_threads": self.n_threads, "batch_size": self.batch_size,
                "round_length": self.round_length, "step_size": self.step_size.params(),
                "hyper_every": self.hyper_every, "permute": self.permute,
                "noise_correction": self.noise_correction}

    def __repr__(self):
        return (f"DSGLD(chains={self.n_chains}, split={self.split!r}, grid={self.grid}, "
                f"batch_size={self.batch_size}, step_size={self.step_size!r})")


class BPMFGibbs:
    """Gibbs sampling of BPMF (Salakhutdinov & Mnih 2008): every u_i (with a_i) and v_j
    (with b_j) from its Gaussian conditional, in parallel, by Cholesky (GSL).

    hyperprior "wishart": Normal-Wishart on (mu_U, Lambda_U) and (mu_V, Lambda_V) with
    mu0 = 0, beta0=nw_beta0 (2), nu0=nw_nu0 (rank), W0 = nw_w0 I (I): the original BPMF.
    hyperprior "gamma": the diagonal precisions of pymf.BPMF, the exact sampler of the
    model DSGLD samples (used to check DSGLD). n_threads: OpenMP threads.

    Where the defaults come from: the Normal-Wishart settings are Salakhutdinov & Mnih's
    (mu0 = 0, beta0 = 2, nu0 = D, W0 = I); with pymf.BPMF's sampled tau they reach a held-out
    RMSE of 0.8973 on MovieLens-100K at D = 10 in 600 sweeps (bench/defaults.py). A search
    of W0's scale on the developers' own split (bench/gibbs_prior_search.py: w0 in 0.3, 1,
    3, 10) kept W0 = I.
    """

    kind = "bpmf_gibbs"

    def __init__(self, hyperprior="wishart", nw_beta0=2.0, nw_nu0=None, nw_w0=1.0, n_threads=None):
        if hyperprior not in ("wishart", "gamma"):
            raise ValueError(f"hyperprior must be 'wishart' or 'gamma', got {hyperprior!r}")
        self.hyperprior = hyperprior
        self.nw_beta0 = check_real(nw_beta0, "nw_beta0", positive=True)
        self.nw_w0 = check_real(nw_w0, "nw_w0", positive=True)
        self.nw_nu0 = None if nw_nu0 is None else check_real(nw_nu0, "nw_nu0", positive=True)
        self.n_threads = check_threads(n_threads) or None
        self.n_chains = 1

    def params(self):
        return {"sampler": "bpmf_gibbs", "hyperprior": self.hyperprior, "nw_beta0": self.nw_beta0,
                "nw_nu0": self.nw_nu0, "nw_w0": self.nw_w0, "n_threads": self.n_threads}

    def __repr__(self):
        return f"BPMFGibbs(hyperprior={self.hyperprior!r})"
