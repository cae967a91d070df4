#!/usr/bin/env python3
"""PSGLD at 10^7 - 10^8 ratings (issue 20, part 3): memory, set-up and epoch time on the
synthetic MovieLens-10M matrix (bench/ratings_10m.py) and its 2 x 2 and 4 x 4 tilings; the
MPI ring at 1, 2 and 4 ranks on the 2 x 2 tiling with a cost model projected to the PSGLD
paper's Fig. 6; LIBMF and DSGD on the 10M data beside PSGLD.

Every measurement runs in a fresh child process, so that neither the others' memory nor the
generator's counts:
  psgld / dsgd (--tiles T): read the cache (numpy), pymf.Ratings, tile T x T (in memory);
    then the peak resident memory (VmHWM, Linux) is reset, and pymf.sample's set-up
    (pymf.nmf.sampling._setup: validation, the starting point, the block layout, the C
    chain) is timed, then --epochs epochs of the chain (B iterations of PSGLD, or
    iterations_per_epoch of DSGD), each timed. Reported: the COO bytes (int64 rows, int64
    columns, float64 values: what the caller hands pymf.Ratings), the resident memory after
    loading, the peak after the reset, the set-up and epoch times.
  libmf: the same data and the same model family (LIBMF's generalised-KL loss, i.e. Poisson
    NMF, do_nmf, K, 2 threads, float32 as LIBMF is) in a separate virtual environment
    (--libmf-venv, created with pip's `libmf` package if absent; not a pymf dependency). Its
    fit does its own set-up, so the time per epoch is (fit with 1 + E iterations - fit with 1
    iteration) / E, and its set-up is the 1-iteration fit less that epoch. Twice: pip's build
    (the sdist's setup.py: -O3, none of LIBMF's SIMD paths) and the same source built with
    the flags of LIBMF's own Makefile (-O3 -march=native -DUSEAVX), loaded through LIBMF_OBJ.
  mpi: the 2 x 2 tiling written as per-rank shards (pymf.nmf.mpi.write_shards, under --scratch),
    then `mpiexec -n P python -m pymf.mpi psgld --shards ...` for P in --ranks: compute and
    communication seconds per iteration and bytes per message, measured by the ring.
The cost model: T(B) = c K N / B^2 + (latency + 8 K J / B / bandwidth), c the measured
seconds per rating and factor at 1 rank (one thread); projected to the paper's Fig. 6
(MovieLens-10M as the paper orients it, I = 10,681 movies x J = 71,567 users, K = 50;
a) 5 - 120 nodes on fixed data, 100 iterations; b) 15 -> 120 nodes with the data 1 -> 64
times, 10 iterations) at --bandwidth and --latency, and checked against the measured 1/2/4
ranks. The paper's Fig. 6 has no numbers in its text (the figure is an image): only its
stated shapes are drawn -- (a) "reduces almost quadratically ... until B = 90; for B = 120
... increases", (b) "remains nearly constant" -- scaled to the model's first point.

Prints JSON and tables; writes results/psgld_scale/psgld_scale.json and two PNGs.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import HelpFormatter, emit, reset_peak, status_kib, table, write_json  # noqa: E402
DEFAULT_CACHE = os.path.join(ROOT, "results", "ratings_10m.npz")

# the PSGLD paper, section 4.3, as its text states them
PAPER = {"movies": 10_681, "users": 71_567, "ratings": 10_000_000, "K": 50,
         "fixed_nodes": [5, 10, 15, 30, 45, 60, 75, 90, 120], "fixed_iterations": 100,
         "weak_nodes": [15, 30, 60, 120], "weak_tiles": [1, 2, 4, 8], "weak_iterations": 10}


# ----------------------------------------------------------------- child processes ------
def load_tiled(cache, tiles):
    import numpy as np

    import pymf
    from pymf.nmf.mpi import tile_ratings
    started = time.perf_counter()
    with np.load(cache) as f:
        rows, cols, values = f["rows"], f["cols"], f["values"]
        shape = tuple(int(s) for s in f["shape"])
    read = time.perf_counter()
    ratings = pymf.Ratings(rows, cols, values, shape)
    del rows, cols, values
    validated = time.perf_counter()
    ratings = tile_ratings(ratings, tiles)
    tiled = time.perf_counter()
    return ratings, {"read_seconds": read - started, "ratings_seconds": validated - read,
                     "tile_seconds": tiled - validated}


def child_pymf(args):
    """One PSGLD (or DSGD) run on the tiled data: set-up and epochs, memory."""
    before_data_kib = status_kib("VmRSS")  # the interpreter, numpy and pymf, before any data
    import numpy as np

    import pymf
    from pymf.nmf.sampling import _setup
    ratings, timings = load_tiled(args.cache, args.tiles)
    coo_bytes = ratings.rows.nbytes + ratings.cols.nbytes + ratings.values.nbytes
    loaded_kib, load_peak_kib = status_kib("VmRSS"), status_kib("VmHWM")
    reset = reset_peak()
    model = pymf.TweedieNMF(args.rank, beta=1.0, phi=1.0)
    if args.method == "psgld":
        method = pymf.PSGLD(blocks=args.blocks, step_size=args.step_size, permute=True,
                            n_threads=args.threads)
    else:
        method = pymf.DSGD(blocks=args.blocks, step_size=args.step_size, permute=True,
                           n_threads=args.threads)
    started = time.perf_counter()
    observed, _, _, chain, *_ = _setup(model, ratings, method, 0, None, None)
    setup_seconds = time.perf_counter() - started
    setup_peak_kib = status_kib("VmHWM")
    per_epoch = (method.iterations_per_epoch(ratings.nnz) if args.method == "dsgd"
                 else args.blocks)
    start_loglik = chain.loglik()
    epochs = []
    for _ in range(args.epochs):
        steps = np.full(per_epoch, float(args.step_size))
        began = time.perf_counter()
        chain.run(steps)
        epochs.append(time.perf_counter() - began)
    end_loglik = chain.loglik()
    peak_kib = status_kib("VmHWM")
    # where the set-up's time goes (after the peak is read: these copies are not the run's)
    from pymf.engine.driver import digest
    from pymf.nmf.kernel import blocked_data
    began = time.perf_counter()
    digest(ratings)
    phases = {"digest_seconds": time.perf_counter() - began}
    del chain
    began = time.perf_counter()
    blocked_data(ratings, args.blocks, True, 1)
    phases["block_layout_seconds"] = time.perf_counter() - began
    print(json.dumps({
        "method": args.method, "tiles": args.tiles, "shape": list(ratings.shape),
        "ratings": int(ratings.nnz), "K": args.rank, "blocks": args.blocks,
        "threads": args.threads, "step_size": args.step_size, "coo_bytes": coo_bytes,
        "rss_before_data_bytes": before_data_kib * 1024, "rss_after_load_bytes": loaded_kib * 1024,
        "load_peak_rss_bytes": load_peak_kib * 1024, "peak_reset_after_load": reset,
        "setup_peak_rss_bytes": setup_peak_kib * 1024,
        "peak_rss_bytes": peak_kib * 1024, **timings, **phases,
        "setup_seconds": setup_seconds, "epoch_seconds": epochs,
        "epoch_seconds_median": statistics.median(epochs),
        "iterations_per_epoch": per_epoch, "loglik_start": start_loglik,
        "loglik_end": end_loglik, "uptime": os.getloadavg()}))


LIBMF_CHILD = r"""
import json, os, sys, time
import numpy as np
import libmf.mf as mf

def kib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])

cache, rank, threads, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with np.load(cache) as f:
    X = np.empty((len(f["rows"]), 3), dtype=np.float32)
    X[:, 0], X[:, 1], X[:, 2] = f["rows"], f["cols"], f["values"]
loaded = kib("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
fits = {}
for iters in (1, 1 + epochs):
    engine = mf.MF(fun=mf.P_KL_MFR, k=rank, nr_threads=threads, nr_iters=iters, do_nmf=True,
                   quiet=True, eta=0.05)
    began = time.perf_counter()
    engine.fit(X)
    fits[iters] = time.perf_counter() - began
    del engine
print(json.dumps({"coo_float32_bytes": X.nbytes, "rss_after_load_bytes": loaded * 1024,
                  "peak_rss_bytes": kib("VmHWM") * 1024, "fit_seconds": fits}))
"""


def libmf_native(venv):
    """LIBMF built from the same sdist with the flags of its own Makefile (-O3 -march=native
    -DUSEAVX -pthread; pip's build has none of its SIMD paths): the path of the .so, or
    (None, the exact error). The wrapper loads it through LIBMF_OBJ."""
    target = os.path.join(venv, "libmf_native.so")
    if os.path.exists(target):
        return target, None
    python = os.path.join(venv, "bin", "python")
    work = os.path.join(venv, "sdist")
    os.makedirs(work, exist_ok=True)
    steps = [[python, "-m", "pip", "download", "-q", "libmf==0.9.2", "--no-deps", "--no-binary",
              ":all:", "-d", work],
             ["tar", "xzf", os.path.join(work, "libmf-0.9.2.tar.gz"), "-C", work],
             [shutil.which("g++") or "g++", "-O3", "-march=native", "-DUSEAVX", "-pthread",
              "-std=c++11", "-shared", "-fPIC",
              os.path.join(work, "libmf-0.9.2", "src_cpp", "libmf_interface.cpp"),
              os.path.join(work, "libmf-0.9.2", "src_cpp", "mf.cpp"), "-o", target]]
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"{' '.join(command)}: {done.stderr.strip()[-2000:]}"
    return target, None


def libmf_run(python, args, native=None):
    env = dict(os.environ, **({"LIBMF_OBJ": native} if native else {}))
    done = subprocess.run([python, "-c", LIBMF_CHILD, args.cache, str(args.rank), str(args.threads),
                           str(args.epochs)], capture_output=True, text=True, env=env,
                          timeout=args.timeout)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-3000:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    one, more = out["fit_seconds"]["1"], out["fit_seconds"][str(1 + args.epochs)]
    out["epoch_seconds"] = (more - one) / args.epochs
    out["setup_seconds"] = one - out["epoch_seconds"]
    out["uptime"] = os.getloadavg()
    out["build"] = native or "pip"
    return out


def libmf_python(venv):
    """The venv's python with pip's libmf; (python, None) or (None, the exact error)."""
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", "import libmf.mf"]
    if os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0:
        return python, None
    for command in ([sys.executable, "-m", "venv", venv],
                    [python, "-m", "pip", "install", "-q", "libmf==0.9.2", "numpy"]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"{' '.join(command)}: {done.stderr.strip()[-2000:]}"
    done = subprocess.run(probe, capture_output=True, text=True)
    return (python, None) if done.returncode == 0 else (None, done.stderr.strip()[-2000:])


# ------------------------------------------------------------------ the cost model ------
def ring_seconds(B, N, J, K, seconds_per_rating_factor, bandwidth, latency):
    """T(B): one iteration of the ring, a block of N / B^2 ratings then one H block of
    J / B columns (K doubles each) to the neighbour."""
    compute = seconds_per_rating_factor * K * N / B ** 2
    message = latency + 8.0 * K * (J / B) / bandwidth
    return compute, message


def projections(c, bandwidth, latency):
    """The model on the paper's Fig. 6 settings."""
    N, J, K = PAPER["ratings"], PAPER["users"], PAPER["K"]
    fixed = []
    for B in PAPER["fixed_nodes"]:
        comp, msg = ring_seconds(B, N, J, K, c, bandwidth, latency)
        fixed.append({"nodes": B, "compute_s": comp * PAPER["fixed_iterations"],
                      "message_s": msg * PAPER["fixed_iterations"],
                      "seconds": (comp + msg) * PAPER["fixed_iterations"]})
    weak = []
    for B, t in zip(PAPER["weak_nodes"], PAPER["weak_tiles"]):
        comp, msg = ring_seconds(B, N * t * t, J * t, K, c, bandwidth, latency)
        weak.append({"nodes": B, "tiles": t, "ratings": N * t * t,
                     "compute_s": comp * PAPER["weak_iterations"],
                     "message_s": msg * PAPER["weak_iterations"],
                     "seconds": (comp + msg) * PAPER["weak_iterations"]})
    return fixed, weak


def paper_shapes(fixed, weak):
    """The paper's stated shapes, scaled to the model's first point: (a) proportional to
    B^-2 up to B = 90, then higher at 120 than at 90 (how much higher is not stated: drawn
    as an arrow, not a value); (b) constant."""
    B0, T0 = fixed[0]["nodes"], fixed[0]["seconds"]
    a = [(r["nodes"], T0 * (B0 / r["nodes"]) ** 2) for r in fixed if r["nodes"] <= 90]
    b = [(r["nodes"], weak[0]["seconds"]) for r in weak]
    return a, b


def plot(fixed, weak, measured, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    a, b = paper_shapes(fixed, weak)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    ax.plot([r["nodes"] for r in fixed], [r["seconds"] for r in fixed], "o-", label="model")
    ax.plot([r["nodes"] for r in fixed], [r["compute_s"] for r in fixed], ":", label="model: compute")
    ax.plot([r["nodes"] for r in fixed], [r["message_s"] for r in fixed], ":", label="model: messages")
    ax.plot(*zip(*a), "k--", label="paper's text: ~B^-2 to B=90 (shape only)")
    ax.annotate("paper: rises at B=120\n(value not in its text)", xy=(120, a[-1][1]),
                xytext=(0.45, 0.45), textcoords="axes fraction", fontsize=8,
                arrowprops={"arrowstyle": "->"})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes B")
    ax.set_ylabel("seconds for 100 iterations")
    ax.set_title("Fig. 6a: MovieLens-10M, K = 50, fixed data")
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.plot([r["nodes"] for r in weak], [r["seconds"] for r in weak], "o-", label="model")
    ax.plot(*zip(*b), "k--", label="paper's text: 'nearly constant' (shape only)")
    for r in weak:
        ax.annotate(f"{r['ratings'] / 1e6:.0f}M", (r["nodes"], r["seconds"]), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("nodes B (data tiled 1, 2, 4, 8 times per side)")
    ax.set_ylabel("seconds for 10 iterations")
    ax.set_ylim(0, 2 * max(r["seconds"] for r in weak))
    ax.set_title("Fig. 6b: data x64 with nodes x8")
    ax.legend(fontsize=7)
    ax = axes[2]
    ranks = [m["ranks"] for m in measured]
    ax.plot(ranks, [m["seconds_per_iteration"] for m in measured], "o-", label="measured s/iter (with one log-lik. pass)")
    ax.plot(ranks, [m["compute_seconds_per_iteration"] for m in measured], "s:", label="measured compute")
    ax.plot(ranks, [m["model_seconds_per_iteration"] for m in measured], "x--", label="model")
    ax.plot(ranks, [m["model_compute_seconds_per_iteration"] for m in measured], "+:",
            label="model: compute")
    ax.set_xlabel("ranks (2 cores: 4 ranks oversubscribe)")
    ax.set_ylabel("seconds per iteration")
    ax.set_title("this machine: the 2 x 2 tiling (40M)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_memory(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = [r["ratings"] / 1e6 for r in runs]
    axes[0].plot(x, [r["peak_rss_bytes"] / r["coo_bytes"] for r in runs], "o-", label="peak RSS / COO bytes")
    axes[0].axhline(2.0, color="k", ls="--", label="target 2")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("ratings (millions)")
    axes[0].legend()
    axes[1].plot(x, [r["setup_seconds"] / r["epoch_seconds_median"] for r in runs], "o-",
                 label="set-up / epoch")
    axes[1].axhline(2.0, color="k", ls="--", label="target 2")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("ratings (millions)")
    axes[1].legend()
    fig.suptitle("PSGLD, K = 50, 2 threads, B = 2")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ------------------------------------------------------------------ the parent ---------
def run_child(argv, timeout):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-3000:] or f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def pymf_run(args, method, tiles, step_size, epochs):
    argv = [sys.executable, os.path.abspath(__file__), "--child", method, "--tiles", str(tiles),
            "--cache", args.cache, "--rank", str(args.rank), "--blocks", str(args.blocks),
            "--threads", str(args.threads), "--step-size", repr(step_size), "--epochs", str(epochs)]
    return run_child(argv, args.timeout)


def mpi_runs(args, step_size):
    import pymf
    from pymf.nmf.mpi import tile_ratings, write_shards
    from psgld_mpi import mpi_env, mpiexec, run_json
    with __import__("numpy").load(args.cache) as f:
        ratings = pymf.Ratings(f["rows"], f["cols"], f["values"],
                               tuple(int(s) for s in f["shape"]))
    ratings = tile_ratings(ratings, args.mpi_tiles)
    shape, nnz = ratings.shape, ratings.nnz
    out = []
    for P in args.ranks:
        shards = os.path.join(args.scratch, f"shards-{P}", "shard{rank}.npz")
        write_shards(ratings, P, shards, permute=True, seed=0)
        iterations = args.mpi_epochs * P
        run_dir = os.path.join(args.scratch, f"run-{P}")
        shutil.rmtree(run_dir, ignore_errors=True)
        started = time.perf_counter()
        try:
            res = run_json([mpiexec(), "-n", str(P), sys.executable, "-m", "pymf.mpi", "psgld",
                            "--shards", shards, "--rank", str(args.rank), "--permute",
                            "--step-size", repr(step_size), "--samples", str(iterations),
                            "--thin", str(iterations), "--trace-every", str(iterations),
                            "--threads", "1", "--out", run_dir],
                           dict(mpi_env(P), PYTHONPATH=ROOT))
        except RuntimeError as exc:
            res = {"error": str(exc)[-3000:]}
        res.update({"ranks": P, "ratings": nnz, "shape": list(shape), "iterations": iterations,
                    "wall_seconds": time.perf_counter() - started, "uptime": os.getloadavg()})
        out.append(res)
        shutil.rmtree(os.path.dirname(shards), ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--cache", default=DEFAULT_CACHE, help="bench/ratings_10m.py's .npz")
    p.add_argument("--rank", type=int, default=50)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiles", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--step-size", type=float, default=1e-6,
                   help="PSGLD's constant step at 1 tile (divided by tiles^2 on tiled data)")
    p.add_argument("--dsgd-step", type=float, default=1e-4)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--mpi-tiles", type=int, default=2)
    p.add_argument("--mpi-epochs", type=int, default=2)
    p.add_argument("--bandwidth", type=float, default=1.25e9,
                   help="bytes/s of the projected network (default 10 Gbit/s Ethernet)")
    p.add_argument("--latency", type=float, default=50e-6, help="seconds per message")
    p.add_argument("--libmf-venv", default="/tmp/pymf-bench-libmf-venv")
    p.add_argument("--scratch", default="/tmp/pymf-psgld-scale")
    p.add_argument("--skip", nargs="*", default=[], choices=["psgld", "dsgd", "libmf", "mpi"])
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default=os.path.join(ROOT, "results", "psgld_scale"))
    p.add_argument("--child", choices=["psgld", "dsgd"], default=None)
    p.add_argument("--from-json", nargs="+", default=None,
                   help="no runs: the analysis, tables and plots of saved JSONs (merged)")
    args = p.parse_args(argv)
    if args.from_json:
        doc = {"psgld": [], "dsgd": None, "mpi": []}
        for path in args.from_json:
            with open(path) as fh:
                saved = json.load(fh)
            for key, value in saved.items():
                if value not in (None, []) or key not in doc:
                    doc[key] = value
        os.makedirs(args.out, exist_ok=True)
        analyse(doc, args)
        write_json(os.path.join(args.out, "psgld_scale.json"), doc)
        return print_tables(doc)
    if args.child:
        args.method, args.tiles = args.child, args.tiles[0]
        return child_pymf(args)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.scratch, exist_ok=True)
    doc = {"benchmark": "psgld_scale", "cpu_count": os.cpu_count(), "threads": args.threads,
           "K": args.rank, "blocks": args.blocks, "cache": args.cache}
    doc["psgld"] = [] if "psgld" in args.skip else [
        pymf_run(args, "psgld", t, args.step_size / t ** 2, args.epochs) for t in args.tiles]
    doc["dsgd"] = None if "dsgd" in args.skip else pymf_run(args, "dsgd", 1, args.dsgd_step,
                                                            args.epochs)
    if "libmf" not in args.skip:
        python, error = libmf_python(args.libmf_venv)
        if python is None:
            doc["libmf"] = {"error": error}
        else:
            doc["libmf"] = libmf_run(python, args)
            native, error = libmf_native(args.libmf_venv)
            doc["libmf_native"] = {"error": error} if native is None else libmf_run(python, args,
                                                                                      native)
    doc["mpi"] = [] if "mpi" in args.skip else mpi_runs(args, args.step_size / args.mpi_tiles ** 2)
    analyse(doc, args)
    emit(doc, os.path.join(args.out, "psgld_scale.json"))
    print_tables(doc)


def analyse(doc, args):
    """The cost model from the measured ring, its projections and the plots (also on a saved
    JSON: --from-json)."""
    ok = [m for m in doc["mpi"] if "error" not in m]
    if ok and ok[0]["ranks"] == 1:
        # c: the 1-rank compute (one thread) per rating and factor; the ring's iteration at
        # 1 rank is the whole data
        base = ok[0]
        c = base["compute_seconds_per_iteration"] / (base["ratings"] * args.rank)
        J = base["shape"][1]
        for m in ok:
            comp, msg = ring_seconds(m["ranks"], m["ratings"], J, args.rank, c, args.bandwidth,
                                     args.latency)
            m["model_compute_seconds_per_iteration"] = comp
            m["model_message_seconds_per_iteration"] = msg if m["ranks"] > 1 else 0.0
            m["model_seconds_per_iteration"] = comp + m["model_message_seconds_per_iteration"]
            m["measured_over_model"] = m["seconds_per_iteration"] / m["model_seconds_per_iteration"]
            m["compute_over_model"] = (m["compute_seconds_per_iteration"]
                                       / m["model_compute_seconds_per_iteration"])
        fixed, weak = projections(c, args.bandwidth, args.latency)
        doc["cost_model"] = {"seconds_per_rating_factor": c, "bandwidth_bytes_per_s": args.bandwidth,
                             "latency_s": args.latency, "fig6a_fixed_data": fixed,
                             "fig6b_weak": weak, "paper": PAPER,
                             "paper_numbers": "none in the text (Fig. 6 is an image); its stated "
                                              "shapes only"}
        doc["plot_scaling"] = plot(fixed, weak, ok, os.path.join(args.out, "fig6_model.png"))
    runs = [r for r in doc["psgld"] if "error" not in r]
    if runs:
        for r in runs + [doc["dsgd"] or {}]:
            if "peak_rss_bytes" in r:
                r["peak_over_coo"] = r["peak_rss_bytes"] / r["coo_bytes"]
                r["setup_over_epoch"] = r["setup_seconds"] / r["epoch_seconds_median"]
        doc["plot_memory"] = plot_memory(runs, os.path.join(args.out, "memory_setup.png"))


def print_tables(doc):
    rows = []
    for r in doc["psgld"] + ([doc["dsgd"]] if doc.get("dsgd") else []):
        if "error" in r:
            print("error:", r["error"][-500:])
            continue
        rows.append({"method": r["method"], "ratings": r["ratings"], "coo_gb": r["coo_bytes"] / 1e9,
                     "peak_gb": r["peak_rss_bytes"] / 1e9, "ratio": r["peak_over_coo"],
                     "load_s": r["read_seconds"] + r["ratings_seconds"] + r["tile_seconds"],
                     "setup_s": r["setup_seconds"], "epoch_s": r["epoch_seconds_median"],
                     "setup_epochs": r["setup_over_epoch"], "load1": r["uptime"][0]})
    for name in ("libmf", "libmf_native"):
        lib = doc.get(name) or {}
        if "epoch_seconds" in lib:
            rows.append({"method": name, "ratings": 10_000_000,
                         "coo_gb": lib["coo_float32_bytes"] / 1e9,
                         "peak_gb": lib["peak_rss_bytes"] / 1e9,
                         "ratio": lib["peak_rss_bytes"] / lib["coo_float32_bytes"],
                         "setup_s": lib["setup_seconds"], "epoch_s": lib["epoch_seconds"],
                         "load1": lib["uptime"][0]})
        elif lib:
            print(f"{name}:", lib.get("error"))
    table(rows, [("method", "method", "s"), ("ratings", "ratings", "d"), ("COO GB", "coo_gb", ".3f"),
                 ("peak GB", "peak_gb", ".3f"), ("peak/COO", "ratio", ".2f"),
                 ("load s", "load_s", ".2f"), ("setup s", "setup_s", ".2f"),
                 ("epoch s", "epoch_s", ".2f"), ("setup/epoch", "setup_epochs", ".2f"),
                 ("load avg", "load1", ".2f")])
    mpi = [m for m in doc.get("mpi", []) if "error" not in m]
    if mpi:
        print()
        table(mpi, [("ranks", "ranks", "d"), ("s/iter", "seconds_per_iteration", ".4f"),
                    ("compute", "compute_seconds_per_iteration", ".4f"),
                    ("comm", "communicate_seconds_per_iteration", ".4f"),
                    ("bytes/msg", "bytes_sent_per_rank_per_iteration", "d"),
                    ("model s/iter", "model_seconds_per_iteration", ".4f"),
                    ("meas/model", "measured_over_model", ".2f"),
                    ("compute/model", "compute_over_model", ".2f")])
    for m in doc.get("mpi", []):
        if "error" in m:
            print(f"mpi {m['ranks']} ranks: error: {m['error'][-500:]}")
    model = doc.get("cost_model")
    if model:
        print(f"\ncost model: c = {model['seconds_per_rating_factor']:.3e} s per rating and "
              f"factor, {model['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s, "
              f"{model['latency_s'] * 1e6:.0f} us per message")
        table(model["fig6a_fixed_data"], [("nodes", "nodes", "d"), ("seconds", "seconds", ".3f"),
                                          ("compute", "compute_s", ".3f"), ("messages", "message_s", ".3f")])
        table(model["fig6b_weak"], [("nodes", "nodes", "d"), ("ratings", "ratings", "d"),
                                    ("seconds", "seconds", ".3f"), ("compute", "compute_s", ".3f"),
                                    ("messages", "message_s", ".3f")])


if __name__ == "__main__":
    main()
