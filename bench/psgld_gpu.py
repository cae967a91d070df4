#!/usr/bin/env python3
"""PSGLD on the GPU (cuda/psgld.cu through pymf.nmf.gpu) against the CPU, in the same run.

Poisson-NMF, I = J = 1024, K = 32, B = 32, T = 10,000 (the foundation's benchmark): float64
with OpenMP on the CPU; float64 and float32 on the GPU with both strategies of
CudaPSGLDChain ("ring": a chunk of --check-every iterations per launch; "launches": two
kernel launches per iteration). Each figure is the median of --repeats runs.

Also prints the memory-bandwidth bound of one iteration over the device's bandwidth
(--bandwidth-gbs, default 3350 GB/s: an H100 SXM's HBM3) for two byte counts:
  launches: the part's V entries read once, W and H^T read and written once, the gradient
            factors G written and read once;
  ring:     the part's V entries and H^T read and written once (W_b and G stay in shared
            memory; W is read and written once per launch, amortised away).
Prints JSON and a table and writes a PNG (--plot). Without a usable GPU it says why and
measures the CPU only.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit  # noqa: E402

import pymf  # noqa: E402
import pymf.cli  # noqa: E402
from pymf import gpu  # noqa: E402
from pymf.nmf import _blocks  # noqa: E402
from pymf.nmf.gpu import CudaPSGLDChain  # noqa: E402
from pymf.nmf.kernel import make_chain  # noqa: E402

INFO = pymf.cli.info()
THREADS = INFO["openmp_threads"]


def bytes_per_iteration(I, J, K, B, size, strategy):
    part = I * J / B
    if strategy == "ring":
        return part * size + 2 * J * K * size
    return part * size + 2 * (I + J) * K * size + 2 * part * size


def plot(rows, path, title):
    """Two panels: seconds per 10K iterations for every row, and the GPU rows' time over
    their memory-bandwidth bound. Returns the path, or why there is none."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    timed_rows = [r for r in rows if "seconds_per_10K" in r]
    labels = [f"{r['backend']}\n{r['strategy']}\n{r['dtype']}" for r in timed_rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].bar(labels, [r["seconds_per_10K"] for r in timed_rows])
    axes[0].set_yscale("log")
    axes[0].set_ylabel("seconds per 10K iterations (median)")
    gpu_rows = [r for r in timed_rows if "times_the_bound" in r]
    axes[1].bar([f"{r['strategy']}\n{r['dtype']}" for r in gpu_rows],
                [r["times_the_bound"] for r in gpu_rows])
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("GPU time / bandwidth bound")
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=None,
                        help="B (default size / 32: the foundation's 32 at size 1024); the "
                             "ring needs B <= the GPU's multiprocessors")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check-every", type=int, default=1000,
                        help="GPU iterations queued between reads of the divergence flags")
    parser.add_argument("--bandwidth-gbs", type=float, default=3350.0)
    parser.add_argument("--plot", default="results/psgld_gpu.png",
                        help="bar chart of seconds per 10K iterations and of times the bound")
    args = parser.parse_args()
    if args.blocks is not None and not 1 <= args.blocks <= args.size:
        parser.error(f"--blocks must be between 1 and --size ({args.size}), got {args.blocks}")
    I = J = args.size
    K, T = args.rank, args.samples
    B = args.blocks if args.blocks is not None else max(args.size // 32, 1)
    V, _, _ = pymf.datasets.make_tweedie_nmf(I, J, K, seed=0)
    model = pymf.TweedieNMF(K)
    step = pymf.PolynomialDecay(1e-4 * (256 / I) ** 2, 0.51)
    data = _blocks.BlockedData.from_dense(V, B)
    steps = step(np.arange(1, T + 1))
    rng = np.random.default_rng(1)
    scale = np.sqrt(V.mean() / K)
    W0 = rng.uniform(0.5, 1.5, (I, K)) * scale
    Ht0 = rng.uniform(0.5, 1.5, (J, K)) * scale

    def timed(backend, dtype=np.float64, strategy=None):
        """Median seconds for the T iterations over the repeats, and the last run's loglik."""
        sampler = pymf.PSGLD(blocks=B, step_size=step, backend=backend)
        if backend == "cuda":
            chain = CudaPSGLDChain(data, model, sampler, 12345, dtype=dtype,
                                   check_every=args.check_every, strategy=strategy)
        else:
            chain = make_chain(sampler, data, model, 12345, 678, 0)
        seconds = []
        for _ in range(args.repeats):
            chain.set_state(W0, Ht0, 0)
            chain.run(steps[:10])  # warm-up (kernel compilation, caches)
            started = time.perf_counter()
            chain.run(steps[10:])
            if backend == "cuda":
                chain.get_state()  # waits for the device
            seconds.append((time.perf_counter() - started) * T / (T - 10))
        return float(np.median(seconds)), chain.loglik()

    rows = []
    cpu_seconds, cpu_loglik = timed("cpu")
    rows.append({"backend": "cpu", "strategy": f"OpenMP x{THREADS}", "dtype": "float64",
                 "seconds_per_10K": cpu_seconds * 1e4 / T, "loglik": cpu_loglik})
    state = True if gpu.is_available() else gpu.why_unavailable()
    for dtype in (np.float64, np.float32):
        size = np.dtype(dtype).itemsize
        for strategy in ("ring", "launches"):
            moved = bytes_per_iteration(I, J, K, B, size, strategy)
            bound = moved / (args.bandwidth_gbs * 1e9)
            row = {"backend": "cuda", "strategy": strategy, "dtype": np.dtype(dtype).name,
                   "bytes_per_iteration": int(moved), "bound_seconds_per_iteration": bound}
            if state is True:
                try:
                    seconds, loglik = timed("cuda", dtype, strategy)
                except ValueError as exc:  # the ring where its blocks cannot all be resident
                    row["unavailable"] = str(exc)
                    rows.append(row)
                    continue
                row.update(seconds_per_10K=seconds * 1e4 / T, loglik=loglik,
                           seconds_per_iteration=seconds / T, times_the_bound=seconds / T / bound,
                           speedup_vs_cpu=cpu_seconds / seconds)
            else:
                row["unavailable"] = state
            rows.append(row)
    plot_path = plot(rows, args.plot, f"PSGLD, Poisson-NMF {I}x{J}, K={K}, B={B} "
                     f"(CPU: OpenMP x{THREADS}; loader: {gpu.loader()})")
    emit({"benchmark": "psgld_gpu", "plot": plot_path, "I": I, "J": J, "K": K, "B": B, "T": T,
          "repeats": args.repeats, "check_every": args.check_every,
          "cpu_count": os.cpu_count(), "threads": THREADS,
          "loader": gpu.loader(), "kernels": gpu.kernel_origin() or INFO["cuda_kernels"],
          "results": rows})
    nan = float("nan")
    print(f"\n{'backend':>8} {'strategy':>10} {'dtype':>8} {'s/10K':>8} {'bound s/it':>11} "
          f"{'x bound':>8} {'x CPU':>7}")
    for r in rows:
        print(f"{r['backend']:>8} {r['strategy']:>10} {r['dtype']:>8} "
              f"{r.get('seconds_per_10K', nan):>8.3f} {r.get('bound_seconds_per_iteration', nan):>11.2e} "
              f"{r.get('times_the_bound', nan):>8.1f} {r.get('speedup_vs_cpu', nan):>7.1f}")


if __name__ == "__main__":
    main()
