#!/usr/bin/env python3
"""SIBM on a large binary matrix drawn from the model (default 10^5 x 10^5 with about 10^7
ones): peak memory against the matrix's own index arrays, and entries processed per
second.

Two processes, so that neither the generator's temporaries nor the other's imports count:
  1. generate: pymf.sibm.make_binary_mf(...) saved with scipy.sparse.save_npz (--matrix);
  2. fit: read its CSR arrays with np.load (no scipy) into pymf.sibm.BinaryMatrix, record
     the resident memory (VmRSS) after loading, fit SIBM (S-Biased,
     --batch-size, --updates updates; no ELBO trace: the matrix is too large for the exact
     one, the estimate uses 20,000 draws) and record the peak (VmHWM, Linux; reset after
     loading, so that it is the fit's, and the loading's peak is reported beside it).
Reported: the index arrays' bytes (int64 row offsets and columns, what the C core holds),
the interpreter's RSS before any data (Python, numpy with numpy.random, pymf.sibm), the
loading's peak, the fit's peak RSS, that peak over the index bytes with and without the
interpreter, the fit's growth over the RSS after loading, entries per second, the
machine's cores and dgemm rate (same run).

Prints JSON and a table (no PNG: one run, no curve).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from _common import HelpFormatter, emit, reset_peak, status_kib


def generate(args):
    import scipy.sparse as sparse

    import pymf
    started = time.perf_counter()
    X, _, _, z = pymf.sibm.make_binary_mf(args.size, args.size, args.rank, n_ones=args.ones,
                                          scale=2.0, seed=0)
    sparse.save_npz(args.matrix, X)
    print(json.dumps({"generated_seconds": time.perf_counter() - started, "ones": int(X.nnz),
                      "z": z}))


def fit(args):
    # every fit seeds through numpy.random (SeedSequence): its modules, and OpenSSL's
    # libcrypto that it loads through `secrets`, are 7 MB of the interpreter's, not the fit's
    import numpy.random  # noqa: F401
    import pymf
    import pymf.sibm  # noqa: F401  (imported here so that the interpreter's RSS counts it)
    interpreter_kib = status_kib("VmRSS")  # Python, numpy and pymf.sibm, before any data
    # scipy's file read without scipy (np.load; its 14 MB of modules are no part of a fit):
    # the CSR offsets and columns as the int64 arrays the C core points into. The float64
    # data (all ones) is never read.
    archive = np.load(args.matrix)
    if archive["format"].item() not in (b"csr", "csr"):
        raise SystemExit(f"{args.matrix}: a CSR matrix expected, got {archive['format']}")
    X = pymf.sibm.BinaryMatrix(archive["indptr"], archive["indices"], archive["shape"])
    del archive
    loaded_kib = status_kib("VmRSS")
    load_peak_kib = status_kib("VmHWM")  # the file's int32 arrays were alive beside the int64
    # copies while loading: a peak of the loading, not of the fit.
    # Linux resets the high-water mark on writing 5 to clear_refs, so VmHWM below is the fit's
    reset = reset_peak()
    index_bytes = X.row_ptr.nbytes + X.col_idx.nbytes
    method = pymf.SIBM(batch_size=args.batch_size if args.batch_size != "auto" else "auto",
                       n_threads=args.threads)
    started = time.perf_counter()
    res = pymf.fit(pymf.LogisticMF(args.rank), X, method, n_updates=args.updates, seed=0,
                   trace_every=args.updates, progress=False)
    seconds = time.perf_counter() - started
    units = np.diff(np.concatenate([[0], res.trace["iteration"]]))
    entries = float(np.sum(units * res.trace["batch_size"])) if args.batch_size == "auto" \
        else float(args.updates * int(args.batch_size))
    print(json.dumps({"index_bytes": index_bytes, "rss_after_load_bytes": loaded_kib * 1024,
                      "interpreter_rss_bytes": interpreter_kib * 1024,
                      "load_peak_rss_bytes": load_peak_kib * 1024, "peak_reset_after_load": reset,
                      "peak_rss_bytes": status_kib("VmHWM") * 1024,
                      "fit_seconds": res.trace["time"][-1], "wall_seconds": seconds,
                      "entries": entries, "entries_per_s": entries / res.trace["time"][-1],
                      "final_elbo_estimate": float(res.trace["elbo"][-1])}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size", type=int, default=100_000, help="rows = columns")
    parser.add_argument("--ones", type=int, default=10_000_000, help="expected ones")
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--batch-size", default="100000", help="'auto' or a number of draws")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--matrix", default="results/sibm_large_matrix.npz")
    parser.add_argument("--out", default="results/sibm_large")
    parser.add_argument("--step", choices=["all", "generate", "fit"], default="all")
    args = parser.parse_args(argv)
    if args.batch_size != "auto":
        args.batch_size = int(args.batch_size)
    if args.step == "generate":
        return generate(args)
    if args.step == "fit":
        return fit(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    common = [sys.executable, os.path.abspath(__file__), "--size", str(args.size), "--ones",
              str(args.ones), "--rank", str(args.rank), "--updates", str(args.updates),
              "--batch-size", str(args.batch_size), "--matrix", args.matrix]
    if args.threads:
        common += ["--threads", str(args.threads)]
    document = {"size": args.size, "rank": args.rank, "cores": os.cpu_count(),
                "threads": args.threads or os.cpu_count(), "batch_size": args.batch_size,
                "updates": args.updates}
    if not os.path.exists(args.matrix):
        done = subprocess.run(common + ["--step", "generate"], capture_output=True, text=True,
                              check=True)
        document.update(json.loads(done.stdout.strip().splitlines()[-1]))
    # the machine may be shared: its load average (1, 5, 15 min) before and after the fit
    document["load_before"] = [round(x, 2) for x in os.getloadavg()]
    done = subprocess.run(common + ["--step", "fit"], capture_output=True, text=True, check=True)
    document["load_after"] = [round(x, 2) for x in os.getloadavg()]
    document.update(json.loads(done.stdout.strip().splitlines()[-1]))
    a = np.random.default_rng(0).random((1024, 1024))
    best = min(_timed(lambda: a @ a) for _ in range(3))
    document["dgemm_gflops"] = 2 * 1024 ** 3 / best / 1e9
    document["peak_over_index"] = document["peak_rss_bytes"] / document["index_bytes"]
    # the fit's peak without the interpreter's own memory: the index arrays plus what the
    # fit holds (q, the sampling tables, one update's scratch)
    document["peak_less_interpreter_over_index"] = ((document["peak_rss_bytes"]
                                                     - document["interpreter_rss_bytes"])
                                                    / document["index_bytes"])
    document["fit_growth_over_index"] = ((document["peak_rss_bytes"]
                                          - document["rss_after_load_bytes"])
                                         / document["index_bytes"])
    emit(document, args.out + ".json")
    for key in ("index_bytes", "interpreter_rss_bytes", "load_peak_rss_bytes",
                "rss_after_load_bytes", "peak_rss_bytes", "peak_over_index",
                "peak_less_interpreter_over_index", "fit_growth_over_index", "entries_per_s", "fit_seconds"):
        print(f"{key:>24}  {document[key]:.4g}")


def _timed(fn):
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
