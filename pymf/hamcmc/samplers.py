"""HAMCMC and the samplers the paper compares it with (pymf.SGLD is shared with the other
families: pymf.langevin)."""
import math
import numbers

from pymf.engine.checks import (batch_count, check_batch_size, check_blocks, check_flag,
                                check_real, check_threads)
from pymf.engine.steps import as_step_size


class _StochasticGradientMCMC:
    """A step size and a minibatch size (None: the full data).

    step_size: "auto" (the default), a float or a schedule. Where the default comes from:
    the rule every Langevin sampler of pymf uses (pymf.engine.autostep), eps = 1 /
    lambda_max, half the stability limit, with lambda_max the largest curvature of the
    PRECONDITIONED log posterior P H at the start, P the sampler's preconditioner there
    (SGLD: I; SGRLD: its metric, so P H = I on the linear-Gaussian model and eps = 1;
    HAMCMC: gamma I, that of its first 2M iterations and of the directions its memory does
    not reach; PreconditionedSGLD: diag(1 / (lam + sqrt V)) of its first minibatch), checked
    by a pilot that halves eps while it diverges; recorded in params["auto_step"]. pymf <=
    0.2 had a constant 1e-3; pass step_size=1e-3 for the old chain.
    """

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
    keeps H positive definite when minibatch curvature is not).

    scaled_gamma=True: the standard L-BFGS scaling (Nocedal & Wright eq. 7.20): every
    quasi-Newton iteration starts its recursion from H^0 = (s^T y / y^T y) I of the newest
    memory pair that enters H (s^T y > 0), so H^0 follows the curvature along the latest
    steps instead of a fixed gamma; gamma then only preconditions the first 2M (Langevin)
    iterations and stands in while no pair in memory is usable.

    On a LinearGaussian model each iteration draws batch_size entries (None: all of them).
    On a TweedieNMF model (pymf.hamcmc.mf) the minibatches are the parts of a blocks x blocks
    grid, as PSGLD's (permute: shuffle rows and columns before cutting), the blocks of a
    part run on n_threads OpenMP threads (None: all), and batch_size is not used;
    blocks=None there means min(16, I, J) pieces. part_order "random" (the default; part p
    with probability |Pi_p| / N, as in the paper) or "cyclic": HAMCMC moves theta_{t-M}, so
    its samples form M interleaved sub-chains, and with cyclic parts sub-chain t mod M only
    ever sees the parts t - 1 mod B; unless gcd(M, B) = 1 some parts are never seen by a
    sub-chain and it samples another posterior, so that pairing is refused.
    step_size: "auto" (the default; see _StochasticGradientMCMC: on a TweedieNMF model
    lambda_max of gamma times the Hessian of the full-data log posterior), a float or a
    schedule.
    """

    kind = "hamcmc"

    def __init__(self, memory=2, gamma=1.0, lam=0.0, step_size="auto", batch_size=0.01,
                 blocks=None, part_order="random", permute=False, n_threads=None,
                 scaled_gamma=False):
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
        self.scaled_gamma = check_flag(scaled_gamma, "scaled_gamma")
        # the matrix-factorisation settings (pymf.hamcmc.mf)
        self.blocks = None if blocks is None else check_blocks(blocks)
        if part_order not in ("cyclic", "random"):
            raise ValueError(f"part_order must be 'cyclic' or 'random', got {part_order!r}")
        self.part_order = part_order
        self.permute = check_flag(permute, "permute")
        self.n_threads = check_threads(n_threads)

    def chain_options(self):
        return {"memory": self.memory, "gamma": self.gamma, "scaled_gamma": self.scaled_gamma,
                "lam": self.lam}

    def grid_params(self):
        """The matrix-factorisation settings, recorded in a TweedieNMF run's params."""
        return {"blocks": self.blocks, "part_order": self.part_order, "permute": self.permute,
                "n_threads": self.n_threads}

    def __repr__(self):
        grid = "" if self.blocks is None else f", blocks={self.blocks}"
        scaled = ", scaled_gamma=True" if self.scaled_gamma else ""
        return (f"HAMCMC(memory={self.memory}, gamma={self.gamma}{scaled}, lam={self.lam}, "
                f"step_size={self.step_size!r}, batch_size={self._batch}{grid})")


class PreconditionedSGLD(_StochasticGradientMCMC):
    """SGLD with the diagonal RMSprop preconditioner of Li, Chen, Carlson & Carin (AAAI
    2016): V = alpha V + (1 - alpha) g*g, precond = 1 / (lam + sqrt V); the correction term
    is dropped, as in their experiments (which leaves a bias that does not vanish)."""

    kind = "precond_sgld"

    def __init__(self, alpha=0.99, lam=1e-5, step_size="auto", batch_size=0.01):
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

    def __init__(self, step_size="auto", batch_size=0.01):
        super().__init__(step_size, batch_size)

    def __repr__(self):
        return f"SGRLD(step_size={self.step_size!r}, batch_size={self._batch})"
