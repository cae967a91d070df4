#!/usr/bin/env python3
"""PSGLD on the GPU (cuda/psgld.cu through pymf.gpu) against the CPU, in the same run.

Poisson-NMF, I = J = 1024, K = 32, B = 32, T = 10,000 (the foundation's benchmark), float64
and float32 on the GPU, float64 with OpenMP on the CPU. Also prints the memory-bandwidth
bound of one iteration: the bytes it must move (the part's V entries once, W and H^T read
and written once, the gradient factors written and read once) over the device's bandwidth
(--bandwidth-gbs, default 3350 GB/s: an H100 SXM's HBM3). Prints JSON and a table. Without a
usable GPU it says why and measures the CPU only.
"""
import argparse
import json
import os
import time

import numpy as np

import pymf
from pymf import _blocks, gpu


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--bandwidth-gbs", type=float, default=3350.0)
    args = parser.parse_args()
    I = J = args.size
    K, B, T = args.rank, args.size // 32, args.samples
    V, _, _ = pymf.datasets.make_tweedie_nmf(I, J, K, seed=0)
    model = pymf.TweedieNMF(K)
    step = pymf.PolynomialDecay(1e-4 * (256 / I) ** 2, 0.51)
    rows = []

    def timed(backend, dtype=np.float64):
        data = _blocks.BlockedData.from_dense(V, B)
        rng = np.random.default_rng(1)
        scale = np.sqrt(V.mean() / K)
        W0 = rng.uniform(0.5, 1.5, (I, K)) * scale
        Ht0 = rng.uniform(0.5, 1.5, (J, K)) * scale
        sampler = pymf.PSGLD(blocks=B, step_size=step, backend=backend)
        if backend == "cuda":
            chain = gpu.CudaPSGLDChain(data, model, sampler, 12345, dtype=dtype)
        else:
            chain = sampler.make_chain(data, model, 12345, 678, 0)
        chain.set_state(W0, Ht0, 0)
        steps = step(np.arange(1, T + 1))
        chain.run(steps[:10])  # warm-up (kernel compilation, caches)
        started = time.perf_counter()
        chain.run(steps[10:])
        if backend == "cuda":
            chain.get_state()  # waits for the device
        seconds = (time.perf_counter() - started) * T / (T - 10)
        return seconds, chain.loglik()

    cpu_seconds, cpu_loglik = timed("cpu")
    rows.append({"backend": "cpu (OpenMP)", "dtype": "float64", "seconds_per_10K": cpu_seconds * 1e4 / T,
                 "loglik": cpu_loglik})
    state = gpu.available()
    for dtype, size in ((np.float64, 8), (np.float32, 4)):
        moved = (I * J / B) * size + 2 * (I + J) * K * size + 2 * (I * J / B) * size
        bound = moved / (args.bandwidth_gbs * 1e9)
        if state is True:
            seconds, loglik = timed("cuda", dtype)
            rows.append({"backend": "cuda", "dtype": np.dtype(dtype).name,
                         "seconds_per_10K": seconds * 1e4 / T, "loglik": loglik,
                         "bytes_per_iteration": int(moved), "bound_seconds_per_iteration": bound,
                         "seconds_per_iteration": seconds / T, "times_the_bound": seconds / T / bound,
                         "speedup_vs_cpu": cpu_seconds / seconds})
        else:
            rows.append({"backend": "cuda", "dtype": np.dtype(dtype).name, "unavailable": state,
                         "bytes_per_iteration": int(moved), "bound_seconds_per_iteration": bound})
    print(json.dumps({"benchmark": "psgld_gpu", "I": I, "J": J, "K": K, "B": B, "T": T,
                      "cpu_count": os.cpu_count(), "loader": gpu.loader(), "results": rows},
                     indent=2))
    print(f"\n{'backend':>14} {'dtype':>8} {'s/10K':>8} {'bound s/it':>11} {'x bound':>8}")
    for r in rows:
        print(f"{r['backend']:>14} {r['dtype']:>8} {r.get('seconds_per_10K', float('nan')):>8.3f} "
              f"{r.get('bound_seconds_per_iteration', float('nan')):>11.2e} {r.get('times_the_bound', float('nan')):>8.1f}")


if __name__ == "__main__":
    main()
