"""pymf: scalable Bayesian matrix factorisation.

Posterior sampling for matrix factorisation with Langevin samplers (LD, SGLD and parallel
SGLD, on CPU threads, a GPU or MPI), Bayesian PMF by distributed SGLD, HAMCMC (stochastic
quasi-Newton Langevin) on its linear-Gaussian model and on alpha-stable MF (pymf.alphamf),
and logistic MF of big binary matrices by stochastic variational inference (SIBM), over a
C core with Cython bindings.

One engine (pymf.engine) runs every family (pymf.nmf, pymf.bpmf, pymf.hamcmc, pymf.sibm,
pymf.ibp, pymf.alphamf): the families register their (model, sampler) pairs and result kinds
when imported, which is when first used (pymf.sibm, pymf.SIBM, or a registry lookup that
needs them), and pymf.sample, pymf.fit and pymf.load look them up. See README.md and
docs/architecture.md.
"""
__version__ = "0.3.0.dev0"

import importlib as _importlib

from pymf import datasets  # noqa: F401
from pymf.data import Ratings
from pymf.engine import registry as _registry
from pymf.engine.api import fit, sample
from pymf.engine.result import Result, load
from pymf.engine.steps import AnnealedStep, AutoStep, ConstantStep, PolynomialDecay
from pymf.errors import DivergenceError, GPUUnavailableError
from pymf.langevin import DSGD, LD, SGD, SGLD

# The families are imported when first used (pymf.sibm, pymf.SIBM, a registry lookup): each
# one's extension module links the C core, and importing all of them cost a process 17 MB
# of resident memory and 0.2 s before any data. Their order here is the CLI's and the
# registry listings' (ibp first: pymf.datasets used to import it before the others).
_FAMILIES = ("ibp", "nmf", "bpmf", "hamcmc", "sibm", "alphamf")
_registry.declare_families("pymf." + family for family in _FAMILIES)
_LAZY = {
    "nmf": ("TweedieNMF", "PSGLD", "Gibbs", "SampleResult", "FitResult"),
    "bpmf": ("BPMF", "DSGLD", "BPMFGibbs", "BPMFResult", "BPMFFit"),
    "hamcmc": ("LinearGaussian", "LinearResult", "HAMCMC", "PreconditionedSGLD", "SGRLD"),
    "sibm": ("LogisticMF", "SIBM", "BatchVB", "SIBMResult"),
    "ibp": ("IBPLinearGaussian", "CollapsedIBP", "HybridIBP", "IBPResult"),
    "alphamf": ("AlphaStableNMF", "AlphaResult"),
}
_HOME = {name: family for family, names in _LAZY.items() for name in names}


def __getattr__(name):
    # a family (pymf.sibm) or one of its names (pymf.SIBM): imported now, then kept here
    if name in _LAZY:
        value = _importlib.import_module("pymf." + name)
    elif name in _HOME:
        value = getattr(_importlib.import_module("pymf." + _HOME[name]), name)
    else:
        raise AttributeError(f"module 'pymf' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_HOME))


__all__ = ["datasets", "Ratings", "DivergenceError", "GPUUnavailableError", "TweedieNMF",
           "SampleResult", "Result", "load", "LD", "SGLD", "PSGLD", "AutoStep", "ConstantStep",
           "PolynomialDecay", "sample", "SGD",
           "DSGD", "fit", "FitResult", "Gibbs", "BPMF", "DSGLD", "AnnealedStep", "BPMFGibbs",
           "BPMFResult", "BPMFFit", "LinearGaussian", "LinearResult", "HAMCMC",
           "PreconditionedSGLD", "SGRLD", "LogisticMF", "SIBM", "BatchVB", "SIBMResult",
           "__version__"]
__all__ += ["IBPLinearGaussian", "CollapsedIBP", "HybridIBP", "IBPResult"]
__all__ += ["AlphaStableNMF", "AlphaResult"]
