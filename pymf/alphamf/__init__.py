"""Alpha-stable matrix factorisation (Simsekli, Liutkus & Cemgil 2015) by Metropolis and
SG-MCMC within Gibbs, as in the HAMCMC paper's section 4.2 (Simsekli, Badeau, Cemgil &
Richard, ICML 2016): the model in pymf.alphamf.models, the sampler in
pymf.alphamf.sampling, the C core in core/src/alphamf.c, whose (W, H) step is the
HAMCMC-MF chain of core/src/hamcmc_mf.c with this model's gradient.

    X, W, H, Phi = pymf.alphamf.make_alpha_stable(64, 64, 3, alpha=1.2, seed=0)
    res = pymf.sample(pymf.AlphaStableNMF(3, alpha=1.2), X,
                      pymf.HAMCMC(memory=5, step_size=1e-4, blocks=4), n_samples=500)
"""
from pymf.alphamf.models import AlphaStableNMF, make_alpha_stable
from pymf.alphamf.result import AlphaResult
from pymf.alphamf.sampling import sample_alpha
from pymf.engine.registry import register, register_result
from pymf.hamcmc.samplers import HAMCMC
from pymf.nmf.samplers import PSGLD

register("sample", AlphaStableNMF, (HAMCMC, PSGLD), sample_alpha)
register_result(AlphaResult)

__all__ = ["AlphaStableNMF", "AlphaResult", "make_alpha_stable", "sample_alpha"]
