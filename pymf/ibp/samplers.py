"""The samplers of the IBP family: settings only; pymf.sample runs them."""
from pymf.engine.checks import check_count, check_threads


class CollapsedIBP:
    """Collapsed Gibbs (Griffiths & Ghahramani 2005): A integrated out, rank-one updates of
    (Z'Z + sigma_x^2/sigma_a^2 I)^-1 and its log-determinant, singletons and new features by
    Metropolis-Hastings (Meeds et al. 2007). One unit = one sweep over the rows followed by
    the draws of A, sigma_x, sigma_a, alpha and the held-out cells. Sequential: one thread."""

    kind = "collapsed"

    def params(self):
        return {"sampler": self.kind}

    def __repr__(self):
        return "CollapsedIBP()"


class HybridIBP:
    """The hybrid parallel sampler (Zhang, Dubey & Williamson, Algorithm 1).

    processes       P: the rows are split into P contiguous pieces; P defines the chain
                    (threads or MPI ranks only run the processes).
    sub_iterations  L uncollapsed sub-iterations per master step (the paper's 5).
    warm_start      during the first warm_start iterations every process (not only p')
                    proposes new features (the authors' code uses iterations / 8); 0: off.
    n_threads       OpenMP threads (None: all cores); the chain does not depend on it.
    One unit = one outer iteration (L sub-iterations and one master step).
    """

    kind = "hybrid"

    def __init__(self, processes=1, sub_iterations=5, warm_start=0, n_threads=None):
        self.processes = check_count(processes, "processes", 1)
        self.sub_iterations = check_count(sub_iterations, "sub_iterations", 1)
        self.warm_start = check_count(warm_start, "warm_start", 0)
        self.n_threads = check_threads(n_threads)

    def params(self):
        return {"sampler": self.kind, "processes": self.processes,
                "sub_iterations": self.sub_iterations, "warm_start": self.warm_start}

    def __repr__(self):
        return (f"HybridIBP(processes={self.processes}, sub_iterations={self.sub_iterations}, "
                f"warm_start={self.warm_start})")
