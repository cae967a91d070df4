#!/usr/bin/env python3
"""PSGLD on the PSGLD paper's synthetic Poisson-NMF (Fig. 2 set-up), against a dgemm yardstick.

I = J in {256, 512, 1024}, K = 32, B = I / 32, T = 10,000 samples, cyclic parts. For each
size and thread count: the median of --repeats runs of T iterations of the C sampler (no
thinning or tracing inside the timed region), seconds per 1,000 samples, entries x K per
second (the gradient work) and the final log-likelihood.

The yardstick (issue 20): one iteration does three products of I J / B x K multiply-adds
(mu, grad W, grad H), 6 I J K / B flops, plus (I + J) K Gaussian draws. numpy's dgemm
(OpenBLAS), limited to the same number of threads, is timed in the same run on a
1024^3 product; the flop floor is the time dgemm would take for the chain's flops, and
the ratio is the chain's time over that floor (target: <= 3).

Where one iteration's time goes, measured single-threaded in the CPU time of the calling
thread (which runs the C work): the likelihood gradient of one part, the Langevin noise
(Philox + Box-Muller for every entry of W and H, also given in ns per Gaussian) and the
rest of the iteration (the update and mirroring, part choice), which is a one-thread
iteration minus the other two. BLAS is held to one thread outside the dgemm yardstick.

Prints a JSON document (with the load average before and after: the timings are only as
quiet as the machine), then a table, and writes a PNG of the ratios and of the split.
"""
import argparse
import inspect
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import pymf
from pymf import _rng
from pymf.engine.blas import one_blas_thread
from pymf.nmf import _blocks, _sgld, _tweedie

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit  # noqa: E402


def time_run(data, K, W0, Ht0, step, iterations, threads):
    """(wall seconds, CPU seconds of the process, CPU seconds of this thread, final
    log-likelihood) of one run. With one thread the chain runs in the calling thread, so
    its thread time is the chain's alone."""
    chain = _sgld.LangevinChain(data, "psgld", K, 1.0, 1.0, "exponential", 1.0, 1.0, 12345, 678,
                                n_threads=threads)
    chain.set_state(W0, Ht0, 0)
    steps = step(np.arange(1, iterations + 1))
    started, started_cpu = time.perf_counter(), time.process_time()
    started_thread = time.thread_time()
    chain.run(steps)
    return (time.perf_counter() - started, time.process_time() - started_cpu,
            time.thread_time() - started_thread, chain.loglik())


def per_call_cpu(fn, calls, rounds=5):
    """CPU seconds of the calling thread per call of fn (fn's C work runs in it): one call
    to warm up, then the median over `rounds` rounds of `calls` calls. The thread's time,
    not the process's: OpenBLAS's workers busy-wait for a while after a threaded product
    (the data's generation), and the process's CPU time counted their spinning as the
    measured call's, which doubled the noise's figure at I = 256."""
    fn()
    times = []
    for _ in range(rounds):
        started = time.thread_time()
        for _ in range(calls):
            fn()
        times.append((time.thread_time() - started) / calls)
    return statistics.median(times)


def noise_cpu(n_rows, n_cols, K, calls):
    """CPU seconds (per_call_cpu) for the noise of all of W and H, written into arrays
    allocated once as the chain's are (a fresh 0.5 MB array per call would add its page
    faults); a pymf without out= (older builds, compared in the same run) allocates."""
    out_w, out_h = np.empty((n_rows, K)), np.empty((n_cols, K))
    try:
        _rng.noise(1, _rng.STREAM_W, 7, 0, n_rows, K, out=out_w)
        options_w, options_h = {"out": out_w}, {"out": out_h}
    except TypeError:
        options_w = options_h = {}
    return per_call_cpu(lambda: (_rng.noise(1, _rng.STREAM_W, 7, 0, n_rows, K, **options_w),
                                 _rng.noise(1, _rng.STREAM_H, 7, 0, n_cols, K, **options_h)),
                        calls)


def breakdown(data, K, W0, Ht0, n_rows, n_cols, B, step, iterations):
    """Single-thread CPU seconds per iteration (process time: on a shared machine it counts
    only this process's work): one part's gradient, the noise of all of W and H, and the
    rest of a one-thread iteration."""
    noise = noise_cpu(n_rows, n_cols, K, 50)
    # all B parts per call
    gradient = per_call_cpu(lambda: _tweedie.gradient(data, W0, Ht0, 1.0, 1.0, n_threads=1),
                            3) / B
    iteration = statistics.median(
        time_run(data, K, W0, Ht0, step, iterations, 1)[2] for _ in range(3)) / iterations
    return noise, gradient, max(iteration - noise - gradient, 0.0)


DGEMM_SIZE = 1024


def time_dgemm(n, repeats):
    """(GFLOP/s per wall second, per CPU second) of numpy's n^3 dgemm, medians of `repeats`
    products, with whatever BLAS threads the process has. Self-contained: a child process
    runs its source when threadpoolctl is missing."""
    import statistics
    import time

    import numpy as np
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    a @ b
    times, cpu = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        a @ b
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    flops = 2.0 * n ** 3
    return flops / statistics.median(times) / 1e9, flops / statistics.median(cpu) / 1e9


def dgemm_gflops(threads, repeats=7):
    """time_dgemm of a 1024^3 product with numpy's BLAS limited to `threads` threads:
    threadpoolctl when installed, else a child process whose BLAS is told the thread count
    through the environment."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        env = dict(os.environ, **{name: str(threads) for name in (
            "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
        code = inspect.getsource(time_dgemm) + \
            f"\nprint(*time_dgemm({DGEMM_SIZE}, {repeats}))\n"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        wall, cpu = out.split()
        return float(wall), float(cpu)
    with threadpool_limits(limits=threads, user_api="blas"):
        return time_dgemm(DGEMM_SIZE, repeats)


def plot(rows, path):
    """Left: the ratio to the dgemm floor per size and thread count; right: the one-thread
    split of an iteration against the one-thread dgemm floor."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{r['I']}\n{r['threads']} thr" for r in rows]
    left.bar(range(len(rows)), [r["ratio_to_dgemm_floor"] for r in rows], color="tab:blue")
    left.axhline(3.0, color="tab:red", linestyle="--", label="target 3")
    left.set_xticks(range(len(rows)), labels)
    left.set_ylabel("chain time / dgemm time for its flops")
    left.legend()
    sizes = sorted({r["I"] for r in rows})
    one = {r["I"]: r for r in rows}
    bottom = np.zeros(len(sizes))
    for key, name in (("one_thread_gradient_s_per_iter", "gradient"),
                      ("one_thread_noise_s_per_iter", "noise"),
                      ("one_thread_rest_s_per_iter", "update and the rest")):
        values = np.array([one[s][key] * 1e3 for s in sizes])
        right.bar(range(len(sizes)), values, bottom=bottom, label=name)
        bottom += values
    right.plot(range(len(sizes)), [one[s]["one_thread_dgemm_floor_s_per_iter"] * 1e3 for s in sizes],
               "k_", markersize=40, label="dgemm floor (1 thread)")
    right.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    right.set_xlabel("I = J")
    right.set_ylabel("ms per iteration, one thread")
    right.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024],
                        help="I = J of each problem")
    parser.add_argument("--rank", type=int, default=32, help="K")
    parser.add_argument("--samples", type=int, default=10_000, help="iterations T per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per setting (median)")
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}),
                        help="thread counts to run")
    parser.add_argument("--json", default=None, help="also write the JSON here")
    parser.add_argument("--png", default="results/psgld_synthetic.png",
                        help="the plot (empty: none)")
    parser.add_argument("--noise-only", action="store_true",
                        help="only the single-thread noise: ns per Gaussian (CPU time) for "
                             "each size's W and H, median of 5 rounds, with the load average")
    args = parser.parse_args()
    if args.noise_only:
        for size in args.sizes:
            seconds = noise_cpu(size, size, args.rank, max(1, 50 * 1024 // size))
            print(f"I = J = {size}, K = {args.rank}: "
                  f"{seconds / (2 * size * args.rank) * 1e9:.3f} ns per Gaussian (one thread, "
                  f"CPU time), load average {os.getloadavg()[0]:.2f}")
        return

    load_before = os.getloadavg()
    dgemm = {threads: dgemm_gflops(threads) for threads in sorted(set(args.threads) | {1})}
    rows = []
    # One BLAS thread from here on, as in pymf.sample: the data's generation is a threaded
    # product, and OpenBLAS's workers, spinning for a while after it, took CPU from the
    # chain's threads and were counted in the process's CPU time.
    with one_blas_thread():
        for size in args.sizes:
            B = max(1, size // 32)
            V, _, _ = pymf.datasets.make_tweedie_nmf(size, size, args.rank, beta=1.0, seed=0)
            data = _blocks.BlockedData.from_dense(V, B)
            rng = np.random.default_rng(1)
            scale = np.sqrt(V.mean() / args.rank)
            W0 = rng.uniform(0.5, 1.5, (size, args.rank)) * scale
            Ht0 = rng.uniform(0.5, 1.5, (size, args.rank)) * scale
            # stable for this data scale: the curvature grows with I, so a shrinks with it
            step = pymf.PolynomialDecay(1e-4 * (256 / size) ** 2, 0.51)
            noise_s, gradient_s, rest_s = breakdown(data, args.rank, W0, Ht0, size, size, B, step,
                                                    min(args.samples, 1000))
            entries = size * size / B  # one part
            flops = 3 * 2 * entries * args.rank  # mu, grad W, grad H: multiply-adds
            gaussians = 2 * size * args.rank
            for threads in args.threads:
                runs = [time_run(data, args.rank, W0, Ht0, step, args.samples, threads)
                        for _ in range(args.repeats)]
                seconds = statistics.median(r[0] for r in runs)
                cpu_seconds = statistics.median(r[1] for r in runs)
                floor = flops * args.samples / (dgemm[threads][0] * 1e9)
                cpu_floor = flops * args.samples / (dgemm[threads][1] * 1e9)
                rows.append({
                    "I": size, "J": size, "K": args.rank, "B": B, "T": args.samples,
                    "threads": threads, "repeats": args.repeats,
                    "seconds_median": round(seconds, 4),
                    "seconds_all": [round(r[0], 4) for r in runs],
                    "seconds_per_1000_samples": round(seconds / args.samples * 1000, 4),
                    "entries_K_per_second": round(entries * args.rank * args.samples / seconds, 1),
                    "flops_per_iteration": flops,
                    "dgemm_gflops": round(dgemm[threads][0], 2),
                    "dgemm_floor_seconds": round(floor, 4),
                    "ratio_to_dgemm_floor": round(seconds / floor, 3),
                    # the same in CPU seconds (both sides), less sensitive to other processes
                    # on a shared machine (though OpenMP's barrier spinning counts as CPU time)
                    "cpu_seconds_median": round(cpu_seconds, 4),
                    "dgemm_gflops_per_cpu_second": round(dgemm[threads][1], 2),
                    "cpu_ratio_to_dgemm_floor": round(cpu_seconds / cpu_floor, 3),
                    "chain_gflops": round(flops * args.samples / seconds / 1e9, 2),
                    "final_loglik": runs[0][3],
                    "one_thread_gradient_s_per_iter": round(gradient_s, 7),
                    "one_thread_noise_s_per_iter": round(noise_s, 7),
                    "one_thread_rest_s_per_iter": round(rest_s, 7),
                    # CPU seconds, like the split it is drawn against
                    "one_thread_dgemm_floor_s_per_iter": round(flops / (dgemm[1][1] * 1e9), 7),
                    "ns_per_gaussian_per_core": round(noise_s / gaussians * 1e9, 3),
                })
    document = {"benchmark": "psgld_synthetic", "cpu_count": os.cpu_count(),
                "pymf": pymf.__version__, "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
                "dgemm_gflops_by_threads": {str(t): round(g[0], 2) for t, g in dgemm.items()},
                "results": rows}
    emit(document, args.json)
    print()
    header = f"{'I=J':>5} {'B':>3} {'thr':>3} {'s/10K':>8} {'GF/s':>6} {'dgemm':>6} {'ratio':>6} " \
             f"{'cpu ratio':>9} {'grad ms':>8} {'noise ms':>8} {'rest ms':>8} {'ns/gauss':>8} {'loglik':>12}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['I']:>5} {r['B']:>3} {r['threads']:>3} {r['seconds_median'] * 10000 / r['T']:>8.2f} "
              f"{r['chain_gflops']:>6.1f} {r['dgemm_gflops']:>6.1f} {r['ratio_to_dgemm_floor']:>6.2f} "
              f"{r['cpu_ratio_to_dgemm_floor']:>9.2f} "
              f"{r['one_thread_gradient_s_per_iter'] * 1e3:>8.3f} "
              f"{r['one_thread_noise_s_per_iter'] * 1e3:>8.3f} "
              f"{r['one_thread_rest_s_per_iter'] * 1e3:>8.3f} "
              f"{r['ns_per_gaussian_per_core']:>8.2f} {r['final_loglik']:>12.5g}")
    print(f"load average before {load_before}, after {os.getloadavg()}; "
          f"columns grad/noise/rest: one thread, ms per iteration")
    if args.png:
        print(plot(rows, args.png))


if __name__ == "__main__":
    main()
