"""The hybrid IBP sampler under a real mpiexec (one process per rank): the same chain, bit
for bit, as the threads sampler with the same number of processes. Skipped (with the
reason) where mpi4py or an MPI library is missing."""
import json
import subprocess
import sys

import numpy as np
import pytest

import pymf
from pymf import mpi

MPI_STATE = True if mpi.is_available() else mpi.why_unavailable()
pytestmark = pytest.mark.skipif(MPI_STATE is not True, reason=f"MPI is not usable: {MPI_STATE}")
from support import mpi_env, mpiexec_path  # noqa: E402

ARGS = ["--data", "cambridge", "--n", "60", "--samples", "12", "--burnin", "4", "--thin", "3",
        "--seed", "3", "--warm-start", "2"]


@pytest.mark.parametrize("n_ranks, split_merge", [(2, 0), (3, 0), (2, 4)])
def test_mpi_equals_threads_bit_for_bit(tmp_path, n_ranks, split_merge):
    """split_merge: the master's moves on every rank from every row's gathered Z and Y."""
    out = tmp_path / "mpi.npz"
    command = [mpiexec_path(), "-n", str(n_ranks), sys.executable, "-m", "pymf.mpi", "ibp",
               *ARGS, "--split-merge", str(split_merge), "--out", str(out)]
    proc = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ranks"] == n_ranks
    distributed = pymf.load(out)
    X, _, _ = pymf.datasets.make_cambridge(n=60, sigma_x=0.5, seed=3)
    mask = pymf.ibp.checkerboard_mask(*X.shape, 0.1)
    threads = pymf.sample(pymf.IBPLinearGaussian(), X,
                          pymf.HybridIBP(processes=n_ranks, warm_start=2,
                                         split_merge=split_merge), n_samples=12,
                          burnin=4, thin=3, seed=3, test_mask=mask, progress=False)
    for key in threads.trace:
        if key != "time":
            np.testing.assert_array_equal(distributed.trace[key], threads.trace[key], err_msg=key)
    assert len(distributed.Z_samples) == len(threads.Z_samples) == 4
    for a, b in zip(distributed.Z_samples, threads.Z_samples):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(distributed.A_samples, threads.A_samples):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(distributed.test_density, threads.test_density)
    if split_merge:
        assert threads.trace["split_merge_proposed"][-1] > 0


def test_mpi_resumes_a_threads_checkpoint_bit_for_bit(tmp_path):
    """A threads run stopped at iteration 8 and resumed on 2 ranks from its checkpoint ends
    where the uninterrupted threads run ends (the checkpoints are interchangeable)."""
    X, _, _ = pymf.datasets.make_cambridge(n=60, sigma_x=0.5, seed=3)
    mask = pymf.ibp.checkerboard_mask(*X.shape, 0.1)
    model, sampler = pymf.IBPLinearGaussian(), pymf.HybridIBP(processes=2, warm_start=2)
    settings = dict(n_samples=12, burnin=4, thin=3, seed=3, test_mask=mask, progress=False)
    whole = pymf.sample(model, X, sampler, **settings)
    checkpoint = tmp_path / "ck.npz"
    stopped = pymf.sample(model, X, sampler, checkpoint=checkpoint,
                          callback=lambda info: info["iteration"] >= 8, **settings)
    assert stopped.iterations == 8
    out = tmp_path / "mpi.npz"
    command = [mpiexec_path(), "-n", "2", sys.executable, "-m", "pymf.mpi", "ibp", *ARGS,
               "--checkpoint", str(checkpoint), "--out", str(out)]
    proc = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = pymf.load(out)
    assert resumed.iterations == whole.iterations == 16
    for key in whole.trace:
        if key != "time":
            np.testing.assert_array_equal(resumed.trace[key], whole.trace[key], err_msg=key)
    for a, b in zip(resumed.Z_samples, whole.Z_samples):
        np.testing.assert_array_equal(a, b)


def test_a_data_file_missing_on_one_rank_ends_the_job(tmp_path):
    """The IBP launcher had no error handler: a file missing on one node gave that rank's
    traceback and left the other waiting for ever."""
    X, _, _ = pymf.datasets.make_cambridge(n=20, seed=0)
    np.save(tmp_path / "X.npy", X)
    tail = ["--samples", "5", "--out", "r.npz"]
    command = [mpiexec_path(), "-n", "1", sys.executable, "-m", "pymf.mpi", "ibp", "--data",
               "X.npy", *tail, ":", "-n", "1", sys.executable, "-m", "pymf.mpi", "ibp",
               "--data", "gone.npy", *tail]
    proc = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert ("pymf.mpi: error: rank 1: FileNotFoundError: --data 'gone.npy': no such file"
            in proc.stderr), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


SEEDLESS_SCRIPT = """
import json, sys
import numpy as np
import pymf, pymf.mpi
from mpi4py import MPI
X, _, _ = pymf.datasets.make_cambridge(n=30, sigma_x=0.5, seed=1)
res = pymf.mpi.sample(pymf.IBPLinearGaussian(), X, pymf.HybridIBP(processes=2), n_samples=4,
                      progress=False)
trace = [float(s) for s in res.trace["sigma_x"]] + [float(k) for k in res.trace["K"]]
gathered = MPI.COMM_WORLD.gather((res.seed, trace), root=0)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(gathered))
"""


def test_mpi_sample_without_a_seed_draws_one_every_rank_shares(tmp_path):
    """pymf.mpi.sample(..., HybridIBP) with seed=None was refused ('needs an explicit seed'),
    unlike pymf.sample and the other families' MPI runners: rank 0 now draws the entropy and
    every rank runs with it; the recorded seed repeats the run with threads."""
    (tmp_path / "run.py").write_text(SEEDLESS_SCRIPT)
    command = [mpiexec_path(), "-n", "2", sys.executable, "run.py"]
    proc = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (seed0, trace0), (seed1, trace1) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seed0 == seed1 and trace0 == trace1
    X, _, _ = pymf.datasets.make_cambridge(n=30, sigma_x=0.5, seed=1)
    again = pymf.sample(pymf.IBPLinearGaussian(), X, pymf.HybridIBP(processes=2), n_samples=4,
                        seed=seed0, progress=False)
    assert [float(s) for s in again.trace["sigma_x"]] + [float(k) for k in again.trace["K"]] \
        == trace0
