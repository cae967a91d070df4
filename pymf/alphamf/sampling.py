"""pymf.sample(pymf.AlphaStableNMF(...), X, pymf.HAMCMC(...) | pymf.PSGLD(...)): Metropolis and
SG-MCMC within Gibbs (the HAMCMC paper's section 4.2; the maths in
core/include/pymf/alphamf.h).

    X, W, H, Phi = pymf.alphamf.make_alpha_stable(64, 64, 3, alpha=1.2, seed=0)
    res = pymf.sample(pymf.AlphaStableNMF(3, alpha=1.2), X,
                      pymf.HAMCMC(memory=5, step_size=1e-4, blocks=4), n_samples=500)
    res.predict(rows, cols)        # posterior mean of v = W H (the SaS scale^alpha)

The run is the NMF family's set-up (pymf.nmf.sampling: validation, block grid, seeds, init,
the engine's loop, checkpoints) with this family's C chain, whose checkpoint holds the
(W, H) chain's whole memory, Phi (HAMCMC: one copy per subchain) and the count of accepted
Phi proposals. The (W, H) steps are tamed unless AlphaStableNMF(tamed=False). The chain is the
same for any thread count and a resumed run equals an uninterrupted one.

Samplers: HAMCMC (memory M, gamma, lam, scaled_gamma, blocks, part_order, permute,
n_threads as for TweedieNMF) and PSGLD (SGLD on the grid's parts; "PSGLD" in the HAMCMC
paper's section 4.2 is Li et al.'s preconditioned SGLD, which this family does not run).
step_size must be given: the "auto" rule of the NMF family is built on the Tweedie
likelihood's curvature.
"""
from pymf.alphamf._alphamf import AlphaChain
from pymf.alphamf.result import AlphaResult
from pymf.engine import autostep
from pymf.hamcmc.mf import GridSettings, HamcmcKernel
from pymf.nmf.sampling import sample_nmf


class _PsgldSettings(GridSettings):
    """A PSGLD sampler seen as GridSettings sees HAMCMC: no memory, Langevin steps only."""

    kind = "psgld"
    preconditioner_scale = 1.0

    def __init__(self, sampler):
        if sampler.backend != "cpu":
            raise ValueError("AlphaStableNMF runs on the CPU (backend='cpu')")
        super().__init__(sampler)

    def grid_blocks(self, shape):
        return self.sampler.grid_blocks(shape)

    def params(self):
        out = self.sampler.params()
        out["n_threads"] = self.n_threads
        return out


def settings_of(sampler):
    """GridSettings (HAMCMC) or _PsgldSettings, after the checks this family adds."""
    if autostep.is_auto(sampler.step_size):
        raise ValueError(
            "AlphaStableNMF needs a step size (e.g. step_size=1e-4): the 'auto' rule is "
            "built on the Tweedie likelihood's curvature")
    return GridSettings(sampler) if sampler.kind == "hamcmc" else _PsgldSettings(sampler)


def make_chain(settings, data, model, noise_seed, schedule_seed, batch_size, only_row_block=-1):
    """The C chain (pymf.nmf.kernel.make_chain's signature)."""
    hamcmc = settings.kind == "hamcmc"
    options = {}
    if hamcmc:
        s = settings.sampler
        options = {"memory": s.memory, "gamma": s.gamma, "scaled_gamma": s.scaled_gamma,
                   "lam": s.lam}
    return AlphaChain(data, model.rank, model.alpha, model.a_w, model.b_w, model.a_h, model.b_h,
                      noise_seed, schedule_seed, langevin_only=not hamcmc, tamed=model.tamed,
                      part_order=settings.part_order, n_threads=settings.n_threads or 0,
                      **options)


class AlphaKernel(HamcmcKernel):
    """HamcmcKernel over the alpha-stable chain: loglik is log p(X | Phi, W, H) (the
    conditional Gaussian one given the current Phi), and the trace adds the share of Phi
    proposals accepted so far (phi_acceptance)."""

    def trace_point(self, run):
        accepted, proposed = self.chain.phi_counts
        return {**super().trace_point(run),
                "phi_acceptance": accepted / proposed if proposed else float("nan")}


def sample_alpha(model, data, sampler, n_samples, test=None, **options):
    """pymf.sample for an AlphaStableNMF model; returns a pymf.alphamf.AlphaResult."""
    if test is not None:
        raise ValueError("test= is not taken by AlphaStableNMF: X has mean 0, so an RMSE of "
                         "W H against held-out values measures nothing; compare predict() "
                         "(v = W H) with the truth instead")
    return sample_nmf(model, data, settings_of(sampler), n_samples, chain_factory=make_chain,
                      kernel_class=AlphaKernel, result_class=AlphaResult, **options)
