"""pymf: scalable Bayesian matrix factorisation.

Posterior sampling for matrix factorisation with Langevin samplers (LD, SGLD and parallel
SGLD, on CPU threads, a GPU or MPI), Bayesian PMF by distributed SGLD, HAMCMC (stochastic
quasi-Newton Langevin) on its linear-Gaussian model and on alpha-stable MF (pymf.alphamf),
and logistic MF of big binary matrices by stochastic variational inference (SIBM), over a
C core with Cython bindings.

One engine (pymf.engine) runs every family (pymf.nmf, pymf.bpmf, pymf.hamcmc, pymf.sibm): the families
register their (model, sampler) pairs and result kinds when imported here, and pymf.sample,
pymf.fit and pymf.load look them up. See README.md and docs/architecture.md.
"""
__version__ = "0.2.0"

# each family registers itself (in this order: the CLI lists their commands so)
from pymf import datasets, nmf, bpmf, hamcmc, sibm  # noqa: F401, I001
from pymf.bpmf import BPMF, DSGLD, BPMFFit, BPMFGibbs, BPMFResult
from pymf.data import Ratings
from pymf.engine.api import fit, sample
from pymf.engine.result import Result, load
from pymf.engine.steps import AnnealedStep, AutoStep, ConstantStep, PolynomialDecay
from pymf.errors import DivergenceError
from pymf.hamcmc import HAMCMC, SGRLD, LinearGaussian, LinearResult, PreconditionedSGLD
from pymf.langevin import DSGD, LD, SGD, SGLD
from pymf.nmf import PSGLD, FitResult, Gibbs, SampleResult, TweedieNMF
from pymf.sibm import SIBM, BatchVB, LogisticMF, SIBMResult
from pymf import ibp  # noqa: E402, I001  (the IBP family registers itself)
from pymf.ibp import CollapsedIBP, HybridIBP, IBPLinearGaussian, IBPResult
from pymf import alphamf  # noqa: E402, I001  (the alpha-stable MF family registers itself)
from pymf.alphamf import AlphaResult, AlphaStableNMF

__all__ = ["datasets", "Ratings", "DivergenceError", "TweedieNMF", "SampleResult", "Result",
           "load", "LD", "SGLD", "PSGLD", "AutoStep", "ConstantStep", "PolynomialDecay", "sample",
           "SGD",
           "DSGD", "fit", "FitResult", "Gibbs", "BPMF", "DSGLD", "AnnealedStep", "BPMFGibbs",
           "BPMFResult", "BPMFFit", "LinearGaussian", "LinearResult", "HAMCMC",
           "PreconditionedSGLD", "SGRLD", "LogisticMF", "SIBM", "BatchVB", "SIBMResult",
           "__version__"]
__all__ += ["IBPLinearGaussian", "CollapsedIBP", "HybridIBP", "IBPResult"]
__all__ += ["AlphaStableNMF", "AlphaResult"]
