"""HAMCMC for matrix factorisation: pymf.sample(pymf.TweedieNMF(...), data, pymf.HAMCMC(...))
(Simsekli et al., ICML 2016, section 4.3; the maths in core/include/pymf/hamcmc_mf.h).

    model = pymf.TweedieNMF(10, beta=2, phi=1, prior="gaussian")   # the paper's section 4.3
    sampler = pymf.HAMCMC(memory=2, step_size=1e-4, blocks=4, gamma=1.0, lam=1.0)
    res = pymf.sample(model, ratings, sampler, n_samples=500, burnin=50, test=held_out)

The run is the NMF family's (pymf.nmf.sampling: data validation, the block grid, seeds,
init, the engine's loop, SampleResult) with the HAMCMC chain and a kernel whose checkpoint
holds the whole L-BFGS memory. Exponential priors (non-negative factors) are mirrored at
zero; Gaussian priors need beta = 2. The chain is the same for any thread count, and a
resumed run equals an uninterrupted one. The trace also records skipped_pairs (memory pairs
left out because s^T y <= 0).
"""
import math

from pymf.hamcmc._hamcmc_mf import HamcmcChain
from pymf.nmf.kernel import FactorKernel, check_sampled_phi
from pymf.nmf.sampling import sample_nmf


def check_schedule(memory, blocks, part_order):
    """HAMCMC moves theta_{t-M}: with cyclic parts its M interleaved sub-chains each see
    only the parts t - 1 mod B of their iterations, all of them only when gcd(M, B) = 1."""
    if part_order == "cyclic" and math.gcd(memory, blocks) > 1:
        raise ValueError(
            f"HAMCMC(memory={memory}) with cyclic parts of {blocks} blocks: each of the M "
            "interleaved sub-chains (theta_t moves theta_{t-M}) would only ever see "
            f"{blocks // math.gcd(memory, blocks)} of the {blocks} parts and sample another "
            "posterior; use part_order='random' or a number of blocks coprime with memory")


class GridSettings:
    """A HAMCMC sampler seen as the NMF family's samplers are (grid, threads, params)."""

    kind = "hamcmc"
    backend = "cpu"

    def __init__(self, sampler):
        self.sampler = sampler
        self.step_size = sampler.step_size
        self.blocks = sampler.blocks
        self.part_order = sampler.part_order
        self.permute = sampler.permute
        self.n_threads = sampler.n_threads

    def __repr__(self):  # messages about "the sampler" name the user's HAMCMC
        return repr(self.sampler)

    def grid_blocks(self, shape):
        blocks = self.blocks if self.blocks is not None else max(1, min(16, shape[0], shape[1]))
        check_schedule(self.sampler.memory, blocks, self.part_order)
        return blocks

    def batch_size(self, n_observed):
        return 0  # the minibatches are the grid's parts

    @property
    def preconditioner_scale(self):
        """HAMCMC's H^0 = gamma I: step_size="auto" bounds eps gamma lambda_max
        (pymf.nmf.kernel.resolve_auto_step), the condition of its first 2M iterations."""
        return self.sampler.gamma

    def params(self):
        out = {key: value for key, value in self.sampler.params().items() if key != "batch_size"}
        out.update(self.sampler.grid_params())
        out["step_size"] = self.step_size.params()  # an "auto" step as resolved for the run
        return out


def make_chain(settings, data, model, noise_seed, schedule_seed, batch_size, only_row_block=-1):
    """The C chain (pymf.nmf.kernel.make_chain's signature)."""
    check_sampled_phi(model, settings)  # phi='sample' is the Langevin samplers' only
    sampler = settings.sampler
    return HamcmcChain(data, model.rank, model.beta, model.phi, model.prior, model.lam_w,
                       model.lam_h, noise_seed, schedule_seed, memory=sampler.memory,
                       gamma=sampler.gamma, scaled_gamma=sampler.scaled_gamma, lam=sampler.lam,
                       part_order=settings.part_order,
                       n_threads=settings.n_threads, only_row_block=only_row_block)


class HamcmcKernel(FactorKernel):
    """FactorKernel over a HAMCMC chain: its checkpoint holds the window of M states and the
    L-BFGS pairs (not only the current state)."""

    def trace_point(self, run):
        return {**super().trace_point(run), "skipped_pairs": float(self.chain.skipped_pairs)}

    def snapshot(self):
        return self.chain.snapshot()

    def restore(self, arrays):
        self.chain.restore(arrays)


def sample_mf(model, data, sampler, n_samples, **options):
    """pymf.sample for HAMCMC on a TweedieNMF model; returns a pymf.SampleResult."""
    return sample_nmf(model, data, GridSettings(sampler), n_samples, chain_factory=make_chain,
                      kernel_class=HamcmcKernel, **options)
