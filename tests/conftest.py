"""Fixtures shared by the test modules. The plain functions behind them are in
tests/support.py, which tests/golden_cases.py (also a script) imports too."""
import pytest

import support


@pytest.fixture(scope="session")
def mpiexec():
    """The path of mpiexec; the test is skipped, naming the extra, where there is none."""
    path = support.mpiexec_path()
    if path is None:
        pytest.skip("no mpiexec beside python or on PATH: pip install 'pymf[mpi]'")
    return path


@pytest.fixture(scope="session")
def mpi_env():
    """The environment an mpiexec of the tests runs in (see support.mpi_env)."""
    return support.mpi_env()


@pytest.fixture(scope="session")
def synthetic_ratings():
    """support.synthetic_ratings: BPMF-style synthetic ratings, as a function of their size."""
    return support.synthetic_ratings
