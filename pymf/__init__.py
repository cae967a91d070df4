"""pymf: scalable Bayesian matrix factorisation.

Posterior sampling for matrix factorisation with Langevin samplers (LD, SGLD and parallel
SGLD, on CPU threads, a GPU or MPI), Bayesian PMF by distributed SGLD, and HAMCMC
(stochastic quasi-Newton Langevin) on its linear-Gaussian model, over a C core with Cython
bindings. See README.md and DESIGN.md.
"""
__version__ = "0.1.0"

from pymf import datasets
from pymf.bpmf import BPMF, DSGLD, BPMFGibbs, BPMFResult
from pymf.data import Ratings
from pymf.errors import DivergenceError
from pymf.gibbs import Gibbs
from pymf.hamcmc import HAMCMC, SGRLD, LinearGaussian, LinearResult, PreconditionedSGLD
from pymf.models import TweedieNMF
from pymf.optim import DSGD, SGD, FitResult, fit
from pymf.result import SampleResult, load
from pymf.samplers import LD, PSGLD, SGLD, AnnealedStep, ConstantStep, PolynomialDecay
from pymf.sampling import sample

__all__ = ["datasets", "Ratings", "DivergenceError", "TweedieNMF", "SampleResult", "load", "LD",
           "SGLD", "PSGLD", "ConstantStep", "PolynomialDecay", "sample", "SGD", "DSGD", "fit",
           "FitResult", "Gibbs", "BPMF", "DSGLD", "AnnealedStep", "BPMFGibbs", "BPMFResult",
           "LinearGaussian", "LinearResult", "HAMCMC", "PreconditionedSGLD", "SGRLD",
           "__version__"]
