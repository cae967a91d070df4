"""Sampler and optimiser settings that several families run: LD (NMF), SGLD (NMF, BPMF, the
linear-Gaussian model), SGD and DSGD (NMF and BPMF, through pymf.fit).

These objects say what to run, not how: each family's runner (registered with
pymf.engine.registry) builds its own kernel from them.

LD     Langevin dynamics, full gradient, usually a constant step.
SGLD   stochastic gradient LD, minibatch of entries drawn with replacement, scaled N/|Omega|.
SGD    plain stochastic gradient descent on the log posterior (a MAP baseline).
DSGD   distributed (stratified) SGD on a B x B block grid (Gemulla et al. 2011).
"""
import numbers

import numpy as np

from pymf.engine.checks import (batch_count, check_batch_size, check_blocks, check_flag,
                                check_threads)
from pymf.engine.steps import as_step_size


class _Langevin:
    """What LD, SGLD and PSGLD share: a step size, threads and a block grid."""
    kind = None

    def __init__(self, step_size, blocks, n_threads, permute):
        self.step_size = as_step_size(step_size)
        self.blocks = None if blocks is None else check_blocks(blocks)
        self.n_threads = check_threads(n_threads)
        self.permute = check_flag(permute, "permute")

    def grid_blocks(self, shape):
        """B for this data: PSGLD's B is the user's; LD/SGLD use the grid only to cut the
        work into pieces (at most 16)."""
        if self.blocks is not None:
            return self.blocks
        return max(1, min(16, shape[0], shape[1]))

    def batch_size(self, n_observed):
        return 0

    def params(self):
        return {"sampler": self.kind, "step_size": self.step_size.params(),
                "blocks": self.blocks, "permute": self.permute}


class LD(_Langevin):
    """Langevin dynamics: the full likelihood gradient at every iteration. step_size:
    "auto" (the default), a float or a schedule.

    Where the default comes from: "auto" is chosen per run from the curvature of the log
    posterior at the start (pymf.engine.autostep: half the Langevin stability limit, eps =
    1 / lambda_max, checked by a pilot that halves it while it diverges; recorded in
    params["auto_step"]). pymf <= 0.2 had a constant 1e-3, which is stable only where the
    curvature is below 2000 and far too slow where it is small; pass step_size=1e-3 for
    the old chain."""
    kind = "ld"

    def __init__(self, step_size="auto", n_threads=None, blocks=None):
        super().__init__(step_size, blocks, n_threads, permute=False)

    def __repr__(self):
        return f"LD(step_size={self.step_size!r})"


class SGLD(_Langevin):
    """Stochastic gradient LD: batch_size entries drawn with replacement per iteration.

    batch_size: an int, or a float in (0, 1] meaning that fraction of the N entries
    (the default N / 32 is the PSGLD paper's setting). step_size: as LD's. Where the default
    comes from: "auto" as LD's, on every model (NMF, BPMF, where it runs DSGLD with one
    chain, and the linear-Gaussian model); pymf <= 0.2 had a constant 1e-3."""
    kind = "sgld"

    def __init__(self, step_size="auto", batch_size=1.0 / 32, n_threads=None, blocks=None):
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


class SGD:
    """Plain SGD: each iteration applies batch_size single-entry moves drawn with
    replacement (default: N / 16 per iteration, so 16 iterations make an epoch)."""
    kind = "sgd"

    def __init__(self, step_size=1e-3, batch_size=None, n_threads=None):
        self.step_size = as_step_size(step_size)
        if batch_size is not None and (isinstance(batch_size, bool) or
                                       not isinstance(batch_size, numbers.Integral) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self._batch = batch_size
        self.n_threads = check_threads(n_threads)
        self.blocks, self.permute, self.part_order = None, False, "cyclic"

    def grid_blocks(self, shape):
        return 1

    def iterations_per_epoch(self, n_observed):
        return int(np.ceil(n_observed / self.batch_size(n_observed)))

    def batch_size(self, n_observed):
        if self._batch is not None and self._batch > n_observed:
            raise ValueError(f"batch_size={self._batch} is larger than the {n_observed} entries "
                             "of the data")
        return self._batch if self._batch is not None else max(1, n_observed // 16)

    def params(self):
        return {"optimizer": "sgd", "step_size": self.step_size.params(), "batch_size": self._batch}


class DSGD:
    """Distributed (stratified) SGD on a B x B grid: an iteration is one part, its blocks
    in parallel; B iterations make an epoch."""
    kind = "dsgd"

    def __init__(self, blocks, step_size=1e-3, part_order="cyclic", permute=False, n_threads=None):
        self.blocks = check_blocks(blocks)
        self.step_size = as_step_size(step_size)
        if part_order not in ("cyclic", "random"):
            raise ValueError(f"part_order must be 'cyclic' or 'random', got {part_order!r}")
        self.part_order = part_order
        self.permute = check_flag(permute, "permute")
        self.n_threads = check_threads(n_threads)

    def grid_blocks(self, shape):
        return self.blocks

    def iterations_per_epoch(self, n_observed):
        return self.blocks

    def batch_size(self, n_observed):
        return 0

    def params(self):
        return {"optimizer": "dsgd", "blocks": self.blocks, "step_size": self.step_size.params(),
                "part_order": self.part_order, "permute": self.permute}
