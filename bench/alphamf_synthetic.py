"""Alpha-stable MF on synthetic heavy-tailed data: PSGLD against HAMCMC (the HAMCMC paper's
section 4.2 compares HAMCMC, SGLD and Li et al.'s preconditioned SGLD on speech, which is not
available offline), and a Gaussian variance model on the same data.

Data: X from pymf.AlphaStableNMF(K, alpha) itself (pymf.alphamf.make_alpha_stable: GG(1, 1,
2/alpha) factors, 256 x 256, K = 10, alpha = 1.2), so the truth v = W H is known.
Error: the RMSE of log(v_hat / v) over all entries, v_hat the posterior mean of v = W H
over the kept draws of the second half of the run (the scale of each entry is what the
model estimates: X itself has median 0); also traced per kept draw (error of that draw's
v) against iterations and sampling time.
Samplers: pymf.PSGLD (random parts; the Langevin step SGLD takes on a part) and pymf.HAMCMC
(M = 5 as in the paper, lam = 1), each over a grid of constant step sizes (B = 8 parts of
N / 8 entries: the paper's N_Omega = IJ / 10 rounded to the grid); every step is reported
and each sampler's best is the one compared (chosen by the error against the truth, the
same rule for both). The (W, H) drift is tamed (AlphaStableNMF's default); --untamed runs
the plain step.
Gaussian baseline: AlphaStableNMF(alpha = 2) (X ~ N(0, 2 v'), the Gaussian variance model,
exponential priors) with the same samplers; its scale sigma' = v'^(1/2) is compared with the
truth's sigma = v^(1/alpha) by the RMSE of log(sigma_hat / sigma) (and the alpha-stable fits'
on the same footing).

Prints JSON (the best settings) and a table, writes OUT/NAME.json (every setting) and
OUT/NAME.png, OUT being --out (results/) and NAME alphamf_synthetic, with _rN added for
--repeats N > 1 and _untamed for --untamed (alphamf_synthetic_r3_untamed.json). The median
over --repeats seeds of each setting; threads as given (--threads).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, json_text, write_json  # noqa: E402

import pymf  # noqa: E402
from pymf.alphamf import make_alpha_stable  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def sampler_of(kind, step, blocks, threads):
    if kind == "hamcmc":
        return pymf.HAMCMC(memory=5, lam=1.0, step_size=step, blocks=blocks, n_threads=threads)
    return pymf.PSGLD(blocks=blocks, step_size=step, part_order="random", n_threads=threads)


def log_rmse(estimate, truth):
    return float(np.sqrt(np.mean(np.log(estimate / truth) ** 2)))


def one_run(X, truth_v, alpha_fit, alpha_true, kind, step, args, seed):
    K = args.rank
    thin = max(1, args.iterations // 100)
    started = time.perf_counter()
    try:
        res = pymf.sample(pymf.AlphaStableNMF(K, alpha=alpha_fit, tamed=not args.untamed), X,
                          sampler_of(kind, step, args.blocks, args.threads),
                          n_samples=args.iterations, thin=thin, seed=seed, progress=False)
    except pymf.DivergenceError as exc:
        return {"diverged_at": exc.iteration}
    wall = time.perf_counter() - started
    vs = np.einsum("sik,skj->sij", res.W_samples, res.H_samples)
    half = len(vs) // 2
    v_hat = vs[half:].mean(axis=0)
    sigma = truth_v ** (1 / alpha_true)
    out = {"wall_seconds": wall, "sampling_seconds": float(res.trace["time"][-1]),
           "sigma_log_rmse": log_rmse(v_hat ** (1 / alpha_fit), sigma),
           "draw_iterations": [int(i) for i in res.sample_iterations],
           "draw_seconds": [float(t) for t in res.trace["time"][1:]],
           "phi_acceptance": float(res.trace["phi_acceptance"][-1])}
    if alpha_fit == alpha_true:
        out["v_log_rmse"] = log_rmse(v_hat, truth_v)
        out["draw_v_log_rmse"] = [log_rmse(v, truth_v) for v in vs]
    if kind == "hamcmc":
        out["skipped_pairs"] = int(res.trace["skipped_pairs"][-1])
    return out


def median_of(runs, key):
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--alpha", type=float, default=1.2)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--steps", default="1e-5,3e-5,1e-4,3e-4")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-gaussian", action="store_true",
                   help="skip the Gaussian variance model (alpha = 2)")
    p.add_argument("--untamed", action="store_true",
                   help="the plain (untamed) drift, AlphaStableNMF(tamed=False)")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results"))
    args = p.parse_args(argv)
    X, W, H, _ = make_alpha_stable(args.size, args.size, args.rank, alpha=args.alpha, seed=0)
    truth_v = W @ H
    steps = [float(s) for s in args.steps.split(",")]
    results = {"settings": {**vars(args), "load_average": os.getloadavg()}, "runs": []}
    for alpha_fit in (args.alpha,) if args.no_gaussian else (args.alpha, 2.0):
        for kind in ("psgld", "hamcmc"):
            for step in steps:
                runs = [one_run(X, truth_v, alpha_fit, args.alpha, kind, step, args, seed)
                        for seed in range(args.repeats)]
                row = {"model_alpha": alpha_fit, "sampler": kind, "step": step,
                       "diverged": sum("diverged_at" in r for r in runs),
                       "v_log_rmse": median_of(runs, "v_log_rmse"),
                       "v_log_rmse_runs": [r.get("v_log_rmse") for r in runs],
                       "wall_seconds_runs": [r.get("wall_seconds") for r in runs],
                       "sigma_log_rmse": median_of(runs, "sigma_log_rmse"),
                       "wall_seconds": median_of(runs, "wall_seconds"),
                       "phi_acceptance": median_of(runs, "phi_acceptance"),
                       "skipped_pairs": median_of(runs, "skipped_pairs"),
                       "trace": next((r for r in runs if "draw_seconds" in r), None)}
                results["runs"].append(row)
                print(f"alpha={alpha_fit} {kind:6s} eps={step:g}: v log-RMSE "
                      f"{row['v_log_rmse']} (runs {row['v_log_rmse_runs']}), sigma log-RMSE "
                      f"{row['sigma_log_rmse']}, {row['wall_seconds']} s", flush=True)
    best = {}
    for row in results["runs"]:
        key = (row["model_alpha"], row["sampler"])
        if row["sigma_log_rmse"] is not None and (key not in best or row["sigma_log_rmse"]
                                                  < best[key]["sigma_log_rmse"]):
            best[key] = row
    results["best"] = [{k: v for k, v in row.items() if k != "trace"} for row in best.values()]
    results["settings"]["load_average_end"] = os.getloadavg()
    os.makedirs(args.out, exist_ok=True)
    name = "alphamf_synthetic" + ("" if args.repeats == 1 else f"_r{args.repeats}") + \
        ("_untamed" if args.untamed else "")
    write_json(os.path.join(args.out, name + ".json"), results, indent=1)
    print(json_text({"best": results["best"], "settings": results["settings"]}, indent=1))
    print(f"\n{'model':>10} {'sampler':>7} {'step':>8} {'v log-RMSE':>11} {'sigma log-RMSE':>15} "
          f"{'wall s':>7}")
    for row in results["best"]:
        v = "-" if row["v_log_rmse"] is None else f"{row['v_log_rmse']:.3f}"
        print(f"{'alpha=' + str(row['model_alpha']):>10} {row['sampler']:>7} {row['step']:>8g} "
              f"{v:>11} {row['sigma_log_rmse']:>15.3f} {row['wall_seconds']:>7.1f}")
    plot(best, args, os.path.join(args.out, name + ".png"))


def plot(best, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (alpha_fit, kind), row in best.items():
        trace = row["trace"]
        if trace is None or "draw_v_log_rmse" not in trace:
            continue
        label = f"{kind} (eps={row['step']:g})"
        axes[0].plot(trace["draw_iterations"], trace["draw_v_log_rmse"], label=label)
        axes[1].plot(trace["draw_seconds"], trace["draw_v_log_rmse"], label=label)
    for ax, xlabel in zip(axes, ("iteration", "sampling time (s)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("RMSE of log(v_draw / v_true)")
        ax.set_yscale("log")
        ax.legend()
    fig.suptitle(f"alpha-stable MF, {args.size}x{args.size}, K={args.rank}, "
                 f"alpha={args.alpha}, {args.threads} threads")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
