"""pymf: scalable Bayesian matrix factorisation (a C core with Cython bindings)."""
__version__ = "0.1.0"
