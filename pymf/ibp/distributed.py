"""One rank's share of the hybrid IBP chain, as the engine's kernel (pymf.ibp.mpi runs it;
the module docstring there says what travels between the ranks)."""
import numpy as np

from pymf.errors import DivergenceError
from pymf.ibp.chain import make_chain
from pymf.ibp.kernel import IBPKernel


def _row_start(N, P, p):
    return N * p // P


class RankKernel(IBPKernel):
    """The engine's kernel on one rank: its process's rows; collective calls at every
    step of the run loop (each rank runs the same loop)."""

    def __init__(self, comm, model, X, train, settings, chain_seed, X_eval, test_mask):
        self.comm = comm
        P, rank = comm.Get_size(), comm.Get_rank()
        if settings["collapsed"] or settings["processes"] != P:
            raise ValueError(f"pymf.mpi.sample runs HybridIBP with processes equal to the "
                             f"number of ranks ({P}), got processes={settings['processes']}")
        N = X.shape[0]
        self.bounds = [_row_start(N, P, p) for p in range(P + 1)]
        self.row0, self.row1 = self.bounds[rank], self.bounds[rank + 1]
        settings = dict(settings, threads=1)
        chain = make_chain(model, X, train, settings, chain_seed, first_process=rank, n_local=1,
                           rows=(self.row0, self.row1 - self.row0))
        super().__init__(chain, X_eval, test_mask, settings["split_merge"])
        self.X_train = X  # the held-out cells zeroed: every row's Y once they are filled in
        self.missing = ~train
        missing = ~train
        self.missing_counts = [int(missing[self.bounds[p]:self.bounds[p + 1]].sum())
                               for p in range(P)]

    def _allgather_rows(self, local, width):
        """The rows of every rank (rows x width), in rank order."""
        from mpi4py import MPI
        counts = [(self.bounds[p + 1] - self.bounds[p]) * width for p in range(len(self.bounds) - 1)]
        out = np.empty((self.bounds[-1], width))
        self.comm.Allgatherv(np.ascontiguousarray(local, dtype=np.float64),
                             [out, counts, np.cumsum([0] + counts[:-1]), MPI.DOUBLE])
        return out

    def _check_everywhere(self, step):
        """Runs step(); if it raised on any rank, every rank raises."""
        failure = None
        try:
            step()
        except (DivergenceError, RuntimeError, ValueError, MemoryError) as exc:
            failure = exc
        failed = self.comm.allgather(None if failure is None else
                                     (type(failure).__name__, str(failure),
                                      getattr(failure, "iteration", None)))
        for entry in failed:
            if entry is not None:
                # every rank abandons the iteration: the state is the last completed one's
                self.chain.abort()
                if failure is not None:
                    raise failure
                name, message, iteration = entry
                if name == "DivergenceError":
                    raise DivergenceError(message, iteration=iteration)
                raise RuntimeError(f"another rank failed: {name}: {message}")

    def run(self, steps):
        comm, chain = self.comm, self.chain
        P = comm.Get_size()
        for _ in range(len(steps)):
            chain.begin()
            self._check_everywhere(chain.local_sweeps)
            local = chain.local_counts()
            counts = np.empty((P, local.shape[1]))
            comm.Allgather(local, counts)
            self._check_everywhere(lambda: chain.tail_sweeps(counts))
            new_local = chain.new_features().astype(np.intc)
            new_all = np.empty(P, dtype=np.intc)
            comm.Allgather(new_local, new_all)
            K_total = chain.n_features + int(new_all.sum())
            stats = chain.local_stats(new_all, K_total)
            gathered = np.empty((P, stats.shape[1]))
            comm.Allgather(stats, gathered)
            summed = np.zeros(stats.shape[1])
            for p in range(P):  # in rank order, as the threads sampler sums its processes
                summed += gathered[p]
            self._check_everywhere(lambda: chain.master(summed))
            if self.split_merge:
                self._split_merge()

    def _split_merge(self):
        """The master's split-merge moves: every rank gathers every row's Z and Y (the
        held-out cells as imputed) and makes the same moves from the same stream, keeping
        its own rows of the result (so, like the master step, nothing is broadcast)."""
        K = self.chain.n_features
        st = self.chain.state()
        Z = self._allgather_rows(st["Z"], K) if K else np.zeros((self.bounds[-1], 0))
        Y = self.X_train.copy()
        Y[self.missing] = self._allgather_missing(st["Y_missing"])
        self._check_everywhere(lambda: self.chain.split_merge(Z, Y))
        self._state = None

    def state(self):
        if self._state is None or int(self._state["t"]) != self.counter:
            st = self.chain.state()
            K = st["Z"].shape[1]
            st["Z"] = self._allgather_rows(st["Z"], K) if K else np.zeros((self.bounds[-1], 0))
            self._state = st
        return self._state

    def y_missing(self):
        return self._allgather_missing(self.chain.state()["Y_missing"])

    def _allgather_missing(self, local):
        """Every rank's held-out cells' values, in rank (row-major) order."""
        from mpi4py import MPI
        out = np.empty(sum(self.missing_counts))
        self.comm.Allgatherv(local, [out, self.missing_counts,
                                     np.cumsum([0] + self.missing_counts[:-1]), MPI.DOUBLE])
        return out

    def set_state(self, Z, A, pi, hyper, Y_missing, t):
        rank = self.comm.Get_rank()
        first = sum(self.missing_counts[:rank])
        local = None if Y_missing is None else Y_missing[first:first + self.missing_counts[rank]]
        self.chain.set_state(Z, A, pi, hyper, local, t)
        self._state = None

    def agree(self, requested, n):
        from mpi4py import MPI
        return (bool(self.comm.allreduce(bool(requested), op=MPI.LOR)),
                int(self.comm.allreduce(int(n), op=MPI.MIN)))

    def agree_stop(self, stop):
        return bool(self.comm.bcast(bool(stop), root=0))
