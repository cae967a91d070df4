#!/usr/bin/env python3
"""SIBM's fit without an interpreter: bench/sibm_large_c.c, a C executable linking the core,
runs the same fit as pymf.fit (the same start, settings and seed, handed over by
pymf.sibm.fitting.prepare_chain) and reports its peak resident memory (VmHWM) against the
matrix's index arrays, and entries per second. What a batch job that links the core holds
for a fit, beside bench/sibm_large.py's Python process (whose interpreter alone is 45 MB).

Steps:
  1. build: compiles the executable from core/src with setup.py's C flags (-std=c99: no
     floating-point contraction, so the same bits as the Python extension) and GSL;
  2. check: on a small matrix, the executable's q after --check-updates updates equals
     pymf.fit's, bit for bit (else the run stops: the large figures would be of another fit);
  3. large: a separate Python process writes the start (index, settings, q0) of the matrix of
     bench/sibm_large.py (--matrix, made by its generate step) to a folder, then the
     executable fits it.

Prints JSON and a table (no PNG: one run, no curve). Needs a C compiler and GSL (as the
build of pymf itself).

    python bench/sibm_large_c.py --matrix results/sibm_large_matrix.npz
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit, json_text  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# setup.py's c_flags less -fPIC (an executable): the same code paths and the same bits
C_FLAGS = ["-std=c99", "-O3", "-fno-math-errno", "-fno-trapping-math", "-fopenmp", "-Wall",
           "-Wno-unknown-pragmas"]


def build(out):
    cc = os.environ.get("CC", "cc")
    gsl = shutil.which("gsl-config")
    gsl_flags = (subprocess.run([gsl, "--cflags", "--libs"], capture_output=True, text=True,
                                check=True).stdout.split() if gsl else ["-lgsl", "-lgslcblas"])
    sources = sorted(glob.glob(os.path.join(ROOT, "core", "src", "*.c")))
    command = [cc, *C_FLAGS, "-I" + os.path.join(ROOT, "core", "include"),
               os.path.join(HERE, "sibm_large_c.c"), *sources, "-o", out, *gsl_flags, "-lm"]
    subprocess.run(command, check=True)


def prepare(X, folder, rank, batch_size, seed, threads):
    """Write what the executable reads: the start pymf.fit would make (prepare_chain)."""
    import pymf
    from pymf.sibm.fitting import prepare_chain
    from pymf.sibm._sibm import SAMPLING
    model = pymf.LogisticMF(rank)
    method = pymf.SIBM(batch_size=batch_size, n_threads=threads)
    chain, settings, draw_seed = prepare_chain(model, X, method, seed)
    q = chain.state(copy=False)
    L, M = X.shape
    numbers = [L, M, X.n_ones, rank, *model.prior(), SAMPLING[settings[0]], *settings[1:]]
    with open(os.path.join(folder, "settings.txt"), "w") as fh:
        fh.write("\n".join(repr(float(v)) for v in numbers) + "\n")
    with open(os.path.join(folder, "seed.txt"), "w") as fh:
        fh.write(f"{draw_seed}\n")
    np.ascontiguousarray(X.row_ptr, np.int64).tofile(os.path.join(folder, "row_ptr.bin"))
    np.ascontiguousarray(X.col_idx, np.int64).tofile(os.path.join(folder, "col_idx.bin"))
    with open(os.path.join(folder, "q0.bin"), "wb") as fh:
        for name in ("u1", "u2", "v1", "v2", "z"):
            np.ascontiguousarray(q[name], np.float64).tofile(fh)


def run_executable(exe, folder, updates, threads):
    done = subprocess.run([exe, folder, str(updates), str(threads or 0)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"sibm_large_c failed: {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_q(folder, L, M, D):
    q = np.fromfile(os.path.join(folder, "q.bin"))
    sizes = [L * D, L * D, M * D, M * D]
    parts = np.split(q, np.cumsum(sizes)[:-1])
    return dict(zip(("u1", "u2", "v1", "v2"), parts))


def check(exe, args):
    """The executable's fit equals pymf.fit's on a small matrix, bit for bit."""
    import pymf
    X = pymf.sibm.make_binary_mf(3000, 2000, args.rank, density=0.01, seed=1)[0]
    X = pymf.sibm.binary.as_binary(X)
    with tempfile.TemporaryDirectory() as folder:
        prepare(X, folder, args.rank, args.check_batch, seed=5, threads=args.threads)
        start = np.fromfile(os.path.join(folder, "q0.bin"))[:X.shape[0] * args.rank]
        run_executable(exe, folder, args.check_updates, args.threads)
        got = read_q(folder, *X.shape, args.rank)
    res = pymf.fit(pymf.LogisticMF(args.rank), X,
                   pymf.SIBM(batch_size=args.check_batch, n_threads=args.threads),
                   n_updates=args.check_updates, seed=5, trace_every=args.check_updates,
                   progress=False)
    natural = res.natural
    same = all(np.array_equal(got[k], np.asarray(natural[k]).ravel()) for k in got)
    moved = not np.array_equal(got["u1"], start)  # a check of a fit that did something
    return {"check_shape": list(X.shape), "check_updates": args.check_updates,
            "check_batch": args.check_batch, "check_bit_identical": bool(same and moved)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--matrix", default="results/sibm_large_matrix.npz",
                        help="bench/sibm_large.py's matrix (its generate step makes it)")
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--check-updates", type=int, default=20)
    parser.add_argument("--check-batch", type=int, default=5000)
    parser.add_argument("--exe", default="results/sibm_large_c")
    parser.add_argument("--work", default="results/sibm_large_c_data",
                        help="folder for the start handed to the executable (~110 MB at 10^7 ones)")
    parser.add_argument("--out", default="results/sibm_large_c")
    parser.add_argument("--step", choices=["all", "prepare"], default="all")
    args = parser.parse_args(argv)
    if args.step == "prepare":  # its own process: the executable's run holds none of this
        import pymf
        archive = np.load(args.matrix)
        X = pymf.sibm.BinaryMatrix(archive["indptr"], archive["indices"], archive["shape"])
        os.makedirs(args.work, exist_ok=True)
        prepare(X, args.work, args.rank, args.batch_size, seed=0, threads=args.threads)
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.exe)), exist_ok=True)
    build(args.exe)
    document = {"rank": args.rank, "updates": args.updates, "batch_size": args.batch_size,
                "cores": os.cpu_count(), "threads": args.threads or os.cpu_count()}
    document.update(check(args.exe, args))
    if not document["check_bit_identical"]:
        print(json_text(document, indent=None))
        raise SystemExit("the executable's fit differs from pymf.fit's: no large run")
    if not os.path.exists(args.matrix):
        raise SystemExit(f"{args.matrix} not found: run bench/sibm_large.py (its generate "
                         "step) first")
    command = [sys.executable, os.path.abspath(__file__), "--step", "prepare", "--matrix",
               args.matrix, "--rank", str(args.rank), "--batch-size", str(args.batch_size),
               "--work", args.work]
    if args.threads:
        command += ["--threads", str(args.threads)]
    subprocess.run(command, check=True)
    document["load_before"] = [round(x, 2) for x in os.getloadavg()]
    document.update(run_executable(args.exe, args.work, args.updates, args.threads))
    document["load_after"] = [round(x, 2) for x in os.getloadavg()]
    document["peak_over_index"] = document["peak_rss_bytes"] / document["index_bytes"]
    emit(document, args.out + ".json")
    for key in ("check_bit_identical", "index_bytes", "q_bytes", "peak_rss_bytes",
                "peak_over_index", "entries_per_s", "fit_seconds", "threads"):
        value = document[key]
        print(f"{key:>22}  {value:.4g}" if isinstance(value, float) else f"{key:>22}  {value}")


if __name__ == "__main__":
    main()
