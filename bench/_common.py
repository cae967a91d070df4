"""Shared helpers of the benchmark scripts: run a sampler with the paper's step size and a
stable fallback, medians, JSON + table output and log-time plots, and the --help layout."""
import argparse
import copy
import json
import math
import os
import statistics
import sys
import time

import numpy as np

import pymf


MOVIELENS_100K = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                              "data", "ml-100k.data")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help of every script: the whole module docstring with its own line breaks (it is laid
    out by hand: lists, indented commands), and each option's default after its help."""

    @staticmethod
    def _says_nothing(action):
        # None ("not given": the help says what happens then) and a flag's False
        return action.default is None or action.default is False

    def _get_help_string(self, action):
        # a help that already gives its default, "(default ...", keeps its own words
        if self._says_nothing(action) or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)

    def _format_action(self, action):
        # argparse shows a default only beside a help text: an option without one shows it alone
        if action.help is None and action.option_strings and not self._says_nothing(action) \
                and action.default is not argparse.SUPPRESS:
            action = copy.copy(action)
            action.help = "default: %(default)s"
        return super()._format_action(action)


def add_movielens_options(parser, dev=False):
    """--data and --split-seed (and, dev=True, --dev-seed) of movielens_split."""
    parser.add_argument("--data", default=MOVIELENS_100K, help="MovieLens-100K's ratings file")
    parser.add_argument("--split-seed", type=int, default=0,
                        help="seed of the 80/20 train/test split")
    if dev:
        parser.add_argument("--dev-seed", type=int, default=1,
                            help="seed of the 90/10 split of the training part (development)")


def movielens_split(args, dev=False):
    """MovieLens-100K (args.data, read from ../shared and never copied into the repository)
    split 80/20 with seed args.split_seed, as bench/defaults.py measures it: (train, test).
    dev=True: the 80 % part split again 90/10 with seed args.dev_seed, (dev_train, dev_val),
    for searches on the developers' own split; the test part is then never used. Exits with
    a message where the file is absent."""
    if not os.path.exists(args.data):
        sys.exit(f"MovieLens-100K not found at {args.data} (pass --data)")
    train, test = pymf.datasets.load_movielens(args.data).split(0.2, seed=args.split_seed)
    return train.split(0.1, seed=args.dev_seed) if dev else (train, test)


class Unstable(Exception):
    """A chain that stays finite but runs away: its log-likelihood falls far below the start."""


def initial_loglik(model, V, seed):
    """The log-likelihood of the starting point every run with this seed shares."""
    res = pymf.sample(model, V, pymf.PSGLD(blocks=1, step_size=1e-12), n_samples=1, seed=seed,
                      progress=False)
    return float(res.trace["loglik"][0])


def run_sampler(model, V, make_sampler, steps, n_samples, seed=0, trace_points=50):
    """Run make_sampler(step) for each step in `steps` until one is stable.

    Unstable: a non-finite value (pymf.DivergenceError), or a log-likelihood that falls to
    ten times the starting one, or ends below the starting one (a finite run-away). Returns
    a dict: the step used, the rejected steps with the reason, wall seconds, sampling
    seconds, and the trace (time, loglik)."""
    start = initial_loglik(model, V, seed)
    rejected = []

    def watch(info):
        if info["loglik"] < 10 * start:
            raise Unstable(f"log-likelihood {info['loglik']:.4g} at iteration {info['iteration']}")

    for step in steps:
        sampler = make_sampler(step)
        trace_every = max(1, n_samples // trace_points)
        started = time.perf_counter()
        try:
            res = pymf.sample(model, V, sampler, n_samples=n_samples, thin=n_samples,
                              trace_every=trace_every, seed=seed, progress=False, callback=watch)
        except pymf.DivergenceError as exc:
            rejected.append({"step": repr(step), "reason": f"diverged at iteration {exc.iteration}"})
            continue
        except Unstable as exc:
            rejected.append({"step": repr(step), "reason": f"ran away: {exc}"})
            continue
        wall = time.perf_counter() - started
        if res.trace["loglik"][-1] < start:
            rejected.append({"step": repr(step), "reason": f"ended below the start "
                             f"({res.trace['loglik'][-1]:.4g} < {start:.4g})"})
            continue
        return {"step": repr(step), "diverged_steps": rejected, "samples": n_samples,
                "wall_seconds": round(wall, 4),
                "sampling_seconds": round(float(res.trace["time"][-1]), 4),
                "seconds_per_sample": float(res.trace["time"][-1]) / n_samples,
                "initial_loglik": start, "final_loglik": float(res.trace["loglik"][-1]),
                "trace_time": res.trace["time"].tolist(), "trace_loglik": res.trace["loglik"].tolist()}
    return {"step": None, "diverged_steps": rejected, "samples": n_samples}


def status_kib(field):
    """A field of /proc/self/status in KiB (VmRSS: resident now, VmHWM: its peak); -1 where
    the system has none (not Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def reset_peak():
    """Linux resets VmHWM to the resident memory now on writing 5 to clear_refs; False where it
    cannot (then VmHWM stays the process's peak)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times


def median_time_to_level(times):
    """(median, runs reaching) of the runs' times to reach a level, where a run that never
    reaches it (None or inf) counts as +inf: the median is finite when at least half the runs
    reach the level. With an even number of runs of which exactly half reach it, the middle
    pair is (t, inf): the lower of the two, t, is given (the slowest run that reaches it),
    rather than their mean, inf."""
    times = [math.inf if t is None else float(t) for t in times]
    if not times:
        return math.inf, 0
    median = statistics.median(times)
    if not math.isfinite(median):
        median = statistics.median_low(times)
    return median, sum(math.isfinite(t) for t in times)


def ensure_parent(path):
    """Create the folder that will hold the file at path (an output option may name a folder
    that does not exist yet: better than failing after the whole run); returns path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return path


def finite_or_none(value):
    """value with every non-finite float (inf, nan) in it, at any depth, replaced by None:
    JSON has no Infinity or NaN (strict parsers, JavaScript's among them, reject the file),
    and null reads as "not reached" / "not measured"."""
    if isinstance(value, float):  # NumPy's float64 included (a subclass)
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def json_text(document, indent=2):
    """Standard JSON of document (non-finite floats as null; allow_nan=False fails on any
    left rather than writing Infinity or NaN)."""
    return json.dumps(finite_or_none(document), indent=indent, allow_nan=False)


def write_json(path, document, indent=2):
    """Write json_text(document) to path (its folder created); returns the text."""
    text = json_text(document, indent)
    with open(ensure_parent(path), "w") as fh:
        fh.write(text)
    return text


def emit(document, path=None, indent=2):
    """Print document as JSON, and write it to path when one is given."""
    print(write_json(path, document, indent) if path else json_text(document, indent))


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


def plot_traces(panels, path, title, ylabel="log-likelihood"):
    """panels: list of (panel title, {method: (times, values)}); log time axis (Fig. 2)."""
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
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(ensure_parent(path), dpi=100)
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
