"""Control for the MPI weak-scaling benchmark (run under mpiexec by bench/psgld_mpi.py).

Every rank runs the PSGLD block update of the 1-rank weak-scaling problem (MovieLens-100K,
one block) with the same kernels as pymf.mpi, and the ranks wait for each other after each
iteration with a zero-byte barrier: the compute and the lock-step of the MPI ring, with no
data moved. Its time per iteration against one rank alone is what this machine allows a
ring of this size, whatever its communication costs. Prints one line of JSON.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter  # noqa: E402

import pymf  # noqa: E402
from pymf.nmf import _blocks, _sgld  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--data", required=True, help="MovieLens-100K's ratings file")
    parser.add_argument("--rank", type=int, default=50, help="K")
    parser.add_argument("--iterations", type=int, default=400, help="timed iterations")
    parser.add_argument("--step-size", type=float, default=2e-5, help="PSGLD's constant step")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    ratings = pymf.datasets.load_movielens(args.data)
    data = _blocks.BlockedData.from_sparse(ratings.rows, ratings.cols, ratings.values,
                                           ratings.shape, 1, False, 0)
    K = args.rank
    model = pymf.TweedieNMF(K)  # the benchmark's model: beta = phi = 1, exponential priors
    chain = _sgld.LangevinChain(data, "psgld", K, model.beta, model.phi, model.prior, model.lam_w,
                                model.lam_h, 1, 2, part_order="cyclic", n_threads=1,
                                only_row_block=0)
    W, H = model.init_factors(ratings.shape, None, np.random.default_rng(0),
                              data_mean=float(np.mean(ratings.values)))
    chain.set_state(np.ascontiguousarray(W), np.ascontiguousarray(H.T), 0)
    step = np.array([args.step_size])
    comm.Barrier()
    compute = 0.0
    started = time.perf_counter()
    for _ in range(args.iterations):
        before = time.perf_counter()
        chain.run(step)
        compute += time.perf_counter() - before
        comm.Barrier()
    elapsed = time.perf_counter() - started
    computes = comm.gather(compute, root=0)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "seconds_per_iteration": elapsed / args.iterations,
                          "compute_seconds_per_iteration": max(computes) / args.iterations}))


if __name__ == "__main__":
    main()
