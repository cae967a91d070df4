"""The settings that tune themselves, under a real mpiexec: a sampled phi (TweedieNMF(beta=2,
phi="sample")) on the PSGLD ring, and step_size="auto" on the PSGLD ring, the HAMCMC ring
and DSGLD's parameter server, each equal bit for bit to shared memory with as many blocks
as ranks. Skipped (with the reason) where mpi4py or an MPI library is missing."""
import subprocess
import sys

import numpy as np
import pytest

import pymf
from pymf import mpi
from support import mpi_env, mpiexec_path

MPI_STATE = True if mpi.is_available() else mpi.why_unavailable()
pytestmark = pytest.mark.skipif(MPI_STATE is not True, reason=f"MPI is not usable: {MPI_STATE}")


def run_script(tmp_path, text, n_ranks, *args):
    script = tmp_path / "run.py"
    script.write_text(text)
    command = [mpiexec_path(), "-n", str(n_ranks), sys.executable, str(script), *map(str, args)]
    done = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    return done


def assert_same_chain(distributed, shared):
    for name in ("W_samples", "H_samples", "W_mean", "H_mean", "sample_iterations"):
        assert np.array_equal(np.asarray(getattr(distributed, name)),
                              np.asarray(getattr(shared, name))), name
    for key in shared.trace:
        if key != "time":
            assert np.array_equal(distributed.trace[key], shared.trace[key]), key
    assert sorted(distributed.sample_stats) == sorted(shared.sample_stats)
    for key in shared.sample_stats:
        assert np.array_equal(distributed.sample_stats[key], shared.sample_stats[key]), key


def gaussian_data(I=23, J=19, K=3, seed=4):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 1, (I, K)) @ rng.normal(0, 1, (K, J)) + rng.normal(0, 0.3, (I, J))


PSGLD_SCRIPT = """
import sys, numpy as np, pymf, pymf.mpi
from mpi4py import MPI
V = np.load(sys.argv[1])
model = pymf.TweedieNMF(3, beta=2.0, phi=sys.argv[3] if sys.argv[3] == "sample" else float(sys.argv[3]),
                        prior="gaussian")
steps = {"auto": "auto", "bounded": pymf.AutoStep(minibatch_noise=0.1)}
step = steps[sys.argv[4]] if sys.argv[4] in steps else float(sys.argv[4])
stop_at = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] != "none" else None
burnin = int(sys.argv[6]) if len(sys.argv) > 6 else 0
sampler = pymf.PSGLD(blocks=MPI.COMM_WORLD.size, step_size=step)
pymf.mpi.sample(model, V, sampler, 40, burnin=burnin, thin=2, seed=3, out_dir=sys.argv[2],
                checkpoint_every=4,
                callback=None if stop_at is None else lambda info: info["iteration"] >= stop_at)
"""


@pytest.mark.parametrize("n_ranks", [3])  # 2 ranks: the auto-step test below samples phi too
def test_psgld_ring_with_sampled_phi_equals_shared_memory(tmp_path, n_ranks):
    V = gaussian_data()
    np.save(tmp_path / "V.npy", V)
    run_script(tmp_path, PSGLD_SCRIPT, n_ranks, tmp_path / "V.npy", tmp_path / "out", "sample", 1e-3)
    distributed = pymf.load(str(tmp_path / "out"))
    model = pymf.TweedieNMF(3, beta=2.0, phi="sample", prior="gaussian")
    shared = pymf.sample(model, V, pymf.PSGLD(blocks=n_ranks, step_size=1e-3), n_samples=40,
                         thin=2, seed=3)
    assert len(np.unique(shared.sample_stats["phi"])) > 5
    assert_same_chain(distributed, shared)


def test_psgld_ring_with_sampled_phi_resumes_the_same_chain(tmp_path):
    """Stopped by its callback at iteration 13 (mid-way between two phi draws of the B = 3
    ring) and run again: the checkpoint carries phi, and the chain is the uninterrupted
    shared-memory one."""
    V = gaussian_data()
    np.save(tmp_path / "V.npy", V)
    run_script(tmp_path, PSGLD_SCRIPT, 3, tmp_path / "V.npy", tmp_path / "out", "sample", 1e-3, 13)
    assert pymf.load(str(tmp_path / "out")).iterations < 40
    run_script(tmp_path, PSGLD_SCRIPT, 3, tmp_path / "V.npy", tmp_path / "out", "sample", 1e-3)
    resumed = pymf.load(str(tmp_path / "out"))
    model = pymf.TweedieNMF(3, beta=2.0, phi="sample", prior="gaussian")
    shared = pymf.sample(model, V, pymf.PSGLD(blocks=3, step_size=1e-3), n_samples=40, thin=2,
                         seed=3)
    assert_same_chain(resumed, shared)


def test_psgld_ring_with_auto_step_equals_shared_memory(tmp_path):
    """step_size="auto" on the ring: rank 0 gathers the pieces and runs shared memory's rule
    and pilot on them; the step, its record and the chain are shared memory's (a sampled
    phi as well: the pilot draws it and puts it back)."""
    V = gaussian_data()
    np.save(tmp_path / "V.npy", V)
    run_script(tmp_path, PSGLD_SCRIPT, 2, tmp_path / "V.npy", tmp_path / "out", "sample", "auto")
    distributed = pymf.load(str(tmp_path / "out"))
    model = pymf.TweedieNMF(3, beta=2.0, phi="sample", prior="gaussian")
    shared = pymf.sample(model, V, pymf.PSGLD(blocks=2), n_samples=40, thin=2, seed=3)
    assert distributed.params["auto_step"] == shared.params["auto_step"]
    assert distributed.params["sampler"]["step_size"] == shared.params["sampler"]["step_size"]
    assert shared.params["sampler"]["step_size"]["kind"] == "constant"
    assert_same_chain(distributed, shared)


def test_psgld_ring_with_the_noise_bounded_auto_step_equals_shared_memory(tmp_path):
    """AutoStep(minibatch_noise=0.1) on the ring: rank 0's rule broadcasts the whole
    schedule (the stable step for the 10 burn-in iterations, the bounded one after)."""
    V = gaussian_data()
    np.save(tmp_path / "V.npy", V)
    run_script(tmp_path, PSGLD_SCRIPT, 2, tmp_path / "V.npy", tmp_path / "out", "sample",
               "bounded", "none", 10)
    distributed = pymf.load(str(tmp_path / "out"))
    model = pymf.TweedieNMF(3, beta=2.0, phi="sample", prior="gaussian")
    shared = pymf.sample(model, V, pymf.PSGLD(blocks=2, step_size=pymf.AutoStep(0.1)),
                         n_samples=40, burnin=10, thin=2, seed=3)
    assert distributed.params["auto_step"] == shared.params["auto_step"]
    assert distributed.params["sampler"]["step_size"] == shared.params["sampler"]["step_size"]
    assert shared.params["sampler"]["step_size"]["kind"] == "burnin_then"
    assert_same_chain(distributed, shared)


def test_psgld_ring_per_row_steps_equal_shared_memory_and_resume(tmp_path):
    """PSGLD's default "auto" on 3 ranks, phi sampled, 10 burn-in iterations: the per-row
    factors are measured collectively at the end of the burn-in (H^T's Fisher curvature
    passed along the ranks in piece order, as shared memory adds its row pieces) and equal
    shared memory's bit for bit, as does the chain; stopped inside the burn-in (iteration
    6) or after the factors were set (20) and run again, the ring resumes the same chain
    (the factors travel in the checkpoint)."""
    V = gaussian_data()
    np.save(tmp_path / "V.npy", V)
    model = pymf.TweedieNMF(3, beta=2.0, phi="sample", prior="gaussian")
    shared = pymf.sample(model, V, pymf.PSGLD(blocks=3), n_samples=40, burnin=10, thin=2,
                         seed=3)
    chosen = shared.params["auto_step"]
    assert chosen["row_steps_from"] == 11 and chosen["row_steps"]["min"] < 1
    plain = pymf.sample(model, V, pymf.PSGLD(blocks=3, step_size=pymf.AutoStep(per_row=False)),
                        n_samples=40, burnin=10, thin=2, seed=3)
    assert not np.array_equal(plain.W_samples, shared.W_samples)
    for stop_at in (6, 20):  # the resumed runs measure (6) or restore (20) the factors
        out = tmp_path / f"out{stop_at}"
        run_script(tmp_path, PSGLD_SCRIPT, 3, tmp_path / "V.npy", out, "sample", "auto",
                   stop_at, 10)
        assert pymf.load(str(out)).iterations < 50
        run_script(tmp_path, PSGLD_SCRIPT, 3, tmp_path / "V.npy", out, "sample", "auto",
                   "none", 10)
        distributed = pymf.load(str(out))
        assert distributed.params["auto_step"] == chosen
        assert_same_chain(distributed, shared)


HAMCMC_SCRIPT = """
import sys, numpy as np, pymf, pymf.mpi
from mpi4py import MPI
V = np.load(sys.argv[1])
model = pymf.TweedieNMF(3, beta=2.0, phi=1.0, prior="gaussian")
sampler = pymf.HAMCMC(memory=3, gamma=0.5, lam=1.0, blocks=MPI.COMM_WORLD.size)
pymf.mpi.sample(model, V, sampler, 30, thin=3, seed=5, out_dir=sys.argv[2])
"""


def test_hamcmc_ring_with_auto_step_equals_shared_memory(tmp_path):
    """HAMCMC's default step ("auto", the rule on gamma times the curvature) over MPI."""
    V = gaussian_data()
    np.save(tmp_path / "V.npy", V)
    run_script(tmp_path, HAMCMC_SCRIPT, 2, tmp_path / "V.npy", tmp_path / "out")
    distributed = pymf.load(str(tmp_path / "out"))
    model = pymf.TweedieNMF(3, beta=2.0, phi=1.0, prior="gaussian")
    shared = pymf.sample(model, V, pymf.HAMCMC(memory=3, gamma=0.5, lam=1.0, blocks=2),
                         n_samples=30, thin=3, seed=5)
    assert shared.params["auto_step"]["preconditioner_scale"] == 0.5
    assert distributed.params["auto_step"] == shared.params["auto_step"]
    assert_same_chain(distributed, shared)


@pytest.mark.parametrize("minibatch_noise, precise", [(None, False), (0.1, False), (None, True)])
def test_dsgld_server_with_auto_step_equals_shared_memory(tmp_path, minibatch_noise, precise):
    """DSGLD's default step ("auto") on the parameter server: the server runs the rule and
    pilot of shared memory's chains (the same start, init included) and, after the
    burn-in, measures the per-row step factors on its chains as shared memory does and
    sends them to the workers; with --minibatch-noise 0.1 the globally bounded step after
    the burn-in instead. precise: ratings with noise sd 0.1, where tau climbs past its
    start and the workers shrink each chain's steps by its tau reference as shared memory
    does."""
    from support import synthetic_ratings
    R = synthetic_ratings(L=40, M=30, D=3, noise_sd=0.1 if precise else 0.7)
    samples = 100 if precise else 20  # tau passes its start of 2 after about 50 rounds
    path = tmp_path / "ratings.npz"
    np.savez(path, rows=R.rows, cols=R.cols, values=R.values, shape=np.array(R.shape))
    command = [mpiexec_path(), "-n", "3", sys.executable, "-m", "pymf.mpi", "dsgld",
               "--data", str(path), "--rank", "3", "--batch-size", "30", "--round-length", "4",
               "--samples", str(samples), "--burnin", "10", "--thin", "5", "--seed", "9",
               "--test-fraction", "0.2", "--split-seed", "1", "--out", str(tmp_path / "mpi.npz")]
    if minibatch_noise is not None:
        command += ["--minibatch-noise", str(minibatch_noise)]
    done = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    distributed = pymf.load(tmp_path / "mpi.npz")
    train, test = R.split(0.2, seed=1)
    sampler = pymf.DSGLD(batch_size=30, round_length=4,
                         step_size=pymf.AutoStep(minibatch_noise=minibatch_noise))
    shared = pymf.sample(pymf.BPMF(3), train, sampler, n_samples=samples, burnin=10, thin=5,
                         seed=9, test=test)
    kind = "annealed" if minibatch_noise is None else "burnin_then"
    assert shared.params["sampler"]["step_size"]["kind"] == kind
    if minibatch_noise is None:  # the per-row bound from round 11 on
        assert shared.params["auto_step"]["row_steps_from"] == 11
        assert shared.params["auto_step"]["row_steps"]["min"] < 1
    else:
        assert "row_steps" not in shared.params["auto_step"]
    if precise:  # both chains' tau passed the reference (their start, 2): steps shrank
        assert shared.params["auto_step"]["tau_reference"] == [2.0, 2.0]
        tau = shared.sample_stats["tau"]  # (chains, draws)
        assert tau.shape == (2, 20) and np.all(tau.max(axis=1) > 2.0)
    assert distributed.params["auto_step"] == shared.params["auto_step"]
    assert distributed.params["sampler"]["step_size"] == shared.params["sampler"]["step_size"]
    for key in shared.samples:
        assert np.array_equal(distributed.samples[key], shared.samples[key]), key
    for key in ("iteration", "train_rmse", "test_rmse"):
        assert np.array_equal(distributed.trace[key], shared.trace[key], equal_nan=True), key
