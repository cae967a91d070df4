"""Shared helpers of the benchmark scripts: run a sampler with the paper's step size and a
stable fallback, medians, JSON + table output and log-time plots."""
import json
import os
import statistics
import time

import numpy as np

import pymf


def run_sampler(model, V, make_sampler, steps, n_samples, seed=0, trace_points=50):
    """Run make_sampler(step) for each step in `steps` until one does not diverge.

    Returns a dict: the step used, the steps that diverged (with the iteration), wall
    seconds, sampling seconds, and the trace (time, loglik)."""
    diverged = []
    for step in steps:
        sampler = make_sampler(step)
        trace_every = max(1, n_samples // trace_points)
        started = time.perf_counter()
        try:
            res = pymf.sample(model, V, sampler, n_samples=n_samples, thin=n_samples,
                              trace_every=trace_every, seed=seed, progress=False)
        except pymf.DivergenceError as exc:
            diverged.append({"step": repr(step), "iteration": exc.iteration})
            continue
        wall = time.perf_counter() - started
        return {"step": repr(step), "diverged_steps": diverged, "samples": n_samples,
                "wall_seconds": round(wall, 4),
                "sampling_seconds": round(float(res.trace["time"][-1]), 4),
                "seconds_per_sample": float(res.trace["time"][-1]) / n_samples,
                "final_loglik": float(res.trace["loglik"][-1]),
                "trace_time": res.trace["time"].tolist(), "trace_loglik": res.trace["loglik"].tolist()}
    return {"step": None, "diverged_steps": diverged, "samples": n_samples}


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times


def emit(document, path=None):
    text = json.dumps(document, indent=2)
    print(text)
    if path:
        with open(path, "w") as fh:
            fh.write(text)


def table(rows, columns):
    """Print rows (dicts) as a fixed-width table; columns: (header, key, format)."""
    widths = [max(len(h), 12) for h, _, _ in columns]
    print("  ".join(h.rjust(w) for (h, _, _), w in zip(columns, widths)))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for row in rows:
        cells = []
        for (h, key, fmt), w in zip(columns, widths):
            value = row.get(key)
            cells.append(("-" if value is None else format(value, fmt)).rjust(w))
        print("  ".join(cells))


def plot_traces(panels, path, title):
    """panels: list of (panel title, {method: (times, logliks)}); log time axis (Fig. 2)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (panel_title, methods) in zip(axes[0], panels):
        for name, (times, logliks) in methods.items():
            times = np.maximum(np.asarray(times, float), 1e-4)
            ax.plot(times[1:], np.asarray(logliks)[1:], label=name)
        ax.set_xscale("log")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("log-likelihood")
        ax.set_title(panel_title)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def ladder(first, lowest=1e-9):
    """The paper's step first, then ten times smaller ones: the first that does not diverge
    is used ("we tried several values and report the best performing ones")."""
    values = [first]
    while values[-1] / 10 >= lowest:
        values.append(values[-1] / 10)
    return values


def paper_methods(model, V, n_blocks, samples, gibbs_sweeps=None):
    """LD, SGLD and PSGLD (and Gibbs when gibbs_sweeps is given) with the paper's settings:
    LD eps = 0.2, SGLD (1/t)^0.51 with |Omega| = N/32, PSGLD (0.01/t)^0.51, cyclic parts."""
    runs = {
        "LD": run_sampler(model, V, lambda s: pymf.LD(step_size=s), ladder(0.2), samples),
        "SGLD": run_sampler(model, V, lambda a: pymf.SGLD(step_size=pymf.PolynomialDecay(a, 0.51),
                                                          batch_size=1 / 32), ladder(1.0), samples),
        "PSGLD": run_sampler(model, V, lambda a: pymf.PSGLD(blocks=n_blocks,
                                                            step_size=pymf.PolynomialDecay(a, 0.51)),
                             ladder(0.01), samples),
    }
    if gibbs_sweeps:
        runs["Gibbs"] = run_sampler(model, V, lambda s: pymf.Gibbs(), [None], gibbs_sweeps)
    return runs
