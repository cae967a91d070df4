"""Distributed PSGLD under a real mpiexec: the ring reproduces the shared-memory chain bit
for bit, resumes after a rank dies, after Ctrl-C and after a callback stopped it (from its
own checkpoint or from a shared-memory run's, and shared memory resumes the ring's), diverges
where shared memory does, and refuses bad set-ups on every rank without hanging. Skipped
(with the reason) where mpi4py or an MPI library is missing."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import pymf
from pymf import mpi
from pymf.nmf import mpi as nmf_mpi
from support import mpi_env, mpiexec_path

MOVIELENS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "ml-100k.data")
MPI_STATE = True if mpi.is_available() else mpi.why_unavailable()
pytestmark = pytest.mark.skipif(MPI_STATE is not True, reason=f"MPI is not usable: {MPI_STATE}")


def run_mpi(n_ranks, *args, cwd, timeout=240, wait=True):
    command = [mpiexec_path(), "-n", str(n_ranks), sys.executable, "-m", "pymf.mpi", *args]
    if not wait:
        return subprocess.Popen(command, cwd=cwd, env=mpi_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=cwd, env=mpi_env(), capture_output=True, text=True,
                          timeout=timeout)


def assert_same_chain(distributed, shared):
    for name in ("W_samples", "H_samples", "W_mean", "H_mean", "sample_iterations"):
        assert np.array_equal(np.asarray(getattr(distributed, name)), np.asarray(getattr(shared, name))), name
    for key in shared.trace:
        if key != "time":
            assert np.array_equal(distributed.trace[key], shared.trace[key]), key


@pytest.fixture(scope="module")
def dense_file(tmp_path_factory):
    V, _, _ = pymf.datasets.make_tweedie_nmf(41, 37, 4, beta=1.0, seed=8)
    path = tmp_path_factory.mktemp("data") / "V.npy"
    np.save(path, V)
    return V, str(path)


@pytest.mark.parametrize("n_ranks", [1, 2, 3, 4])  # one rank: nothing to pass, same chain
def test_ring_equals_shared_memory_dense(dense_file, tmp_path, n_ranks):
    V, path = dense_file
    out = tmp_path / "run"
    done = run_mpi(n_ranks, "psgld", "--data", path, "--rank", "4", "--samples", "60", "--thin", "3",
                   "--step-a", "1e-3", "--step-b", "0.51", "--seed", "5", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["ranks"] == n_ranks and summary["iterations"] == 60
    # one H block per rank per iteration: (J / B) K doubles on average (the bytes actually
    # sent); a single rank sends nothing
    expected = round(37 * 4 * 8 / n_ranks) if n_ranks > 1 else 0
    assert summary["bytes_sent_per_rank_per_iteration"] == expected
    shared = pymf.sample(pymf.TweedieNMF(4), V, pymf.PSGLD(blocks=n_ranks,
                         step_size=pymf.PolynomialDecay(1e-3, 0.51)), n_samples=60, thin=3, seed=5)
    assert_same_chain(pymf.load(str(out)), shared)


PYTHON_API_SCRIPT = """
import sys, numpy as np, pymf, pymf.mpi
from mpi4py import MPI
V = np.load(sys.argv[1])
model = pymf.TweedieNMF(4)
sampler = pymf.PSGLD(blocks=MPI.COMM_WORLD.size, step_size=pymf.PolynomialDecay(1e-3, 0.51))
res = pymf.mpi.sample(model, V, sampler, 60, thin=3, seed=None, out_dir=sys.argv[2])
if MPI.COMM_WORLD.rank == 0:
    print(repr(res.seed))
"""


def test_python_api_takes_a_sampler_and_a_fresh_seed_reproduces_in_shared_memory(
        dense_file, tmp_path):
    """pymf.mpi.sample(model, data, sampler, n_samples, ...): pymf.sample's signature; with
    seed=None every rank uses rank 0's fresh entropy, and result.seed reproduces the run."""
    V, path = dense_file
    script = tmp_path / "run.py"
    script.write_text(PYTHON_API_SCRIPT)
    command = [mpiexec_path(), "-n", "2", sys.executable, str(script), path, str(tmp_path / "out")]
    done = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    distributed = pymf.load(str(tmp_path / "out"))
    seed = int(done.stdout.strip().splitlines()[-1])
    assert distributed.seed == seed
    shared = pymf.sample(pymf.TweedieNMF(4), V, pymf.PSGLD(
        blocks=2, step_size=pymf.PolynomialDecay(1e-3, 0.51)), n_samples=60, thin=3, seed=seed)
    assert_same_chain(distributed, shared)
    with pytest.raises(TypeError, match="LD cannot sample over MPI a TweedieNMF model"):
        pymf.mpi.sample(pymf.TweedieNMF(4), V, pymf.LD(), 10)


def test_ring_equals_shared_memory_sparse_permuted(tmp_path):
    V, _, _ = pymf.datasets.make_tweedie_nmf(50, 44, 3, beta=1.0, seed=9)
    mask = np.random.default_rng(0).random(V.shape) < 0.4
    rows, cols = np.nonzero(mask)
    ratings = pymf.Ratings(rows, cols, V[mask], shape=V.shape)
    path = tmp_path / "ratings.data"  # u.data format, 1-based ids
    np.savetxt(path, np.column_stack([rows + 1, cols + 1, V[mask], np.zeros(rows.size)]), fmt="%d\t%d\t%g\t%d")
    loaded = pymf.datasets.load_movielens(path)
    assert loaded.shape == ratings.shape  # every row and column has an entry
    done = run_mpi(3, "psgld", "--data", str(path), "--rank", "3", "--permute", "--samples", "45",
                   "--thin", "5", "--step-size", "2e-4", "--seed", "2", "--out", str(tmp_path / "run"),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shared = pymf.sample(pymf.TweedieNMF(3), loaded, pymf.PSGLD(blocks=3, step_size=2e-4, permute=True),
                         n_samples=45, thin=5, seed=2)
    assert_same_chain(pymf.load(str(tmp_path / "run")), shared)


def wait_for(path, job, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline and not path.exists() and job.poll() is None:
        time.sleep(0.05)
    assert path.exists(), f"{path} was not written"


def test_shards_python_api_and_dead_rank_resume(dense_file, tmp_path):
    """Shard files; a rank killed with SIGKILL ends the job (no hang) and a rerun resumes from
    the last checkpoint to the very chain an uninterrupted run gives."""
    V, path = dense_file
    pattern = str(tmp_path / "shards" / "part{rank}.npz")
    nmf_mpi.write_shards(path, 2, pattern)
    out = tmp_path / "run"
    args = ["psgld", "--shards", pattern, "--rank", "4", "--samples", "40000", "--thin", "2000",
            "--step-size", "1e-4", "--checkpoint-every", "500", "--seed", "3", "--out", str(out)]
    job = run_mpi(2, *args, cwd=tmp_path, wait=False)
    wait_for(out / "checkpoint.npz", job)
    pid_file = out / "rank1.pid"
    assert pid_file.exists()
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    job.communicate(timeout=120)  # the job ends: no hang
    assert job.returncode != 0
    resumed = run_mpi(2, *args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    shared = pymf.sample(pymf.TweedieNMF(4), V, pymf.PSGLD(blocks=2, step_size=1e-4), n_samples=40000,
                         thin=2000, seed=3)
    assert_same_chain(pymf.load(str(out)), shared)


@pytest.mark.skipif(not os.path.exists(MOVIELENS), reason="MovieLens-100K (../shared/data/ml-100k.data) is absent")
def test_movielens_rmse_trace_matches_shared_memory(tmp_path):
    done = run_mpi(2, "psgld", "--data", MOVIELENS, "--rank", "5", "--samples", "40", "--thin", "10",
                   "--step-size", "5e-5", "--test-fraction", "0.2", "--seed", "1", "--out",
                   str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ratings = pymf.datasets.load_movielens(MOVIELENS)
    train, test = ratings.split(0.2, seed=1)
    shared = pymf.sample(pymf.TweedieNMF(5), train, pymf.PSGLD(blocks=2, step_size=5e-5), n_samples=40,
                         thin=10, seed=1, test=test)
    distributed = pymf.load(str(tmp_path / "run"))
    assert np.array_equal(distributed.trace["test_rmse"], shared.trace["test_rmse"])
    assert np.isfinite(shared.trace["test_rmse"]).all()


def test_bad_setups_fail_on_every_rank_without_hanging(dense_file, tmp_path):
    V, path = dense_file
    wrong_blocks = run_mpi(2, "psgld", "--data", path, "--rank", "2", "--blocks", "3", "--samples", "5", "--thin", "1",
                           "--out", str(tmp_path / "a"), cwd=tmp_path, timeout=120)
    assert wrong_blocks.returncode != 0 and "one rank per block" in wrong_blocks.stderr
    missing = run_mpi(2, "psgld", "--shards", str(tmp_path / "none{rank}.npz"), "--rank", "2",
                      "--samples", "5", "--thin", "1", "--out", str(tmp_path / "b"), cwd=tmp_path, timeout=120)
    assert missing.returncode != 0 and "rank 0: no shard file" in missing.stderr
    # ranks that see different data: shard 0 of one data set, shard 1 of another
    other = V.copy()
    other[0, 0] += 1
    nmf_mpi.write_shards(V, 2, str(tmp_path / "a{rank}.npz"))
    nmf_mpi.write_shards(other, 2, str(tmp_path / "b{rank}.npz"))
    os.replace(tmp_path / "b1.npz", tmp_path / "a1.npz")
    mixed = run_mpi(2, "psgld", "--shards", str(tmp_path / "a{rank}.npz"), "--rank", "2", "--samples", "5", "--thin", "1",
                    "--out", str(tmp_path / "c"), cwd=tmp_path, timeout=120)
    assert mixed.returncode != 0 and "ranks see different data" in mixed.stderr
    # permuted shards of another seed hold rows of other blocks: the ring ran a chain of its
    # own with status 0 (found by a review); refused now
    nmf_mpi.write_shards(V, 2, str(tmp_path / "p{rank}.npz"), permute=True, seed=0)
    seeded = run_mpi(2, "psgld", "--shards", str(tmp_path / "p{rank}.npz"), "--permute",
                     "--seed", "1", "--rank", "2", "--samples", "5", "--thin", "1", "--out",
                     str(tmp_path / "d"), cwd=tmp_path, timeout=120)
    assert seeded.returncode != 0
    assert "was written with --seed 0, whose permuted grid is not this run's" in seeded.stderr


def test_unfinished_damaged_and_foreign_checkpoints(dense_file, tmp_path):
    """Rank 0 killed while writing leaves a .tmp file: resuming ignores it. A damaged
    checkpoint, or one of another run, fails every rank with the same message instead of
    hanging the others (found by CI: the resume once read a half-written .tmp file and the
    other rank waited)."""
    _, path = dense_file
    out = tmp_path / "run"
    args = ["psgld", "--data", path, "--rank", "2", "--samples", "200", "--thin", "50",
            "--checkpoint-every", "50", "--out", str(out)]
    assert run_mpi(2, *args, cwd=tmp_path, timeout=120).returncode == 0
    (out / "checkpoint.tmp.npz").write_bytes(b"half a file")
    again = run_mpi(2, *args, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr
    other = run_mpi(2, *args[:-2], "--seed", "99", "--out", str(out), cwd=tmp_path, timeout=120)
    assert other.returncode != 0 and "written by a different run" in other.stderr
    (out / "checkpoint.npz").write_bytes(b"PK garbage")
    damaged = run_mpi(2, *args, cwd=tmp_path, timeout=120)
    assert damaged.returncode != 0
    assert "cannot be read" in damaged.stderr


def test_divergence_ends_every_rank_naming_the_iteration(dense_file, tmp_path):
    """A chain that diverges stops every rank at the iteration (no hang), the launcher names
    it and saves the draws kept before it, and the checkpoint left holds a finite state from
    before it. (A step of 0.3: its fitted values run away at iteration 2, past the NMF
    kernel's check; 1e3 now stops at iteration 1, before any checkpoint.)"""
    _, path = dense_file
    out = tmp_path / "run"
    done = run_mpi(2, "psgld", "--data", path, "--rank", "2", "--samples", "200", "--thin", "1",
                   "--step-size", "0.3", "--checkpoint-every", "1", "--out", str(out),
                   cwd=tmp_path, timeout=120)
    assert done.returncode != 0
    assert "DivergenceError" in done.stderr
    diverged_at = int(re.search(r"diverged at iteration (\d+)", done.stderr).group(1))
    assert diverged_at >= 2
    with np.load(out / "checkpoint.npz") as ck:  # this step size overflows after a few
        assert int(ck["kernel_t"]) == diverged_at - 1
        assert np.all(np.isfinite(ck["kernel_W_grid"])) and np.all(np.isfinite(ck["kernel_Ht_grid"]))
    partial = pymf.load(str(out))
    assert partial.interrupted and partial.n_kept == diverged_at - 1


RING_SCRIPT = """
import json, sys, numpy as np, pymf, pymf.mpi
from mpi4py import MPI
opts = json.loads(sys.argv[1])
rank = MPI.COMM_WORLD.rank
sampler = pymf.PSGLD(blocks=MPI.COMM_WORLD.size, step_size=opts["step_size"])
def callback(info):
    if info["iteration"] >= opts.get("interrupt_at", np.inf):
        raise KeyboardInterrupt  # a Ctrl-C, for the engine's loop
    return info["iteration"] >= opts.get("stop_at", np.inf)
try:
    res = pymf.mpi.sample(pymf.TweedieNMF(4), np.load(opts["data"]), sampler, opts["n_samples"],
                          thin=opts["thin"], trace_every=opts.get("trace_every"),
                          seed=opts["seed"], out_dir=opts["out"],
                          checkpoint_every=opts["checkpoint_every"], callback=callback)
    report = {"iterations": res.iterations, "n_kept": res.n_kept, "interrupted": res.interrupted}
except pymf.DivergenceError as exc:
    report = {"diverged": exc.iteration, "result": exc.result is not None}
    if rank == 0:
        np.savez(opts["out"] + "-state.npz", **exc.state)
        exc.result.save(opts["out"] + "-partial.npz")
print(json.dumps({"rank": rank, **report}))
"""

RUN = {"n_samples": 600, "thin": 20, "seed": 4, "step_size": 1e-3, "checkpoint_every": 50}


def run_ring(tmp_path, V_path, out, n_ranks=2, **options):
    script = tmp_path / "ring.py"
    script.write_text(RING_SCRIPT)
    opts = {**RUN, "data": V_path, "out": str(out), **options}
    command = [mpiexec_path(), "-n", str(n_ranks), sys.executable, str(script), json.dumps(opts)]
    done = subprocess.run(command, cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in reports) == list(range(n_ranks))
    return reports


def shared_run(V, blocks=2, **options):
    settings = {k: RUN[k] for k in ("thin", "seed", "checkpoint_every")}
    return pymf.sample(pymf.TweedieNMF(4), V, pymf.PSGLD(blocks=blocks, step_size=RUN["step_size"]),
                       n_samples=RUN["n_samples"], **{**settings, **options})


def stop_at(iteration):
    return lambda info: info["iteration"] >= iteration


@pytest.fixture(scope="module")
def uninterrupted(dense_file):
    return shared_run(dense_file[0])


@pytest.mark.parametrize("how", ["stop_at", "interrupt_at"])
def test_ring_stopped_by_its_callback_resumes_the_same_chain(dense_file, tmp_path, uninterrupted,
                                                             how):
    """Rank 0's callback stops every rank (returning True, or raising KeyboardInterrupt as
    Ctrl-C would); the checkpoint (one file, rank 0's) resumes."""
    V, path = dense_file
    out = tmp_path / "run"
    stopped = run_ring(tmp_path, path, out, **{how: 200})
    assert all(r["iterations"] == 200 and r["n_kept"] == 10 for r in stopped)
    assert all(r["interrupted"] == (how == "interrupt_at") for r in stopped)
    assert sorted(os.listdir(out)) == sorted(
        ["checkpoint.npz", "meta.json", "rank0.pid", "rank1.pid", "W_samples.npy", "H_samples.npy",
         "W_mean.npy", "H_mean.npy", "W_var.npy", "H_var.npy", "draw_units.npy",
         "stat_norm_W.npy", "stat_norm_H.npy"] + [f"trace_{k}.npy" for k in uninterrupted.trace])
    resumed = run_ring(tmp_path, path, out)
    assert all(r["iterations"] == 600 and r["n_kept"] == 30 for r in resumed)
    result = pymf.load(str(out))
    assert_same_chain(result, uninterrupted)
    for key, value in uninterrupted.sample_stats.items():
        assert np.array_equal(result.sample_stats[key], value), key


def test_ring_resumes_shared_memory_and_shared_memory_resumes_the_ring(dense_file, tmp_path,
                                                                        uninterrupted):
    """One checkpoint format: a shared-memory run with B blocks streaming to DIR and
    checkpointing to DIR/checkpoint.npz goes on over B ranks with out_dir=DIR, and the other
    way round, to the chain of a run that never stopped."""
    V, path = dense_file
    out = tmp_path / "a"
    out.mkdir()
    partial = shared_run(V, sample_dir=out, checkpoint=out / "checkpoint.npz",
                         callback=stop_at(260))
    assert partial.iterations == 260
    run_ring(tmp_path, path, out)
    assert_same_chain(pymf.load(str(out)), uninterrupted)

    out = tmp_path / "b"
    run_ring(tmp_path, path, out, stop_at=340)
    seen = []  # the iterations the shared-memory run traces: after 340 if it did resume
    resumed = shared_run(V, sample_dir=out, checkpoint=out / "checkpoint.npz",
                         callback=lambda info: seen.append(info["iteration"]))
    assert min(seen) > 340
    assert_same_chain(resumed, uninterrupted)


def test_ctrl_c_on_one_rank_stops_every_rank_and_the_run_resumes(dense_file, tmp_path):
    """SIGINT to rank 1 alone: every rank stops at the same iteration, the checkpoint is
    written, the launcher saves what was kept (interrupted) and exits 0; a rerun resumes."""
    V, path = dense_file
    out = tmp_path / "run"
    args = ["psgld", "--data", path, "--rank", "4", "--samples", "40000", "--thin", "2000",
            "--step-size", "1e-4", "--checkpoint-every", "500", "--seed", "3", "--out", str(out)]
    job = run_mpi(2, *args, cwd=tmp_path, wait=False)
    wait_for(out / "checkpoint.npz", job)
    os.kill(int((out / "rank1.pid").read_text()), signal.SIGINT)
    stdout, stderr = job.communicate(timeout=120)
    assert job.returncode == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["interrupted"] and summary["iterations"] < 40000
    assert pymf.load(str(out)).interrupted
    with np.load(out / "checkpoint.npz") as ck:
        assert int(ck["kernel_t"]) == summary["iterations"]
    resumed = run_mpi(2, *args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert not json.loads(resumed.stdout.strip().splitlines()[-1])["interrupted"]
    shared = pymf.sample(pymf.TweedieNMF(4), V, pymf.PSGLD(blocks=2, step_size=1e-4),
                         n_samples=40000, thin=2000, seed=3)
    assert_same_chain(pymf.load(str(out)), shared)


# a parameter overflows at iteration 240, inside a call of 50 iterations (201-250); the
# fitted values run away past the NMF kernel's check at the trace point of iteration 800
# (0.05, which overflowed there, now stops at the first trace point, 100, keeping nothing)
@pytest.mark.parametrize("step_size, thin, trace_every", [(0.5, 50, 1000), (0.045, 100, 100)])
def test_divergence_is_that_of_shared_memory(dense_file, tmp_path, step_size, thin, trace_every):
    """The ranks agree on the first diverged iteration and go back to the state before it:
    every rank raises DivergenceError with shared memory's iteration, and rank 0's .state
    and .result are shared memory's."""
    V, path = dense_file
    out = tmp_path / "run"
    options = {"n_samples": 3000, "thin": thin, "trace_every": trace_every,
               "step_size": step_size, "checkpoint_every": 3000}
    reports = run_ring(tmp_path, path, out, **options)
    with pytest.raises(pymf.DivergenceError) as shared:
        pymf.sample(pymf.TweedieNMF(4), V, pymf.PSGLD(blocks=2, step_size=step_size),
                    n_samples=3000, thin=thin, trace_every=trace_every, seed=RUN["seed"])
    assert shared.value.result.n_kept > 0
    assert [r["diverged"] for r in reports] == [shared.value.iteration] * 2
    assert [r["result"] for r in sorted(reports, key=lambda r: r["rank"])] == [True, False]
    with np.load(str(out) + "-state.npz") as state:
        assert np.array_equal(state["W"], shared.value.state["W"])
        assert np.array_equal(state["H"], shared.value.state["H"])
    partial = pymf.load(str(out) + "-partial.npz")
    assert partial.interrupted and partial.n_kept == shared.value.result.n_kept
    assert_same_chain(partial, shared.value.result)


def test_an_error_on_one_rank_alone_ends_the_job_instead_of_hanging(tmp_path):
    """The test split left rank 2's row piece without a rating: that rank alone raised, its
    message was printed only by rank 0 (which had none) and the job hung until killed. The
    rank now says why and the job ends (MPI_Abort)."""
    lines = ["1\t1\t3\t0", "1\t2\t4\t0", "1\t3\t5\t0", "1\t4\t2\t0", "2\t1\t3\t0", "3\t2\t4\t0",
             "4\t3\t1\t0", "4\t4\t2\t0"]
    (tmp_path / "few.data").write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    done = run_mpi(3, "psgld", "--data", "few.data", "--test-fraction", "0.25", "--seed", "2",
                   "--rank", "2", "--samples", "20", "--thin", "2", "--step-size", "1e-3",
                   "--out", "out", cwd=tmp_path, timeout=120)
    assert done.returncode != 0 and time.perf_counter() - started < 60
    assert "pymf.mpi: error: rank 2: ValueError: the data has no observed entries" in done.stderr


def test_the_launchers_name_the_mpi_extra_when_mpi4py_is_missing(tmp_path):
    """Without mpi4py the launchers ended in a bare ModuleNotFoundError."""
    code = ("import sys; sys.modules['mpi4py'] = None; import pymf, pymf.mpi; "
            "sys.exit(pymf.mpi.main(['psgld', '--data', 'demo', '--out', 'x']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=mpi_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert 'pymf.mpi: error: MPI is not usable: mpi4py is not installed' in done.stderr
    assert 'pip install "pymf[mpi]"' in done.stderr


def test_write_shards_refuses_a_pattern_without_rank_and_returns_the_files_written(tmp_path):
    """Without '{rank}' every shard went to one file, each over the last, and the command
    said it had written them all; without .npz, np.savez added the suffix to files whose
    names were returned without it."""
    V = np.ones((6, 4))
    with pytest.raises(ValueError, match=r"a shard pattern must contain '\{rank\}'"):
        nmf_mpi.write_shards(V, 2, str(tmp_path / "s.npz"))
    paths = nmf_mpi.write_shards(V, 2, str(tmp_path / "p{rank}"))
    assert paths == [str(tmp_path / "p0.npz"), str(tmp_path / "p1.npz")]
    assert all(os.path.exists(path) for path in paths)
