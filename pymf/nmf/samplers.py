"""The samplers of the NMF family besides pymf.LD and pymf.SGLD (pymf.langevin):

PSGLD  parallel SGLD (Simsekli et al. 2015): B x B block grid, one part per iteration,
       its B blocks updated in parallel, gradient scaled N/|Pi_t|.
Gibbs  the Gamma-Poisson auxiliary-variable Gibbs sampler of Poisson NMF (the PSGLD
       paper's baseline).
"""
from pymf.engine.checks import check_blocks, check_threads
from pymf.langevin import _Langevin


class PSGLD(_Langevin):
    """Parallel SGLD on a B x B block grid.

    blocks:     B (rows and columns are each cut into B pieces).
    part_order: "cyclic" (part (t-1) mod B) or "random" (part p with probability |Pi_p|/N).
    permute:    shuffle rows and columns (seeded) before cutting, to balance sparse blocks.
    backend:    "cpu" (OpenMP) or "cuda" (pymf.gpu; an error where no GPU is usable).
    step_size:  "auto" (the default), a float or a schedule. Where the default comes
                from: chosen per run from the curvature at the start, half the Langevin
                stability limit, checked by a pilot (pymf.engine.autostep; README,
                "Automatic steps", and docs/tuning.md). After a burn-in (burnin > 0)
                every row of W and of H^T gets its own steps eps c_k, c_k in (0, 1]
                measured from the row's Fisher curvature at the burn-in's end, so that a
                part's noise (s = B) inflates no row's variance by more than 1 + 0.35
                (the per-row bound, pymf.engine.autostep point 5: calibrated intervals
                on 2 x 2 to 8 x 8 grids); recorded in params["auto_step"] (row_noise,
                row_steps_from, row_steps); on the CPU, over MPI and on the GPU. Without
                a burn-in the stability rule alone (params["auto_step"]["per_row"] says why).
                pymf.AutoStep(per_row=False): the stability rule alone;
                pymf.AutoStep(minibatch_noise=0.1) bounds the whole step after the burn-in
                instead (calibrated too, 5-35x smaller: slower). pymf <= 0.2 had a
                constant 1e-3, which ended at a log-likelihood of -6.5M on the paper's
                1024^2 Poisson NMF (K = 32) where a suitable step reaches about -0.58M.
    dtype:      "float64", or "float32" on the GPU (the CPU sampler is float64 only).
    """
    kind = "psgld"

    def __init__(self, blocks, step_size="auto", part_order="cyclic", permute=False,
                 n_threads=None, backend="cpu", dtype="float64"):
        super().__init__(step_size, check_blocks(blocks), n_threads, permute)
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

    def params(self):
        out = super().params()
        out.update(part_order=self.part_order, backend=self.backend, dtype=self.dtype)
        return out

    def __repr__(self):
        return (f"PSGLD(blocks={self.blocks}, step_size={self.step_size!r}, "
                f"part_order={self.part_order!r})")


class Gibbs:
    """Gamma-Poisson auxiliary-variable Gibbs sampler (beta=1, phi=1, exponential priors,
    non-negative integer data). One iteration is one sweep over S, W and H.

    blocks: pieces of rows / columns the sweep is parallelised over (default min(8, I, J));
    the chain is the same for any thread count, and depends on `blocks`.
    """
    kind = "gibbs"

    def __init__(self, n_threads=None, blocks=None):
        self.n_threads = check_threads(n_threads)
        self.blocks = None if blocks is None else check_blocks(blocks)
        self.permute = False
        self.step_size = None  # no step: the run loop passes zeros, which Gibbs ignores

    def grid_blocks(self, shape):
        return self.blocks if self.blocks is not None else max(1, min(8, shape[0], shape[1]))

    def batch_size(self, n_observed):
        return 0

    def params(self):
        return {"sampler": "gibbs", "blocks": self.blocks}

    def __repr__(self):
        return "Gibbs()"
