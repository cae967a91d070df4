"""HAMCMC: stochastic quasi-Newton Langevin Monte Carlo (Simsekli, Badeau, Cemgil & Richard,
ICML 2016), with the samplers the paper compares it with, on its linear-Gaussian model
(section 4.1), whose posterior is known exactly.

    A, x, theta_true = pymf.datasets.make_linear_gaussian(1000, 10, noise_var=10.0, seed=0)
    model = pymf.LinearGaussian(noise_var=10.0)
    sampler = pymf.HAMCMC(memory=2, step_size=pymf.PolynomialDecay(1e-2, 0.51),
                          batch_size=0.01)
    res = pymf.sample(model, (A, x), sampler, n_samples=10_000, burnin=10_000, seed=0)
    res.mean, res.cov, res.trace["mean_error"]     # against model.posterior((A, x))

Model: theta ~ N(0, prior_var I) in R^D, x_n | theta ~ N(a_n . theta, noise_var).
Samplers (each iteration draws a minibatch of batch_size entries with replacement; None
means the full data): pymf.SGLD, pymf.PreconditionedSGLD (Li et al. 2016, diagonal
RMSprop preconditioner; "pSGLD" in the literature, not pymf.PSGLD, the parallel SGLD of
matrix factorisation), pymf.SGRLD (the inverse expected Fisher information of the whole
problem as a constant metric: here the exact posterior covariance, O(D^2) per iteration
and O(N D^2 + D^3) to set up) and pymf.HAMCMC (an L-BFGS inverse Hessian from the last 2M
samples, O(M^2 D) per iteration). The maths, the conventions and what HAMCMC's first 2M
iterations do are in core/include/pymf/sgmcmc.h; the C core runs every iteration.

Seeding: numpy.random.SeedSequence(seed).spawn(2): the Philox key of the noise and the
minibatches, and the starting state (a draw from the prior unless init= is given). The
chain is a pure function of (seed, data, settings).

Checkpoints: checkpoint= and checkpoint_every= as for the other families; the checkpoint
holds everything the C chain carries (HAMCMC's window of M samples and its L-BFGS pairs,
PreconditionedSGLD's V), so a resumed run equals an uninterrupted one bit for bit.
res.save / pymf.load work as elsewhere. test= is not taken (the posterior is known exactly).

Matrix factorisation: pymf.HAMCMC also samples pymf.TweedieNMF models (pymf.hamcmc.mf), its
minibatches the parts of PSGLD's block grid, and over MPI (pymf.hamcmc.mpi: pymf.mpi.sample
on B ranks equals pymf.sample with blocks=B bit for bit).
"""
from pymf.engine.registry import register, register_result
from pymf.hamcmc.mf import sample_mf
from pymf.hamcmc.mpi import sample_mpi
from pymf.hamcmc.models import LinearGaussian
from pymf.hamcmc.result import LinearResult
from pymf.hamcmc.samplers import HAMCMC, SGRLD, PreconditionedSGLD
from pymf.hamcmc.sampling import sample_linear
from pymf.langevin import SGLD
from pymf.nmf.models import TweedieNMF

register("sample", LinearGaussian, (HAMCMC, PreconditionedSGLD, SGRLD, SGLD), sample_linear)
register("sample", TweedieNMF, HAMCMC, sample_mf)
register("mpi", TweedieNMF, HAMCMC, sample_mpi)
register_result(LinearResult, legacy_kinds=("linear",))
