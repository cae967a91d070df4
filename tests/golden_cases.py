"""The cases of the golden results (tests/test_golden.py, recorded in tests/golden_results.json).

Every call of the public API that the golden results make lives in this file, one small
function per case, so that a later rename of the API only touches this file (the recorded
digests stay as they are). A case runs a small problem with an explicit seed and returns a
dict of

  "chain:..."    sha256 of what the chain itself produced: kept samples, final states,
                 fitted factors, sample iterations. These must never change.
  "summary:..."  sha256 of what is derived from the chain: posterior means, running
                 (Welford) averages, predictions, traces without their "time" keys. These
                 may change at the last bit (e.g. a different summation order), but only in
                 a commit that says why.
  "diag:..."     plain numbers (sums of the first and last samples, last trace values, a
                 short digest of the input data) that are recorded and shown when a digest
                 differs, never compared.

Arrays are hashed with their dtype and shape, as C-contiguous float64 (floating point) or
int64 (integer) bytes, every NaN made the same NaN.

    python tests/golden_cases.py            # run every case, compare with the recording
    python tests/golden_cases.py --write    # record every case (MPI ones when MPI works)
    python tests/golden_cases.py --write CASE ...   # re-record only these cases

SAME_AS maps a case to the case whose recording it must reproduce (another thread count,
a resumed run); only the latter is recorded. MPI_CASES run under mpiexec.
"""
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

import pymf
from support import mpi_env, mpiexec_path

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "golden_results.json")

CASES = {}     # name -> function() -> dict of digests
SAME_AS = {}   # name -> the recorded case whose digests it must reproduce
MPI_CASES = set()


def _register(name, function, same_as=None, mpi=False):
    CASES[name] = function
    if same_as is not None:
        SAME_AS[name] = same_as
    if mpi:
        MPI_CASES.add(name)


# ------------------------------------------------------------------------------- digests

def _canonical(array):
    a = np.asarray(array)
    if a.dtype.kind in "fc":
        a = a.astype(np.float64)
        a = np.where(np.isnan(a), np.nan, a)
    elif a.dtype.kind in "iub":
        a = a.astype(np.int64)
    else:
        raise TypeError(f"cannot digest an array of dtype {a.dtype}")
    return np.ascontiguousarray(a)


def digest(array):
    """sha256 of an array's canonical bytes, with its dtype and shape."""
    a = _canonical(array)
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def digest_dict(arrays, skip_time=True):
    """sha256 over the sorted keys of a dict of arrays (keys with "time" left out)."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        if skip_time and "time" in key:
            continue
        h.update(key.encode())
        h.update(digest(arrays[key]).encode())
    return h.hexdigest()


def digest_many(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(digest(a).encode())
    return h.hexdigest()


def _f(x):
    """A plain float for the diagnostics (None where it is not finite: JSON has no NaN)."""
    x = float(x)
    return x if np.isfinite(x) else None


def _data_digest(data):
    if isinstance(data, pymf.Ratings):
        return digest_many(data.rows, data.cols, data.values, np.asarray(data.shape))[:16]
    if isinstance(data, tuple):
        return digest_many(*data)[:16]
    return digest(data)[:16]


# ------------------------------------------------------------------- digests of results

def nmf_sample_digests(res, data, pairs):
    n = res.n_kept
    W = np.asarray(res.W_samples)[:n]
    H = np.asarray(res.H_samples)[:n]
    rows, cols = pairs
    mean, std = res.predict(rows, cols, return_std=True)
    return {
        "chain:W_samples": digest(W),
        "chain:H_samples": digest(H),
        "chain:sample_iterations": digest(res.sample_iterations),
        "summary:W_mean": digest(res.W_mean),
        "summary:H_mean": digest(res.H_mean),
        "summary:predict": digest_many(mean, std),
        "summary:trace": digest_dict(res.trace),
        "diag:n_kept": int(n),
        "diag:W_first_sum": _f(W[0].sum()),
        "diag:W_last_sum": _f(W[-1].sum()),
        "diag:H_last_sum": _f(H[-1].sum()),
        "diag:loglik_last": _f(res.trace["loglik"][-1]),
        "diag:data": _data_digest(data),
    }


def nmf_fit_digests(fit, data, pairs):
    rows, cols = pairs
    return {
        "chain:W": digest(fit.W),
        "chain:H": digest(fit.H),
        "summary:predict": digest(fit.predict(rows, cols)),
        "summary:trace": digest_dict(fit.trace),
        "diag:W_sum": _f(np.sum(fit.W)),
        "diag:H_sum": _f(np.sum(fit.H)),
        "diag:logpost_last": _f(fit.trace["logpost"][-1]),
        "diag:data": _data_digest(data),
    }


def bpmf_sample_digests(res, data, pairs):
    out = {}
    for key in "UVab":
        out["chain:samples_" + key] = digest(res.samples[key])
    for key in "UVab":
        out["chain:last_state_" + key] = digest(res.last_state[key])
    users, items = pairs
    mean, std = res.predict(users, items, return_std=True)
    out.update({
        "summary:test_mean_std": digest_many(res.test_mean, res.test_std),
        "summary:predict": digest_many(mean, std),
        "summary:trace": digest_dict(res.trace),
        "summary:summaries": digest_dict(res.summaries),
        "diag:test_count": int(res.test_count),
        "diag:burnin_end": res.burnin_end,
        "diag:U_first_sum": _f(res.samples["U"][0].sum()),
        "diag:U_last_sum": _f(res.samples["U"][-1].sum()),
        "diag:last_V_sum": _f(res.last_state["V"].sum()),
        "diag:train_rmse_last": _f(res.trace["train_rmse"][-1]),
        "diag:test_rmse_last": _f(res.trace["test_rmse"][-1]),
        "diag:data": _data_digest(data),
    })
    return out


def bpmf_fit_digests(fit, data, pairs):
    users, items = pairs
    out = {"chain:" + key: digest(getattr(fit, key)) for key in "UVab"}
    out.update({
        "summary:predict": digest(fit.predict(users, items)),
        "summary:trace": digest_dict(fit.trace),
        "diag:U_sum": _f(np.sum(fit.U)),
        "diag:train_rmse_last": _f(fit.trace["train_rmse"][-1]),
        "diag:test_rmse_last": _f(fit.trace["test_rmse"][-1]),
        "diag:data": _data_digest(data),
    })
    return out


def linear_digests(res, data):
    return {
        "chain:samples": digest(res.samples),
        "summary:mean": digest(res.mean),
        "summary:cov": digest(res.cov),
        "summary:trace": digest_dict(res.trace),
        "diag:n_kept": int(res.n_kept),
        "diag:iterations": int(res.iterations),
        "diag:skipped_pairs": int(res.skipped_pairs),
        "diag:first_sum": _f(res.samples[0].sum()),
        "diag:last_sum": _f(res.samples[-1].sum()),
        "diag:mean_error_last": _f(res.trace["mean_error"][-1]),
        "diag:data": _data_digest(data),
    }


# -------------------------------------------------------------------------------- data

def poisson_dense():
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 32, 3, beta=1.0, seed=3)
    return V


def sparse_of(V, keep=0.6, seed=0):
    mask = np.random.default_rng(seed).random(V.shape) < keep
    rows, cols = np.nonzero(mask)
    return pymf.Ratings(rows, cols, V[mask], shape=V.shape)


def held_out(V, seed=9, keep=0.1):
    """A few extra ratings of V's shape (a test set for the RMSE traces)."""
    return sparse_of(V, keep=keep, seed=seed)


NMF_PAIRS = (np.array([0, 3, 7, 39, 20]), np.array([2, 2, 31, 0, 17]))


def bpmf_ratings(L=40, M=30, D=3, seed=1):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((L, M)) < 0.5)
    U, V = rng.normal(0, 0.8, (L, D)), rng.normal(0, 0.8, (M, D))
    values = 3 + (U @ V.T)[rows, cols] + rng.normal(0, 0.7, len(rows))
    return pymf.Ratings(rows, cols, values, shape=(L, M))


def bpmf_split():
    return bpmf_ratings().split(0.2, seed=1)


BPMF_PAIRS = (np.array([0, 5, 39, 12, 7]), np.array([0, 29, 3, 12, 7]))


def linear_problem():
    A, x, _ = pymf.datasets.make_linear_gaussian(200, 3, noise_var=10.0, spread=30, seed=2)
    return A, x


# ------------------------------------------------------------------------ NMF sampling

def _psgld_dense(threads, **extra):
    V = poisson_dense()
    sampler = pymf.PSGLD(blocks=4, step_size=pymf.PolynomialDecay(1e-3, 0.51), n_threads=threads)
    res = pymf.sample(pymf.TweedieNMF(3, beta=1.0), V, sampler, n_samples=60, burnin=10,
                      thin=3, seed=11, **extra)
    return res, V


def nmf_psgld_dense(threads):
    res, V = _psgld_dense(threads)
    return nmf_sample_digests(res, V, NMF_PAIRS)


def nmf_psgld_dense_blocks2():
    """The shared-memory chain that mpi_psgld_ring_2ranks reproduces (2 blocks, rank 3)."""
    V = poisson_dense()
    sampler = pymf.PSGLD(blocks=2, step_size=pymf.PolynomialDecay(1e-3, 0.51), n_threads=1)
    res = pymf.sample(pymf.TweedieNMF(3, beta=1.0), V, sampler, n_samples=60, burnin=10,
                      thin=3, seed=11)
    return nmf_sample_digests(res, V, NMF_PAIRS)


def _interrupt_at(iteration):
    def callback(info):
        if info["iteration"] >= iteration:
            raise KeyboardInterrupt
    return callback


@contextlib.contextmanager
def _expected_interrupt():
    """The stopped run's "interrupted at ..." RuntimeWarning: expected, so not reported."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "interrupted at", RuntimeWarning)
        yield


def nmf_psgld_dense_resumed():
    """Stopped at iteration 30 by a KeyboardInterrupt (checkpoint written), then resumed by
    the same call: must give nmf_psgld_dense's digests."""
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = os.path.join(tmp, "run.npz")
        with _expected_interrupt():
            partial, _ = _psgld_dense(1, checkpoint=checkpoint, callback=_interrupt_at(30))
        if not (partial.interrupted and 0 < partial.n_kept < 20 and os.path.exists(checkpoint)):
            raise RuntimeError(f"the run was not interrupted as planned: interrupted="
                               f"{partial.interrupted}, n_kept={partial.n_kept}")
        seen = []  # the iterations the resumed call traces: after 30 if it did resume
        res, V = _psgld_dense(1, checkpoint=checkpoint,
                              callback=lambda info: seen.append(info["iteration"]))
        if not seen or seen[0] <= 30:
            raise RuntimeError(f"the second call did not resume from iteration 30: {seen[:3]}")
    return nmf_sample_digests(res, V, NMF_PAIRS)


def nmf_psgld_sparse(threads):
    V = poisson_dense()
    data = sparse_of(V)
    sampler = pymf.PSGLD(blocks=3, step_size=pymf.PolynomialDecay(1e-3, 0.51), n_threads=threads)
    res = pymf.sample(pymf.TweedieNMF(3, beta=1.0), data, sampler, n_samples=60, burnin=6,
                      thin=4, seed=12, test=held_out(V), trace_every=6)
    return nmf_sample_digests(res, data, NMF_PAIRS)


def nmf_psgld_random_permuted(threads):
    V = poisson_dense()
    sampler = pymf.PSGLD(blocks=5, step_size=2e-4, part_order="random", permute=True,
                         n_threads=threads)
    res = pymf.sample(pymf.TweedieNMF(3, beta=1.0), V, sampler, n_samples=50, thin=5, seed=13,
                      test=held_out(V))
    return nmf_sample_digests(res, V, NMF_PAIRS)


def nmf_ld():
    V = poisson_dense()
    res = pymf.sample(pymf.TweedieNMF(3, beta=1.0), V, pymf.LD(step_size=1e-4, n_threads=1),
                      n_samples=40, burnin=5, thin=2, seed=14)
    return nmf_sample_digests(res, V, NMF_PAIRS)


def nmf_sgld():
    V = poisson_dense()
    data = sparse_of(V, seed=1)
    sampler = pymf.SGLD(step_size=1e-4, batch_size=0.25, n_threads=1, blocks=4)
    res = pymf.sample(pymf.TweedieNMF(3, beta=1.0), data, sampler, n_samples=60, thin=3,
                      seed=15)
    return nmf_sample_digests(res, data, NMF_PAIRS)


def nmf_psgld_gaussian():
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 32, 3, beta=2.0, phi=0.5, seed=4)
    model = pymf.TweedieNMF(3, beta=2.0, phi=0.5, prior="gaussian", lam_w=0.5, lam_h=0.5)
    sampler = pymf.PSGLD(blocks=4, step_size=5e-4, n_threads=1)
    res = pymf.sample(model, V, sampler, n_samples=40, burnin=10, thin=4, seed=16,
                      test=held_out(V, seed=2))
    return nmf_sample_digests(res, V, NMF_PAIRS)


def nmf_psgld_compound_poisson():
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 32, 3, beta=0.5, phi=1.0, seed=5)
    model = pymf.TweedieNMF(3, beta=0.5, phi=1.0)
    sampler = pymf.PSGLD(blocks=4, step_size=pymf.PolynomialDecay(5e-4, 0.6), n_threads=1)
    res = pymf.sample(model, V, sampler, n_samples=40, burnin=8, thin=4, seed=17)
    return nmf_sample_digests(res, V, NMF_PAIRS)


def nmf_gibbs(threads):
    V = poisson_dense()
    res = pymf.sample(pymf.TweedieNMF(3, beta=1.0), V, pymf.Gibbs(n_threads=threads),
                      n_samples=20, burnin=5, thin=2, seed=18, test=held_out(V))
    return nmf_sample_digests(res, V, NMF_PAIRS)


# ------------------------------------------------------------------------- NMF fitting

def nmf_fit_sgd():
    V = poisson_dense()
    train, test = pymf.Ratings.from_dense(V).split(0.2, seed=0)
    fit = pymf.fit(pymf.TweedieNMF(3), train, pymf.SGD(step_size=pymf.PolynomialDecay(2e-3, 0.6)),
                   n_epochs=5, seed=19, test=test)
    return nmf_fit_digests(fit, train, NMF_PAIRS)


def nmf_fit_dsgd(threads):
    V = poisson_dense()
    train, test = pymf.Ratings.from_dense(V).split(0.2, seed=0)
    optimizer = pymf.DSGD(blocks=4, step_size=1e-3, part_order="random", permute=True,
                          n_threads=threads)
    fit = pymf.fit(pymf.TweedieNMF(3), train, optimizer, n_epochs=8, seed=20, test=test)
    return nmf_fit_digests(fit, train, NMF_PAIRS)


# ------------------------------------------------------------------------------- BPMF

def _dsgld(split, blocks, workers):
    return pymf.DSGLD(split=split, blocks=blocks, batch_size=30, round_length=4,
                      step_size=pymf.AnnealedStep(2e-3, 50), hyper_every=3, n_threads=workers)


# pymf 0.1 ignored burnin for BPMF unless burnin_rmse was given (it kept draws from round 1
# and ran n_samples units in all): a bug, fixed with the engine. The recordings were made
# with burnin=10 under that bug, so the same chains and kept draws are burnin=0 runs now.
BPMF_SETTINGS = dict(n_samples=30, burnin=0, thin=5, seed=9)
# The recordings were made with tau fixed at 2.0, the default before tau="sample".
FIXED_TAU = 2.0


def bpmf_dsgld(split, blocks, workers, **extra):
    train, test = bpmf_split()
    res = pymf.sample(pymf.BPMF(3, tau=FIXED_TAU), train, _dsgld(split, blocks, workers), test=test,
                      **BPMF_SETTINGS, **extra)
    return bpmf_sample_digests(res, train, BPMF_PAIRS)


def bpmf_dsgld_rank10(workers):
    """Rank 10: rows of D + 1 = 11, not a multiple of 4, so a row's noise is not whole
    Philox groups of four (the other BPMF cases' rows of 4 are)."""
    train, test = bpmf_split()
    res = pymf.sample(pymf.BPMF(10, tau=FIXED_TAU), train, _dsgld("square", 2, workers),
                      test=test, **BPMF_SETTINGS)
    return bpmf_sample_digests(res, train, BPMF_PAIRS)


def bpmf_dsgld_square_resumed():
    """Stopped at round 20 by a KeyboardInterrupt (checkpoint written), then resumed by the
    same call: must give bpmf_dsgld_square's digests."""
    train, test = bpmf_split()
    interrupt = _interrupt_at(20)

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = os.path.join(tmp, "bpmf.npz")
        with _expected_interrupt():
            partial = pymf.sample(pymf.BPMF(3, tau=FIXED_TAU), train, _dsgld("square", 2, 1),
                                  test=test, checkpoint=checkpoint, checkpoint_every=7,
                                  callback=interrupt, **BPMF_SETTINGS)
        if not (partial.interrupted and partial.trace["iteration"][-1] == 20
                and os.path.exists(checkpoint)):
            raise RuntimeError("the run was not interrupted as planned")
        seen = []  # the rounds the resumed call traces: after 20 if it did resume
        res = pymf.sample(pymf.BPMF(3, tau=FIXED_TAU), train, _dsgld("square", 2, 1), test=test,
                          checkpoint=checkpoint, checkpoint_every=7,
                          callback=lambda info: seen.append(info["iteration"]), **BPMF_SETTINGS)
        if not seen or seen[0] <= 20:
            raise RuntimeError(f"the second call did not resume from round 20: {seen[:3]}")
    return bpmf_sample_digests(res, train, BPMF_PAIRS)


def bpmf_sgld(threads):
    train, test = bpmf_split()
    sampler = pymf.SGLD(step_size=pymf.AnnealedStep(1e-3, 50), batch_size=30, n_threads=threads)
    res = pymf.sample(pymf.BPMF(3, tau=FIXED_TAU), train, sampler, n_samples=40, burnin=0, thin=4, seed=21,
                      test=test)
    return bpmf_sample_digests(res, train, BPMF_PAIRS)


def bpmf_gibbs(hyperprior, workers):
    train, test = bpmf_split()
    res = pymf.sample(pymf.BPMF(3, tau=1.5), train, pymf.BPMFGibbs(hyperprior, n_threads=workers),
                      n_samples=20, burnin=0, thin=2, seed=22, test=test)
    return bpmf_sample_digests(res, train, BPMF_PAIRS)


def bpmf_fit(optimizer):
    train, test = bpmf_split()
    model = pymf.BPMF(3, tau=1.5, init_precision=25)
    opt = (pymf.SGD(step_size=1e-3, batch_size=50) if optimizer == "sgd"
           else pymf.DSGD(blocks=2, step_size=1e-3))
    fit = pymf.fit(model, train, opt, n_epochs=10, seed=23, test=test)
    return bpmf_fit_digests(fit, train, BPMF_PAIRS)


# ------------------------------------------------------------ HAMCMC and its baselines

def linear(kind):
    A, x = linear_problem()
    model = pymf.LinearGaussian(noise_var=10.0)
    sampler = {
        "hamcmc": lambda: pymf.HAMCMC(memory=3, gamma=0.05, lam=0.1, batch_size=20,
                                      step_size=pymf.PolynomialDecay(0.3, 0.51)),
        "psgld": lambda: pymf.PreconditionedSGLD(alpha=0.9, lam=1e-3, step_size=1e-3,
                                                 batch_size=0.1),
        "sgrld": lambda: pymf.SGRLD(step_size=0.1, batch_size=0.1),
        "sgld": lambda: pymf.SGLD(step_size=1e-3, batch_size=0.1),
    }[kind]()
    res = pymf.sample(model, (A, x), sampler, n_samples=400, burnin=100, thin=2, seed=24)
    return linear_digests(res, (A, x))


# ------------------------------------------------------------------------ SIBM fitting

def sibm_problem():
    """A 60 x 40 binary matrix of about 10 % ones, and 80 held-out entries."""
    import scipy.sparse as sparse

    rng = np.random.default_rng(21)
    ones = rng.random((60, 40)) < 0.1
    rows, cols = rng.integers(0, 60, 80), rng.integers(0, 40, 80)
    return sparse.csr_matrix(ones.astype(float)), (rows, cols, ones[rows, cols].astype(int))


def sibm_fit(method, n_updates, checkpoint=None, callback=None):
    X, test = sibm_problem()
    res = pymf.fit(pymf.LogisticMF(3), X, method, n_updates=n_updates, seed=13, test=test,
                   trace_every=5, checkpoint=checkpoint, checkpoint_every=5, callback=callback)
    return res, X


def sibm_digests(res, data):
    return {
        "chain:natural": digest_dict(res.natural),
        "summary:trace": digest_dict(res.trace),
        "diag:elbo_last": _f(res.trace["elbo"][-1]),
        "diag:test_loglik_last": _f(res.trace["test_loglik"][-1]),
        "diag:data": digest_many(data.indptr, data.indices)[:16],
    }


def sibm(sampling, batch_size, threads):
    res, X = sibm_fit(pymf.SIBM(sampling=sampling, batch_size=batch_size, n_threads=threads), 30)
    return sibm_digests(res, X)


def sibm_resumed():
    """Stopped after update 15 (checkpoint written), then resumed by the same call: must give
    sibm_biased_auto_threads1's digests."""
    method = pymf.SIBM(sampling="biased", batch_size="auto", n_threads=1)
    interrupt = _interrupt_at(15)

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = os.path.join(tmp, "sibm.npz")
        with _expected_interrupt():
            partial, _ = sibm_fit(method, 30, checkpoint, interrupt)
        if not (partial.interrupted and os.path.exists(checkpoint)):
            raise RuntimeError("the fit was not interrupted as planned")
        res, X = sibm_fit(method, 30, checkpoint)
    return sibm_digests(res, X)


def sibm_batch():
    res, X = sibm_fit(pymf.BatchVB(), 6)
    return sibm_digests(res, X)


# -------------------------------------------------------------------------------- MPI

def run_mpi(n_ranks, module, args, cwd):
    command = [mpiexec_path(), "-n", str(n_ranks), sys.executable, "-m", module, *args]
    done = subprocess.run(command, cwd=cwd, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return done


def mpi_psgld_ring():
    """python -m pymf.mpi psgld on 2 ranks (the ring), dense data, what it wrote."""
    V = poisson_dense()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "V.npy")
        np.save(path, V)
        out = os.path.join(tmp, "run")
        run_mpi(2, "pymf.mpi", ["psgld", "--data", path, "--rank", "3", "--samples", "60",
                                "--burnin", "10", "--thin", "3", "--step-a", "1e-3",
                                "--step-b", "0.51", "--seed", "11", "--out", out], cwd=tmp)
        res = pymf.load(out)
        return nmf_sample_digests(res, V, NMF_PAIRS)


def mpi_bpmf(n_ranks, split, blocks):
    """python -m pymf.bpmf.mpi (a parameter server and workers), the result file it wrote."""
    R = bpmf_ratings()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ratings.npz")
        np.savez(path, rows=R.rows, cols=R.cols, values=R.values, shape=np.array(R.shape))
        out = os.path.join(tmp, "result.npz")
        run_mpi(n_ranks, "pymf.bpmf.mpi", [
            "--data", path, "--split", split, "--blocks", blocks, "--rank", "3",
            "--tau", str(FIXED_TAU), "--batch-size", "30", "--round-length", "4", "--eps0", "2e-3", "--kappa", "50",
            "--hyper-every", "3", "--samples", "30", "--burnin", "0", "--thin", "5",
            "--seed", "9", "--test-fraction", "0.2", "--split-seed", "1", "--out", out], cwd=tmp)
        res = pymf.load(out)
        train, _ = R.split(0.2, seed=1)
        return bpmf_sample_digests(res, train, BPMF_PAIRS)


# ------------------------------------------------------------------------------ cases

for _t in (1, 2):
    _same = None if _t == 1 else "{}_threads1"
    _register(f"nmf_psgld_dense_threads{_t}", lambda t=_t: nmf_psgld_dense(t),
              _same and _same.format("nmf_psgld_dense"))
    _register(f"nmf_psgld_sparse_threads{_t}", lambda t=_t: nmf_psgld_sparse(t),
              _same and _same.format("nmf_psgld_sparse"))
    _register(f"nmf_psgld_random_permuted_threads{_t}", lambda t=_t: nmf_psgld_random_permuted(t),
              _same and _same.format("nmf_psgld_random_permuted"))
    _register(f"nmf_gibbs_threads{_t}", lambda t=_t: nmf_gibbs(t),
              _same and _same.format("nmf_gibbs"))
    _register(f"nmf_fit_dsgd_threads{_t}", lambda t=_t: nmf_fit_dsgd(t),
              _same and _same.format("nmf_fit_dsgd"))
_register("nmf_psgld_dense_resumed", nmf_psgld_dense_resumed, "nmf_psgld_dense_threads1")
_register("nmf_psgld_dense_blocks2", nmf_psgld_dense_blocks2)
_register("nmf_ld", nmf_ld)
_register("nmf_sgld", nmf_sgld)
_register("nmf_psgld_gaussian_beta2", nmf_psgld_gaussian)
_register("nmf_psgld_compound_poisson_beta0.5", nmf_psgld_compound_poisson)
_register("nmf_fit_sgd", nmf_fit_sgd)

for _w in (1, 2):
    _same = None if _w == 1 else "{}_workers1"
    _register(f"bpmf_dsgld_square_workers{_w}", lambda w=_w: bpmf_dsgld("square", 2, w),
              _same and _same.format("bpmf_dsgld_square"))
    _register(f"bpmf_dsgld_hybrid_workers{_w}", lambda w=_w: bpmf_dsgld("hybrid", (2, 3), w),
              _same and _same.format("bpmf_dsgld_hybrid"))
    _register(f"bpmf_dsgld_column_workers{_w}", lambda w=_w: bpmf_dsgld("column", 3, w),
              _same and _same.format("bpmf_dsgld_column"))
    _register(f"bpmf_dsgld_rank10_workers{_w}", lambda w=_w: bpmf_dsgld_rank10(w),
              _same and _same.format("bpmf_dsgld_rank10"))
    _register(f"bpmf_sgld_workers{_w}", lambda w=_w: bpmf_sgld(w),
              _same and _same.format("bpmf_sgld"))
    _register(f"bpmf_gibbs_wishart_workers{_w}", lambda w=_w: bpmf_gibbs("wishart", w),
              _same and _same.format("bpmf_gibbs_wishart"))
    _register(f"bpmf_gibbs_gamma_workers{_w}", lambda w=_w: bpmf_gibbs("gamma", w),
              _same and _same.format("bpmf_gibbs_gamma"))
_register("bpmf_dsgld_square_resumed", bpmf_dsgld_square_resumed, "bpmf_dsgld_square_workers1")
_register("bpmf_fit_sgd", lambda: bpmf_fit("sgd"))
_register("bpmf_fit_dsgd", lambda: bpmf_fit("dsgd"))

for _kind in ("hamcmc", "psgld", "sgrld", "sgld"):
    _register(f"linear_{_kind}", lambda k=_kind: linear(k))

_register("sibm_biased_auto_threads1", lambda: sibm("biased", "auto", 1))
_register("sibm_biased_auto_threads2", lambda: sibm("biased", "auto", 2),
          "sibm_biased_auto_threads1")
_register("sibm_biased_auto_resumed", sibm_resumed, "sibm_biased_auto_threads1")
_register("sibm_balanced_fixed", lambda: sibm("balanced", 200, 1))
_register("sibm_uniform_fixed", lambda: sibm("uniform", 200, 1))
_register("sibm_batch_vb", sibm_batch)

# the MPI chains are the shared-memory ones, bit for bit (README): same recordings
_register("mpi_psgld_ring_2ranks", mpi_psgld_ring, "nmf_psgld_dense_blocks2", mpi=True)
_register("mpi_bpmf_square_3ranks", lambda: mpi_bpmf(3, "square", "2"),
          "bpmf_dsgld_square_workers1", mpi=True)
_register("mpi_bpmf_hybrid_2ranks", lambda: mpi_bpmf(2, "hybrid", "2,3"),
          "bpmf_dsgld_hybrid_workers1", mpi=True)


# ----------------------------------------------------------------------------- record

def recorded_name(name):
    return SAME_AS.get(name, name)


def numerics_class():
    """The class of machine a recording holds for. pymf's C core gives the same bits on every
    x86-64 path (its baseline, AVX2 and AVX-512 builds), but a chain also passes through
    NumPy and OpenBLAS, which do not: NumPy's float64 ufuncs (np.power in a decaying step's
    schedule, np.exp, np.log1p, ...) use Intel's SVML where the CPU has AVX512_SKX and the C
    library's functions elsewhere, and OpenBLAS picks its kernels (products, norms, QR) by
    the same generation, so their last bits differ between an AVX-512 machine (an Intel
    Xeon, AMD Zen 4) and an AVX2 one (an AMD EPYC without AVX-512). The machines of one
    class seen so far gave the same bits."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    if features.get("AVX512_SKX"):
        return "x86-64-v4"
    if features.get("AVX2") and features.get("FMA3"):
        return "x86-64-v3"
    import platform
    return platform.machine() or "unknown"


def load_all(path=RESULTS):
    """{numerics class: {case: digests}}."""
    with open(path) as fh:
        return json.load(fh)["classes"]


def load_results(path=RESULTS, numerics=None):
    """The recorded digests of this machine's numerics class (or of `numerics`), {} where
    that class has none."""
    return load_all(path).get(numerics or numerics_class(), {})


def load_meta(path=RESULTS):
    """{numerics class: notes of its last recording (commit, NumPy and Python versions)}."""
    with open(path) as fh:
        return json.load(fh).get("meta", {})


def numpy_moved_the_input(got, expected, numerics, meta=None, numpy_version=None):
    """Why a case cannot be compared here, or None where it can.

    A case whose input data NumPy or OpenBLAS compute (the linear-Gaussian problem: a QR and
    products) gets other data under another NumPy release, whose OpenBLAS and SIMD ufuncs
    pick other kernels even on the same class of machine: NumPy 2.5.2 gave the x86-64-v4
    linear cases another diag:data than the 2.4.6 they were recorded with, and 2.4.6 on the
    same Xeon reproduced all 48 cases. Such a run says nothing about pymf's sampler, so the
    case is skipped, naming both versions. With the recorded NumPy, other input data is
    still a failure."""
    meta = load_meta() if meta is None else meta
    recorded_numpy = meta.get(numerics, {}).get("numpy")
    numpy_version = numpy_version or np.__version__
    if recorded_numpy is None or recorded_numpy == numpy_version:
        return None
    if got.get("diag:data") == expected.get("diag:data"):
        return None
    return (f"the case's input data differ from its {numerics} recording "
            f"({expected.get('diag:data')!r} -> {got.get('diag:data')!r}) because NumPy "
            f"{numpy_version} is running where NumPy {recorded_numpy} recorded it (NumPy and "
            "OpenBLAS compute this data); run it with that NumPy to compare the chain")


def compare(name, got, expected):
    """The list of differing keys (chain and summary digests only; diag is not compared)."""
    keys = sorted(k for k in set(got) | set(expected) if not k.startswith("diag:"))
    return [k for k in keys if got.get(k) != expected.get(k)]


def _git_head():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv):
    import time
    write = "--write" in argv
    only = [a for a in argv if not a.startswith("--")]
    unknown = [a for a in only if a not in CASES]
    if unknown:
        sys.exit(f"unknown cases: {unknown}")
    from pymf import mpi
    mpi_state = True if mpi.is_available() else mpi.why_unavailable()
    names = only or list(CASES)
    numerics = numerics_class()
    classes = load_all() if os.path.exists(RESULTS) else {}
    old = classes.get(numerics, {})
    print(f"numerics class of this machine: {numerics} ({len(old)} cases recorded for it)")
    got, failed = {}, False
    for name in names:
        if name in MPI_CASES and mpi_state is not True:
            print(f"{name}: skipped (MPI is not usable: {mpi_state})")
            continue
        started = time.perf_counter()
        got[name] = CASES[name]()
        seconds = time.perf_counter() - started
        target = recorded_name(name)
        reference = got[target] if target != name and target in got else old.get(target)
        if reference is None:
            status = "new" if write else "not recorded"
        else:
            diff = compare(name, got[name], reference)
            status = "same" if not diff else f"DIFFERS in {diff}"
            if diff and (target != name or not write):
                failed = True
            elif diff:
                status = f"re-recorded (was different in {diff})"
        print(f"{name}: {status} ({seconds:.2f} s)")
    if write:
        if failed:
            sys.exit("not written: a case differs from the case it must reproduce (SAME_AS)")
        cases = dict(old)
        for name, digests in got.items():
            if name in SAME_AS:
                continue
            if name in old and compare(name, digests, old[name]):
                # the chain moved on purpose: another class's recording of it is stale, and
                # only a machine of that class can record it again
                for other, recorded in classes.items():
                    if other != numerics and recorded.pop(name, None) is not None:
                        print(f"{name}: dropped its {other} recording (record it on such a "
                              f"machine: python tests/golden_cases.py --write {name})")
            cases[name] = digests
        classes[numerics] = dict(sorted(cases.items()))
        meta = {}
        if os.path.exists(RESULTS):
            with open(RESULTS) as fh:
                meta = json.load(fh).get("meta", {})
        # each class's notes (what was re-recorded when, and why) are kept; its last write
        # is stamped on them
        meta[numerics] = {**meta.get(numerics, {}), "recorded_at_commit": _git_head(),
                          "numpy": np.__version__, "python": sys.version.split()[0],
                          "pymf": pymf.__version__}
        with open(RESULTS, "w") as fh:
            json.dump({"meta": meta, "classes": dict(sorted(classes.items()))}, fh, indent=1,
                      sort_keys=False)
            fh.write("\n")
        print(f"wrote {len(cases)} recorded cases of {numerics} to {RESULTS}")
    elif failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
