"""The samplers of the IBP family: settings only; pymf.sample runs them."""
from pymf.engine.checks import C_INT_MAX, MAX_UNITS, check_count, check_threads


SPLIT_MERGE = 10  # the default number of split-merge proposals per iteration

SPLIT_MERGE_HELP = """split_merge     split-merge proposals per iteration (default 10; 0: none, the chain
                    of pymf before the moves, bit for bit): Metropolis-Hastings moves that
                    split one feature in two or merge two into one, collapsed over A (Jain &
                    Neal's split-merge as Meeds et al. 2007 adapt it to the IBP; the maths
                    in core/include/pymf/ibp.h); the counts are traced as
                    split_merge_accept and split_merge_proposed. The default, measured on
                    the 1000 x 36 Cambridge data (seeds 0-2, 1000 iterations): the features
                    owned by >= 1 % of the rows at the end, 0 proposals: collapsed 7.2, 6.0,
                    4.1, hybrid P = 2 5.0, 4.0, 5.0; 10: collapsed 4.0, 4.0, 5.0, hybrid 4.0,
                    4.0, 4.0 (5: collapsed 6.1, 5.0, 4.0; 20: 4.0, 4.0, 4.0), for about
                    1.0-1.8x (collapsed) and 0.9-1.2x (hybrid) the seconds per iteration
                    (noisy timings on a shared machine; docs/benchmarks.md)."""


class CollapsedIBP:
    """Collapsed Gibbs (Griffiths & Ghahramani 2005): A integrated out, rank-one updates of
    (Z'Z + sigma_x^2/sigma_a^2 I)^-1 and its log-determinant, singletons and new features by
    Metropolis-Hastings (Meeds et al. 2007). One unit = one sweep over the rows, then the
    split-merge proposals, then the draws of A, sigma_x, sigma_a, alpha and the held-out
    cells. Sequential: one thread.

    %s
    """

    kind = "collapsed"

    def __init__(self, split_merge=SPLIT_MERGE):
        self.split_merge = check_count(split_merge, "split_merge", 0, C_INT_MAX)

    def params(self):
        if self.split_merge:
            return {"sampler": self.kind, "split_merge": self.split_merge}
        return {"sampler": self.kind}

    def __repr__(self):
        return f"CollapsedIBP(split_merge={self.split_merge})"


class HybridIBP:
    """The hybrid parallel sampler (Zhang, Dubey & Williamson, Algorithm 1).

    processes       P: the rows are split into P contiguous pieces; P defines the chain
                    (threads or MPI ranks only run the processes).
    sub_iterations  L uncollapsed sub-iterations per master step (the paper's 5).
    warm_start      during the first warm_start iterations every process (not only p')
                    proposes new features (the authors' code uses iterations / 8); 0: off,
                    the default: on the Cambridge data (1000 iterations, seeds 0-2) the
                    authors' 125 reached the collapsed sampler's plateau no sooner
                    (docs/benchmarks.md).
    n_threads       OpenMP threads (None: all cores); the chain does not depend on it.
    %s
                    In the hybrid the master makes them after its step, on every row,
                    with A and pi integrated out, and draws A and pi again from their full
                    conditionals if one was accepted (a partially collapsed step).
    One unit = one outer iteration (L sub-iterations, one master step, the split-merge
    proposals).
    """

    kind = "hybrid"

    def __init__(self, processes=1, sub_iterations=5, warm_start=0, n_threads=None,
                 split_merge=SPLIT_MERGE):
        self.processes = check_count(processes, "processes", 1, C_INT_MAX)
        self.sub_iterations = check_count(sub_iterations, "sub_iterations", 1, C_INT_MAX)
        self.warm_start = check_count(warm_start, "warm_start", 0, MAX_UNITS)
        self.n_threads = check_threads(n_threads)
        self.split_merge = check_count(split_merge, "split_merge", 0, C_INT_MAX)

    def params(self):
        params = {"sampler": self.kind, "processes": self.processes,
                  "sub_iterations": self.sub_iterations, "warm_start": self.warm_start}
        if self.split_merge:
            params["split_merge"] = self.split_merge
        return params

    def __repr__(self):
        return (f"HybridIBP(processes={self.processes}, sub_iterations={self.sub_iterations}, "
                f"warm_start={self.warm_start}, split_merge={self.split_merge})")


CollapsedIBP.__doc__ %= SPLIT_MERGE_HELP
HybridIBP.__doc__ %= SPLIT_MERGE_HELP
