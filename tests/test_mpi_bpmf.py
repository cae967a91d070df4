"""DSGLD's parameter server under a real mpiexec: the same chains, bit for bit, as the
shared-memory sampler with the same seed and settings, for several worker counts and
splits; a diverging block stops every rank with an error naming the round. Skipped (with
the reason) where mpi4py or an MPI library is missing."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import pymf
from pymf import mpi

MPI_STATE = True if mpi.is_available() else mpi.why_unavailable()
pytestmark = pytest.mark.skipif(MPI_STATE is not True, reason=f"MPI is not usable: {MPI_STATE}")
from support import mpi_env, mpiexec_path


@pytest.fixture(scope="module")
def data_file(tmp_path_factory, synthetic_ratings):
    R = synthetic_ratings(L=40, M=30, D=3)
    path = tmp_path_factory.mktemp("bpmf") / "ratings.npz"
    np.savez(path, rows=R.rows, cols=R.cols, values=R.values, shape=np.array(R.shape))
    return R, str(path)


def run_server(n_ranks, args, cwd, timeout=240):
    command = [mpiexec_path(), "-n", str(n_ranks), sys.executable, "-m", "pymf.mpi", "dsgld", *args]
    return subprocess.run(command, cwd=cwd, env=mpi_env(), capture_output=True, text=True,
                          timeout=timeout)


SETTINGS = ["--rank", "3", "--batch-size", "30", "--round-length", "4", "--eps0", "2e-3",
            "--kappa", "50", "--hyper-every", "3", "--samples", "30", "--burnin", "10",
            "--thin", "5", "--seed", "9", "--test-fraction", "0.2", "--split-seed", "1"]


@pytest.mark.parametrize("n_ranks,split,blocks", [(3, "square", "2"), (2, "hybrid", "2,3"),
                                                  (4, "column", "3")])
def test_server_reproduces_shared_memory_bit_for_bit(data_file, tmp_path, n_ranks, split, blocks):
    R, path = data_file
    out = tmp_path / "mpi.npz"
    proc = run_server(n_ranks, ["--data", path, "--split", split, "--blocks", blocks, *SETTINGS,
                                "--out", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert np.isfinite(summary["test_rmse"])
    distributed = pymf.load(out)
    train, test = R.split(0.2, seed=1)
    grid = tuple(int(x) for x in blocks.split(",")) if split == "hybrid" else int(blocks)
    sampler = pymf.DSGLD(split=split, blocks=grid, batch_size=30, round_length=4,
                         step_size=pymf.AnnealedStep(2e-3, 50), hyper_every=3)
    model = pymf.BPMF(3)
    shared = pymf.sample(model, train, sampler, n_samples=30, burnin=10, thin=5, seed=9,
                         test=test)
    for key in shared.samples:
        assert np.array_equal(distributed.samples[key], shared.samples[key]), key
        assert np.array_equal(distributed.last_state[key], shared.last_state[key]), key
    assert np.array_equal(distributed.test_mean, shared.test_mean)
    for key in ("iteration", "train_rmse", "test_rmse"):
        assert np.array_equal(distributed.trace[key], shared.trace[key], equal_nan=True), key


def test_diverging_block_stops_every_rank(data_file, tmp_path):
    """In one line, keeping the draws of before (none here: round 1), as the PSGLD launcher
    does; it was a traceback, and nothing was saved."""
    _, path = data_file
    settings = list(SETTINGS)
    settings[settings.index("--eps0") + 1] = "50"
    proc = run_server(3, ["--data", path, *settings, "--out", str(tmp_path / "x.npz")],
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert re.search(r"pymf.bpmf.mpi: error: DivergenceError: round 1 of chain \d+: .* \(the "
                     r"draws kept before it are in .*x.npz\)", proc.stderr), proc.stderr[-2000:]
    assert pymf.load(str(tmp_path / "x.npz")).n_kept == 0


def test_one_rank_is_refused(data_file, tmp_path):
    _, path = data_file
    proc = run_server(1, ["--data", path, *SETTINGS, "--out", str(tmp_path / "x.npz")],
                      cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    assert "at least 2 MPI ranks" in proc.stderr


def test_a_shared_memory_checkpoint_resumes_under_mpi(data_file, tmp_path):
    """One checkpoint format for both: a shared-memory run stopped at round 20 resumes on
    the parameter server (its workers start at the checkpoint's round) and ends with the
    result of a shared-memory run that never stopped; the server's final checkpoint is then
    read back by the shared-memory sampler, which has nothing left to do."""
    R, path = data_file
    train, test = R.split(0.2, seed=1)
    sampler = pymf.DSGLD(split="square", blocks=2, batch_size=30, round_length=4,
                         step_size=pymf.AnnealedStep(2e-3, 50), hyper_every=3)
    model = pymf.BPMF(3)
    settings = dict(n_samples=30, burnin=10, thin=5, seed=9, test=test)
    full = pymf.sample(model, train, sampler, **settings)
    checkpoint = tmp_path / "bpmf.npz"
    partial = pymf.sample(model, train, sampler, checkpoint=checkpoint, checkpoint_every=7,
                          callback=lambda info: info["iteration"] >= 20, **settings)
    assert partial.trace["iteration"][-1] == 20
    out = tmp_path / "mpi.npz"
    proc = run_server(3, ["--data", path, "--split", "square", "--blocks", "2", *SETTINGS,
                          "--out", str(out), "--checkpoint", str(checkpoint),
                          "--checkpoint-every", "7"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = pymf.load(out)
    for key in full.samples:
        assert np.array_equal(resumed.samples[key], full.samples[key]), key
        assert np.array_equal(resumed.last_state[key], full.last_state[key]), key
    assert np.array_equal(resumed.test_mean, full.test_mean)
    assert np.array_equal(resumed.test_std, full.test_std)
    for key in ("iteration", "train_rmse", "test_rmse"):
        assert np.array_equal(resumed.trace[key], full.trace[key], equal_nan=True), key
    again = pymf.sample(model, train, sampler, checkpoint=checkpoint, **settings)
    assert np.array_equal(again.test_mean, full.test_mean)
    assert np.array_equal(again.trace["iteration"], full.trace["iteration"])


def test_a_bad_input_is_one_line_from_rank_0_and_status_2(data_file, tmp_path):
    """Every rank reads the data and checks the settings: a bad input fails on all of them
    alike, and rank 0 alone says why, in one line (no traceback per rank)."""
    _, path = data_file
    for args, message in ((["--data", str(tmp_path / "missing.npz")], "no such file"),
                          (["--data", path, "--checkpoint", str(tmp_path / "no" / "ck.npz")],
                           "does not exist")):
        proc = run_server(3, [*args, *SETTINGS, "--out", str(tmp_path / "x.npz")], cwd=tmp_path,
                          timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [line for line in proc.stderr.splitlines() if "pymf.bpmf.mpi: error" in line]
        assert len(lines) == 1 and message in lines[0], proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


def test_a_rank_that_fails_alone_or_reads_other_data_stops_every_rank(data_file, tmp_path):
    """A data file missing on one node only (MPMD stands in for it) left the server waiting
    for ever; a stale copy on one node ran other chains without a word. The ranks now
    compare what they found: one line, status 2, no hang."""
    _, path = data_file
    other = tmp_path / "other.npz"
    with np.load(path) as ratings:
        np.savez(other, **{**ratings, "values": ratings["values"] + 0.5})
    for worker_data, message in ((str(tmp_path / "gone.npz"), "rank 1: --data .*gone.npz.*: "
                                                               "no such file"),
                                 (str(other), "the ranks read different data")):
        tail = [*SETTINGS, "--split", "square", "--blocks", "2", "--out", str(tmp_path / "x.npz")]
        command = [mpiexec_path(), "-n", "1", sys.executable, "-m", "pymf.mpi", "dsgld",
                   "--data", path, *tail, ":", "-n", "1", sys.executable, "-m", "pymf.mpi",
                   "dsgld", "--data", worker_data, *tail]
        proc = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [line for line in proc.stderr.splitlines() if "pymf.bpmf.mpi: error" in line]
        assert len(lines) == 1 and re.search(message, lines[0]), proc.stderr[-2000:]


PID_WRAPPER = """
import os, sys
from mpi4py import MPI
with open(f"rank{MPI.COMM_WORLD.Get_rank()}.pid", "w") as fh:
    fh.write(str(os.getpid()))
import pymf  # noqa: F401  (the families register their launchers)
from pymf.mpi import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_at_one_worker_stops_the_run_and_it_resumes(data_file, tmp_path):
    """SIGINT to a worker alone killed that worker and left the server waiting for ever. The
    worker now tells the server, which stops as on its own Ctrl-C: the draws kept so far
    saved (interrupted), the checkpoint written, status 0; a rerun resumes to the chains of
    a run that never stopped."""
    import os
    import signal
    import time
    _, path = data_file
    (tmp_path / "wrapper.py").write_text(PID_WRAPPER)

    def command(out):
        return [mpiexec_path(), "-n", "3", sys.executable, "wrapper.py", "dsgld", "--data", path,
                "--rank", "3", "--batch-size", "30", "--round-length", "4", "--eps0", "2e-3",
                "--kappa", "50", "--samples", "3000", "--thin", "300", "--seed", "9",
                "--test-fraction", "0.2", "--split-seed", "1", "--split", "square",
                "--blocks", "2", "--out", str(out), "--checkpoint", f"{out}.ck.npz",
                "--checkpoint-every", "40"]

    out = tmp_path / "x.npz"
    checkpoint = tmp_path / "x.npz.ck.npz"
    job = subprocess.Popen(command(out), cwd=tmp_path, env=mpi_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not checkpoint.exists() and job.poll() is None:
        time.sleep(0.02)
    assert checkpoint.exists(), job.communicate()[1][-2000:]
    os.kill(int((tmp_path / "rank2.pid").read_text()), signal.SIGINT)
    stdout, stderr = job.communicate(timeout=120)
    assert job.returncode == 0, stderr[-2000:]
    assert "worker rank 2 got Ctrl-C" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert json.loads(stdout.strip().splitlines()[-1])["interrupted"] is True
    assert pymf.load(out).interrupted
    with np.load(checkpoint) as ck:
        assert 0 < int(ck["counters"][0]) < 3000  # the rounds run: resumed from there
    for out_path in (out, tmp_path / "whole.npz"):  # resumed, and a run that never stopped
        proc = subprocess.run(command(out_path), cwd=tmp_path, env=mpi_env(),
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
    resumed, whole = pymf.load(out), pymf.load(tmp_path / "whole.npz")
    assert not resumed.interrupted
    for key in whole.samples:
        assert np.array_equal(resumed.samples[key], whole.samples[key]), key
    assert np.array_equal(resumed.test_mean, whole.test_mean)
