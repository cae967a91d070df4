"""Sampler objects: what to run, not how (pymf.sampling runs them).

LD     Langevin dynamics, full gradient, usually a constant step.
SGLD   stochastic gradient LD, minibatch of entries drawn with replacement, scaled N/|Omega|.
PSGLD  parallel SGLD (Simsekli et al. 2015): B x B block grid, one part per iteration,
       its B blocks updated in parallel, gradient scaled N/|Pi_t|.

Step sizes: a float (constant), PolynomialDecay(a, b): eps_t = (a / t) ** b, or
AnnealedStep(eps0, kappa, gamma): eps_t = eps0 (1 + t / kappa) ** -gamma (the DSGLD paper's).
"""
import math
import numbers

import numpy as np


class ConstantStep:
    def __init__(self, value):
        self.value = check_real(value, "the step size", positive=True)

    def __call__(self, t):
        return np.full(np.shape(t), self.value, dtype=np.float64)

    def params(self):
        return {"kind": "constant", "value": self.value}

    def __repr__(self):
        return f"{self.value}"


class PolynomialDecay:
    """eps_t = (a / t) ** b for t = 1, 2, ... (b in (0.5, 1] satisfies the Robbins-Monro
    conditions sum eps = inf, sum eps^2 < inf)."""

    def __init__(self, a, b=0.51):
        a = check_real(a, "PolynomialDecay: a", positive=True)
        b = check_real(b, "PolynomialDecay: b")
        if not (0.5 < b <= 1.0):
            raise ValueError(f"PolynomialDecay: b must be in (0.5, 1], got {b}")
        self.a, self.b = a, b

    def __call__(self, t):
        t = np.asarray(t, dtype=np.float64)
        return (self.a / t) ** self.b

    def params(self):
        return {"kind": "polynomial", "a": self.a, "b": self.b}

    def __repr__(self):
        return f"PolynomialDecay(a={self.a}, b={self.b})"


class AnnealedStep:
    """eps_t = eps0 (1 + t / kappa) ** -gamma for round t = 1, 2, ... (the DSGLD paper's
    schedule, gamma=0.51 there; annealed once per round)."""

    def __init__(self, eps0, kappa=100.0, gamma=0.51):
        eps0 = check_real(eps0, "AnnealedStep: eps0", positive=True)
        kappa = check_real(kappa, "AnnealedStep: kappa", positive=True)
        gamma = check_real(gamma, "AnnealedStep: gamma")
        if not (0.5 < gamma <= 1.0):
            raise ValueError(f"AnnealedStep: gamma must be in (0.5, 1], got {gamma}")
        self.eps0, self.kappa, self.gamma = eps0, kappa, gamma

    def __call__(self, t):
        return self.eps0 * (1.0 + np.asarray(t, dtype=np.float64) / self.kappa) ** -self.gamma

    def params(self):
        return {"kind": "annealed", "eps0": self.eps0, "kappa": self.kappa, "gamma": self.gamma}

    def __repr__(self):
        return f"AnnealedStep(eps0={self.eps0}, kappa={self.kappa}, gamma={self.gamma})"


def as_step_size(step_size):
    if isinstance(step_size, (ConstantStep, PolynomialDecay, AnnealedStep)):
        return step_size
    if isinstance(step_size, numbers.Real) and not isinstance(step_size, bool):
        return ConstantStep(step_size)
    raise ValueError("step_size must be a positive float, a PolynomialDecay or an AnnealedStep, "
                     f"got {step_size!r}")


def step_size_from_params(params):
    if params["kind"] == "constant":
        return ConstantStep(params["value"])
    if params["kind"] == "annealed":
        return AnnealedStep(params["eps0"], params["kappa"], params["gamma"])
    return PolynomialDecay(params["a"], params["b"])


def check_seed(seed, name="seed"):
    """A seed: a non-negative integer (what numpy.random.SeedSequence takes)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {seed!r}")
    return int(seed)


MAX_RANK = 1 << 20  # the C core holds the rank in an int; far above any factorisation's


def check_rank(rank):
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank <= 0:
        raise ValueError(f"rank must be a positive integer, got {rank!r}")
    if rank > MAX_RANK:
        raise ValueError(f"rank={rank} is too large (at most {MAX_RANK})")
    return int(rank)


def check_real(value, name, positive=False):
    """A finite real parameter (positive=True: > 0), named in the error."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or (positive and not value > 0):
        kind = "a positive finite number" if positive else "a finite number"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return float(value)


def check_flag(value, name):
    """A boolean option: True or False, not a truthy string such as 'no'."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_batch_size(batch_size):
    """A minibatch size: an int >= 1, or a float in (0, 1] meaning that fraction of the data."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Real):
        raise ValueError(f"batch_size must be an int or a fraction, got {batch_size!r}")
    if isinstance(batch_size, numbers.Integral):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    elif not 0.0 < batch_size <= 1.0:
        raise ValueError(f"a fractional batch_size must be in (0, 1], got {batch_size}")
    return batch_size


def batch_count(batch_size, n):
    """The number of entries per minibatch out of n (check_batch_size's value); more than n
    is refused (a minibatch larger than the data only costs time and memory)."""
    if isinstance(batch_size, numbers.Integral):
        if batch_size > n:
            raise ValueError(f"batch_size={batch_size} is larger than the {n} entries of the data")
        return int(batch_size)
    return max(1, int(round(batch_size * n)))


# OpenMP threads a run may ask for: far above any node's cores, far below what makes the
# runtime fail to create them (tens of thousands abort or crash the process)
MAX_THREADS = 1024


def _check_threads(n_threads, name="n_threads"):
    if n_threads is None:
        return 0
    if isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral) or n_threads < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {n_threads!r}")
    if n_threads > MAX_THREADS:
        raise ValueError(f"{name}={n_threads} is too many threads (at most {MAX_THREADS})")
    return int(n_threads)


def _check_blocks(blocks, name="blocks"):
    if isinstance(blocks, bool) or not isinstance(blocks, numbers.Integral) or blocks < 1:
        raise ValueError(f"{name} must be a positive integer, got {blocks!r}")
    return int(blocks)


class _Langevin:
    """What LD, SGLD and PSGLD share: a step size, threads and a block grid."""
    kind = None

    def __init__(self, step_size, blocks, n_threads, permute):
        self.step_size = as_step_size(step_size)
        self.blocks = None if blocks is None else _check_blocks(blocks)
        self.n_threads = _check_threads(n_threads)
        self.permute = check_flag(permute, "permute")

    def grid_blocks(self, shape):
        """B for this data: PSGLD's B is the user's; LD/SGLD use the grid only to cut the
        work into pieces (at most 16)."""
        if self.blocks is not None:
            return self.blocks
        return max(1, min(16, shape[0], shape[1]))

    def batch_size(self, n_observed):
        return 0

    def make_chain(self, data, model, noise_seed, schedule_seed, batch_size):
        """The C chain of this sampler (pymf._sgld.LangevinChain)."""
        from pymf import _sgld
        return _sgld.LangevinChain(
            data, self.kind, model.rank, model.beta, model.phi, model.prior, model.lam_w,
            model.lam_h, noise_seed, schedule_seed, batch_size=batch_size,
            part_order=getattr(self, "part_order", "cyclic"), n_threads=self.n_threads)

    def params(self):
        return {"sampler": self.kind, "step_size": self.step_size.params(),
                "blocks": self.blocks, "permute": self.permute}


class LD(_Langevin):
    """Langevin dynamics: the full likelihood gradient at every iteration."""
    kind = "ld"

    def __init__(self, step_size=1e-3, n_threads=None, blocks=None):
        super().__init__(step_size, blocks, n_threads, permute=False)

    def __repr__(self):
        return f"LD(step_size={self.step_size!r})"


class SGLD(_Langevin):
    """Stochastic gradient LD: batch_size entries drawn with replacement per iteration.

    batch_size: an int, or a float in (0, 1] meaning that fraction of the N entries
    (the paper's setting is N / 32)."""
    kind = "sgld"

    def __init__(self, step_size=1e-3, batch_size=1.0 / 32, n_threads=None, blocks=None):
        super().__init__(step_size, blocks, n_threads, permute=False)
        self._batch = check_batch_size(batch_size)

    def batch_size(self, n_observed):
        return batch_count(self._batch, n_observed)

    def params(self):
        out = super().params()
        out["batch_size"] = self._batch
        return out

    def __repr__(self):
        return f"SGLD(step_size={self.step_size!r}, batch_size={self._batch})"


class PSGLD(_Langevin):
    """Parallel SGLD on a B x B block grid.

    blocks:     B (rows and columns are each cut into B pieces).
    part_order: "cyclic" (part (t-1) mod B) or "random" (part p with probability |Pi_p|/N).
    permute:    shuffle rows and columns (seeded) before cutting, to balance sparse blocks.
    backend:    "cpu" (OpenMP) or "cuda" (pymf.gpu; an error where no GPU is usable).
    dtype:      "float64", or "float32" on the GPU (the CPU sampler is float64 only).
    """
    kind = "psgld"

    def __init__(self, blocks, step_size=1e-3, part_order="cyclic", permute=False,
                 n_threads=None, backend="cpu", dtype="float64"):
        super().__init__(step_size, _check_blocks(blocks), n_threads, permute)
        if part_order not in ("cyclic", "random"):
            raise ValueError(f"part_order must be 'cyclic' or 'random', got {part_order!r}")
        if backend not in ("cpu", "cuda"):
            raise ValueError(f"backend must be 'cpu' or 'cuda', got {backend!r}")
        if dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
        if dtype == "float32" and backend != "cuda":
            raise ValueError("dtype='float32' runs on backend='cuda' only; the CPU sampler is float64")
        self.part_order = part_order
        self.backend = backend
        self.dtype = dtype

    def make_chain(self, data, model, noise_seed, schedule_seed, batch_size):
        if self.backend == "cuda":
            from pymf import gpu
            return gpu.CudaPSGLDChain(data, model, self, noise_seed, dtype=np.dtype(self.dtype))
        return super().make_chain(data, model, noise_seed, schedule_seed, batch_size)

    def params(self):
        out = super().params()
        out.update(part_order=self.part_order, backend=self.backend, dtype=self.dtype)
        return out

    def __repr__(self):
        return (f"PSGLD(blocks={self.blocks}, step_size={self.step_size!r}, "
                f"part_order={self.part_order!r})")
