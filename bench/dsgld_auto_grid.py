#!/usr/bin/env python3
"""Does DSGLD with every default (only the rank given) diverge? A grid of small and mid-sized
synthetic rating matrices drawn from BPMF's own model (ratings 3 + U V^T + N(0, sd^2), U
and V ~ N(0, 0.8^2)), several data and chain seeds each, and what each of the two mends of
2026-11-27 contributes (docs/tuning.md, "A divergence the pilot does not catch"):

  default        the pilot covers up to the whole burn-in where 10^6 minibatch draws pay for
                 it (autostep.pilot_units), and each chain's steps shrink by tau_ref / tau
                 where its sampled tau passes the tau the step was chosen at
                 (ChainsKernel.use_tau_reference)
  pilot only     the longer pilot, steps that keep their size as tau climbs
  shrink only    the 20-round pilot, steps that shrink with tau
  neither        the 20-round pilot, steps that keep their size (pymf before these mends)

A run counts as diverged where pymf.sample raises pymf.DivergenceError (a factor that
became non-finite, or a tau that cannot be drawn because the residuals overflowed). One thread per run. Prints JSON and a table, and
writes OUT/dsgld_auto_grid.png (diverged runs per data set and variant).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit, table  # noqa: E402

import pymf  # noqa: E402
from pymf.bpmf.kernel import ChainsKernel  # noqa: E402
from pymf.engine import autostep  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# (rows, cols, rank, density, noise sd)
SMALL = [(30, 30, 2, 0.3, 0.3), (60, 40, 3, 0.5, 0.3), (100, 80, 3, 0.3, 0.3),
         (100, 80, 3, 0.3, 0.1), (200, 150, 5, 0.2, 0.3), (60, 40, 3, 0.5, 1.0)]
MID = [(300, 200, 5, 0.2, 0.1), (300, 200, 5, 0.2, 0.3), (1000, 500, 10, 0.05, 0.2)]
VARIANTS = ("default", "pilot only", "shrink only", "neither")


def ratings_of(shape, data_seed):
    rows, cols, rank, density, sd = shape
    rng = np.random.default_rng(data_seed)
    U, V = rng.normal(0, 0.8, (rows, rank)), rng.normal(0, 0.8, (cols, rank))
    r, c = np.nonzero(rng.random((rows, cols)) < density)
    values = 3 + (U @ V.T)[r, c] + rng.normal(0, sd, len(r))
    return pymf.Ratings(r, c, values, shape=(rows, cols))


def set_variant(variant, originals):
    """Switch the two mends on or off (module state; originals: the untouched pieces)."""
    autostep.PILOT_DRAWS = originals["PILOT_DRAWS"] if variant in ("default", "pilot only") else 0
    ChainsKernel.use_tau_reference = (originals["use_tau_reference"]
                                      if variant in ("default", "shrink only")
                                      else lambda kernel, reference: None)


def run_grid(shapes, data_seeds, chain_seeds, burnin, n_samples):
    rows = []
    for shape in shapes:
        for data_seed in data_seeds:
            ratings = ratings_of(shape, data_seed)
            for seed in chain_seeds:
                started = time.perf_counter()
                try:
                    res = pymf.sample(pymf.BPMF(shape[2]), ratings, pymf.DSGLD(n_threads=1),
                                      n_samples=n_samples, burnin=burnin, seed=seed,
                                      progress=False)
                    outcome, info = None, res.params["auto_step"]
                except pymf.DivergenceError as exc:
                    outcome, info = str(exc).split(":")[0], {}
                rows.append({"shape": list(shape), "data_seed": data_seed, "seed": seed,
                             "ratings": int(ratings.nnz), "diverged": outcome,
                             "eps0": info.get("eps"), "pilot_units": info.get("pilot_units"),
                             "seconds": time.perf_counter() - started})
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--small-seeds", type=int, default=3, help="data seeds of each small set")
    p.add_argument("--mid-seeds", type=int, default=2, help="data seeds of each mid-sized set")
    p.add_argument("--chain-seeds", type=int, default=4, help="chain seeds (mid-sized: 3)")
    p.add_argument("--skip-mid", action="store_true", help="the small sets only")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results", "dsgld_auto_grid"))
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    originals = {"PILOT_DRAWS": autostep.PILOT_DRAWS,
                 "use_tau_reference": ChainsKernel.use_tau_reference}
    document = {"benchmark": "dsgld_auto_grid", "threads": 1, "variants": {},
                "small": {"burnin": 100, "n_samples": 1000, "shapes": SMALL},
                "mid": {"burnin": 200, "n_samples": 1000, "shapes": MID}}
    summary = []
    try:
        for variant in args.variants:
            set_variant(variant, originals)
            runs = run_grid(SMALL, range(args.small_seeds), range(args.chain_seeds), 100, 1000)
            if not args.skip_mid:
                runs += run_grid(MID, range(args.mid_seeds), range(min(args.chain_seeds, 3)),
                                 200, 1000)
            document["variants"][variant] = runs
            for shape in SMALL + ([] if args.skip_mid else MID):
                mine = [r for r in runs if r["shape"] == list(shape)]
                summary.append({"variant": variant, "data": "%dx%d D%d %.2f sd%.1f" % shape,
                                "ratings": int(np.median([r["ratings"] for r in mine])),
                                "runs": len(mine),
                                "diverged": sum(r["diverged"] is not None for r in mine),
                                "seconds": float(np.median([r["seconds"] for r in mine]))})
    finally:
        set_variant("default", originals)
    document["summary"] = summary
    emit(document, os.path.join(args.out, "dsgld_auto_grid.json"))
    table(summary, [("variant", "variant", "s"), ("data", "data", "s"),
                    ("ratings", "ratings", "d"), ("runs", "runs", "d"),
                    ("diverged", "diverged", "d"), ("median s", "seconds", ".2f")])
    print(plot(summary, args.variants, os.path.join(args.out, "dsgld_auto_grid.png")))


def plot(summary, variants, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    data = list(dict.fromkeys(row["data"] for row in summary))
    fig, ax = plt.subplots(figsize=(11, 4))
    width = 0.8 / len(variants)
    for k, variant in enumerate(variants):
        share = [next((row["diverged"] / row["runs"] for row in summary
                       if row["variant"] == variant and row["data"] == d), 0.0) for d in data]
        bars = ax.bar(np.arange(len(data)) + k * width, share, width, label=variant)
        ax.bar_label(bars, labels=[next((str(row["diverged"]) for row in summary
                                        if row["variant"] == variant and row["data"] == d), "")
                                   for d in data], fontsize=7)
    ax.set_xticks(np.arange(len(data)) + 0.4 - width / 2)
    ax.set_xticklabels(data, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("share of runs that diverged")
    ax.set_title("DSGLD with every default on data from BPMF's own model")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"wrote {path}"


if __name__ == "__main__":
    main()
