"""The NMF family's subcommands, registered in pymf/nmf/__init__.py:

    pymf sample --model tweedie --beta 1 --rank 32 --sampler psgld --blocks 32 \\
                --data demo --samples 10000 --out DIR
    pymf sample --sampler gibbs --data demo --samples 200 --out DIR
    pymf sample --sampler hamcmc --memory 3 --scaled-gamma --lam 1 --prior gaussian --beta 2 \\
                --data ratings.npz --samples 2000 --out DIR
    pymf fit --optimizer dsgd --blocks 8 --epochs 20 --data demo --out DIR
"""
import json
import os
import sys
import time

import numpy as np

from pymf import cliutil
from pymf.data import Ratings
from pymf.engine.api import fit, sample
from pymf.engine.steps import PolynomialDecay, step_option
from pymf.errors import DivergenceError
from pymf.langevin import DSGD, LD, SGD, SGLD
from pymf.nmf.models import TweedieNMF, has_predictive_draws
from pymf.nmf.samplers import PSGLD, Gibbs

SAMPLE_HELP = "sample the posterior of a matrix factorisation"
FIT_HELP = "MAP estimate with SGD or DSGD (optimisation baselines)"


def _model_arguments(parser):
    parser.add_argument("--model", choices=["tweedie"], default="tweedie",
                        help="the model: Tweedie NMF, V ~ Tweedie(mu = W H, phi, "
                             "power 2 - beta)")
    parser.add_argument("--beta", type=float, default=1.0,
                        help="beta of the beta-divergence: 2 Gaussian, 1 Poisson, 0 gamma, "
                             "in (0, 1) compound Poisson")
    parser.add_argument("--phi", type=phi_value, default=1.0,
                        help="dispersion phi, or 'sample' (--beta 2: drawn from its "
                             "inverse-gamma conditional once per pass over the data)")
    parser.add_argument("--rank", type=int, default=32,
                        help="rank K of W (I x K) and H (K x J); also the rank of --data demo")
    parser.add_argument("--prior", choices=["exponential", "gaussian"], default="exponential",
                        help="prior of the entries of W and H: exponential (non-negative) "
                             "or gaussian (real-valued, --beta 2 only)")
    parser.add_argument("--lam-w", type=float, default=1.0,
                        help="prior rate (exponential) or precision (gaussian) of W's entries")
    parser.add_argument("--lam-h", type=float, default=1.0,
                        help="prior rate (exponential) or precision (gaussian) of H's entries")


def _block_arguments(parser, what, part_order="cyclic", part_order_note=""):
    parser.add_argument("--blocks", type=int, default=8,
                        help=f"B: rows and columns are cut into B pieces ({what})")
    parser.add_argument("--part-order", choices=["cyclic", "random"], default=part_order,
                        help="part t runs (t - 1) mod B (cyclic) or a random part, with "
                             "probability its share of the entries" + part_order_note)
    parser.add_argument("--permute", action="store_true",
                        help="shuffle rows/columns before blocking")


def phi_value(text):
    """--phi: 'sample' or a number."""
    return text if text == "sample" else float(text)


def step_value(text):
    """--step: 'auto' or a number."""
    return text if text == "auto" else float(text)


def _step_arguments(parser, default):
    if default == "auto":
        parser.add_argument("--step-size", "--step", type=step_value, default=default,
                            help="constant step size, or 'auto': chosen from the curvature at "
                                 "the start (half the stability limit, checked by a pilot; "
                                 "README, \"Works without tuning\")")
        cliutil.add_minibatch_noise(parser, "--step", "psgld, sgld, ld")
    else:
        parser.add_argument("--step-size", type=float, default=default, help="constant step size")
    parser.add_argument("--step-a", type=float, default=None,
                        help="eps_t = (a/t)^b, overrides --step-size")
    parser.add_argument("--step-b", type=float, default=0.51,
                        help="b of eps_t = (a/t)^b (with --step-a)")


def _data_arguments(parser):
    cliutil.add_data(parser)
    cliutil.add_demo_size(parser)
    cliutil.add_test_fraction(parser, 0.0)


def sample_arguments(parser):
    """The options of `pymf sample`."""
    _model_arguments(parser)
    parser.add_argument("--sampler", choices=["psgld", "sgld", "ld", "gibbs", "hamcmc"],
                        default="psgld",
                        help="psgld: parallel SGLD on a B x B grid; sgld: minibatch SGLD; ld: "
                             "Langevin dynamics on all entries; gibbs: the Poisson-NMF Gibbs "
                             "sampler (beta 1, exponential prior, integer data); hamcmc: "
                             "stochastic quasi-Newton Langevin (L-BFGS of the last 2M samples) "
                             "on PSGLD's B x B grid")
    _block_arguments(parser, "PSGLD, HAMCMC", part_order=None,
                     part_order_note="; None: cyclic, except random for hamcmc (its M "
                                     "interleaved sub-chains would each see only some of the "
                                     "cyclic parts)")
    parser.add_argument("--memory", type=int, default=2,
                        help="HAMCMC: memory M >= 2 (the curvature pairs of the last 2M "
                             "samples)")
    parser.add_argument("--gamma", type=float, default=1.0,
                        help="HAMCMC: H^0 = gamma I (with --scaled-gamma: only in the first 2M "
                             "iterations and while no memory pair is usable)")
    parser.add_argument("--scaled-gamma", action="store_true",
                        help="HAMCMC: H^0 = (s^T y / y^T y) I of the newest memory pair "
                             "(the standard L-BFGS scaling)")
    parser.add_argument("--lam", type=float, default=0.0,
                        help="HAMCMC: y += lam s in the curvature pairs (keeps H positive "
                             "definite where the minibatch curvature is not)")
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cpu",
                        help="PSGLD on the CPU (OpenMP) or on a GPU")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                        help="PSGLD on the GPU: float32 halves the bytes moved (CPU: float64 only)")
    parser.add_argument("--batch-size", type=float, default=1.0 / 32,
                        help="SGLD minibatch: a fraction of the entries (<= 1) or a count")
    _step_arguments(parser, "auto")
    cliutil.add_threads(parser)
    _data_arguments(parser)
    parser.add_argument("--samples", type=int, default=2000,
                        help="iterations (sweeps for gibbs) after burn-in")
    parser.add_argument("--burnin", type=int, default=0,
                        help="iterations run first, not kept")
    parser.add_argument("--thin", type=int, default=10, help="keep every thin-th sample")
    parser.add_argument("--trace-every", type=int, default=None,
                        help="iterations between trace points (None: --thin)")
    cliutil.add_seed(parser, help="random seed of the chain, the demo data and the test split")
    cliutil.add_out(parser, "pymf-out",
                    help="output folder: the samples, summary.json (and checkpoint.npz, "
                         "trace.png)")
    parser.add_argument("--stream", action="store_true",
                        help="write samples to --out as they come")
    cliutil.add_checkpoint(parser)
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="iterations between checkpoints (None: a tenth of the run)")
    parser.add_argument("--plot", action="store_true", help="write OUT/trace.png")
    cliutil.add_no_progress(parser)


def fit_arguments(parser):
    """The options of `pymf fit`."""
    _model_arguments(parser)
    parser.add_argument("--optimizer", choices=["dsgd", "sgd"], default="dsgd",
                        help="dsgd: distributed SGD on a B x B grid; sgd: plain SGD")
    _block_arguments(parser, "DSGD")
    _step_arguments(parser, 1e-3)
    parser.add_argument("--epochs", type=int, default=20,
                        help="passes over the data (DSGD: B iterations each)")
    cliutil.add_threads(parser)
    _data_arguments(parser)
    cliutil.add_seed(parser, help="random seed of the optimiser, the demo data and the "
                                  "test split")
    cliutil.add_out(parser, "pymf-fit",
                    help="output folder: fit.npz and summary.json")
    cliutil.add_no_progress(parser)


def _data_and_model(args):
    """The training data, an optional held-out split (--test-fraction) and the model."""
    data = cliutil.load_data(args.data, args)
    test = None
    if args.test_fraction > 0:
        ratings = data if isinstance(data, Ratings) else Ratings.from_dense(data)
        data, test = ratings.split(args.test_fraction, seed=args.seed)
    model = TweedieNMF(args.rank, beta=args.beta, phi=args.phi, prior=args.prior,
                       lam_w=args.lam_w, lam_h=args.lam_h)
    return data, test, model


# the options only some samplers read: (samplers, the value that means "not given"); one
# given to another sampler was ignored without a word (--backend cuda ran on the CPU)
SAMPLER_OPTIONS = {
    "backend": (("psgld",), "cpu"), "dtype": (("psgld",), "float64"),
    "batch_size": (("sgld",), 1.0 / 32),
    "memory": (("hamcmc",), 2), "gamma": (("hamcmc",), 1.0),
    "scaled_gamma": (("hamcmc",), False), "lam": (("hamcmc",), 0.0),
}


def _check_sampler_options(args):
    for name, (samplers, unset) in SAMPLER_OPTIONS.items():
        if args.sampler not in samplers and getattr(args, name) != unset:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} is an option of --sampler {' and '.join(samplers)}; "
                             f"--sampler {args.sampler} does not take it")


def _make_sampler(args):
    _check_sampler_options(args)
    if args.step_a is not None:
        step = step_option(PolynomialDecay(args.step_a, args.step_b), args.minibatch_noise,
                           lambda schedule: schedule)
    else:
        step = step_option(args.step_size, args.minibatch_noise)
    if args.sampler == "psgld":
        return PSGLD(blocks=args.blocks, step_size=step, part_order=args.part_order or "cyclic",
                     permute=args.permute, n_threads=args.threads, backend=args.backend,
                     dtype=args.dtype)
    if args.sampler == "hamcmc":
        from pymf.hamcmc.samplers import HAMCMC  # pymf.hamcmc imports pymf.nmf
        return HAMCMC(memory=args.memory, gamma=args.gamma, scaled_gamma=args.scaled_gamma,
                      lam=args.lam, step_size=step, blocks=args.blocks,
                      part_order=args.part_order or "random", permute=args.permute,
                      n_threads=args.threads)
    if args.sampler == "sgld":
        if args.batch_size > 1 and args.batch_size != int(args.batch_size):
            raise ValueError(f"--batch-size above 1 is a count of entries and must be whole, "
                             f"got {args.batch_size:g}")
        batch = int(args.batch_size) if args.batch_size > 1 else args.batch_size
        return SGLD(step_size=step, batch_size=batch, n_threads=args.threads)
    if args.sampler == "gibbs":
        return Gibbs(n_threads=args.threads)
    return LD(step_size=step, n_threads=args.threads)


def cmd_sample(args):
    data, test, model = _data_and_model(args)
    sampler = _make_sampler(args)
    cliutil.prepare_out(args.out)
    checkpoint = os.path.join(args.out, "checkpoint.npz") if args.checkpoint else None
    started = time.perf_counter()
    try:
        result = sample(model, data, sampler, n_samples=args.samples, burnin=args.burnin,
                        thin=args.thin, seed=args.seed, test=test,
                        trace_every=args.trace_every,
                        sample_dir=args.out if args.stream else None,
                        checkpoint=checkpoint, checkpoint_every=args.checkpoint_every,
                        progress=None if not args.no_progress else False)
    except DivergenceError as exc:
        if exc.result is not None:
            exc.result.save(args.out)
        print(f"pymf: error: {exc}\n(the samples kept before it are in {args.out})", file=sys.stderr)
        return 2
    wall = time.perf_counter() - started
    result.save(args.out)
    iterations = result.iterations
    # the rate from the last trace point (a run stopped by Ctrl-C ran past it: it printed
    # "9494 iterations in 0.00 s" from the trace point at iteration 0)
    traced_at = cliutil.last_traced(result.trace, "iteration") or 0
    sampling = cliutil.last_traced(result.trace, "time") or 0.0
    sampler_params = sampler.params()
    if hasattr(sampler, "grid_params"):  # HAMCMC: its grid settings are kept apart
        sampler_params.update(sampler.grid_params())
    summary = {
        "model": model.params(), "sampler": sampler_params, "shape": list(np.shape(data)),
        "iterations": iterations, "kept_samples": result.n_kept,
        "sampling_seconds": round(sampling, 4), "wall_seconds": round(wall, 4),
        "samples_per_second": round(traced_at / sampling, 2) if sampling > 0 else None,
        "final_loglik": cliutil.last_traced(result.trace, "loglik"),
        "interrupted": result.interrupted, "out": os.path.abspath(args.out),
    }
    if "test_rmse" in result.trace:
        summary["final_test_rmse"] = cliutil.last_traced(result.trace, "test_rmse")
    if model.sample_phi:
        summary["phi_mean"] = result.noise_variance()  # the posterior mean of the sampled phi
    if "auto_step" in result.params:
        summary["auto_step"] = result.params["auto_step"]
    if test is not None and result.n_kept and has_predictive_draws(model.beta):
        # the fraction of held-out values inside their central posterior predictive intervals
        summary["coverage"] = {str(level): value for level, value in result.coverage(test).items()}
    if args.plot:
        summary["plot"] = _plot_trace(result, os.path.join(args.out, "trace.png"), test)
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary, indent=2))
    loglik = summary["final_loglik"]
    loglik = "(not traced)" if loglik is None else f"{loglik:.6g}"
    if result.interrupted:
        ran = (f"interrupted after {iterations} iterations; at its last trace point (iteration "
               f"{int(traced_at)}, {sampling:.2f} s of sampling) the log-likelihood was {loglik}")
    else:
        ran = (f"{iterations} iterations in {sampling:.2f} s ({summary['samples_per_second']} "
               f"samples/s), final log-likelihood {loglik}")
    print(f"\n{sampler.kind}: {ran}"
          + (f", 90% interval coverage {summary['coverage']['0.9']:.3f}" if "coverage" in summary else "")
          + f"; results in {summary['out']}")
    return 0


def _plot_trace(result, path, test=None):
    """The trace (log-likelihood against time); with a held-out set and kept draws, also
    the held-out values against their posterior mean with 90 % predictive intervals, and
    the calibration curve (nominal against observed coverage)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    with_test = test is not None and result.n_kept > 0 and has_predictive_draws(
        result.params["model"]["beta"])
    fig, axes = plt.subplots(1, 3 if with_test else 1, figsize=(15 if with_test else 6, 4.5))
    ax = axes[0] if with_test else axes
    time_axis = np.maximum(result.trace["time"], 1e-4)
    ax.plot(time_axis, result.trace["loglik"])
    ax.set_xscale("log")
    ax.set_xlabel("sampling time (s)")
    ax.set_ylabel("log-likelihood (up to a constant)")
    ax.set_title(result.params["sampler"]["sampler"])
    if with_test:
        from pymf.engine import calibration
        held, mean, sd, draws = calibration.predictive(result, test)
        lower, upper = calibration.intervals(mean, sd, draws, 0.9)
        inside = (held.values >= lower) & (held.values <= upper)
        show = np.random.default_rng(0).permutation(held.nnz)[:400]
        ax = axes[1]
        for mask, colour, label in ((inside[show], "C0", "inside"), (~inside[show], "C3", "outside")):
            idx = show[mask]
            ax.errorbar(mean[idx], held.values[idx], xerr=[mean[idx] - lower[idx], upper[idx] - mean[idx]],
                        fmt="o", ms=3, color=colour, alpha=0.5, elinewidth=0.6,
                        label=f"{label} its 90 % interval")
        top = float(max(mean[show].max(), held.values[show].max()))
        ax.plot([0, top], [0, top], color="0.5", lw=1)
        ax.set_xlabel("posterior predictive mean (90 % interval)")
        ax.set_ylabel("held-out value")
        ax.set_title(f"held out: 90 % coverage {inside.mean():.3f} ({held.nnz} values)")
        ax.legend(loc="upper left", fontsize=8)
        table = result.calibration(test)
        ax = axes[2]
        ax.plot([0, 1], [0, 1], color="0.5", lw=1, label="ideal")
        ax.plot(table["levels"], table["coverage"], "o-", label="observed")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("nominal coverage")
        ax.set_ylabel("observed coverage")
        ax.set_title("calibration")
        ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cmd_fit(args):
    data, test, model = _data_and_model(args)
    step = PolynomialDecay(args.step_a, args.step_b) if args.step_a is not None else args.step_size
    if args.optimizer == "dsgd":
        optimizer = DSGD(blocks=args.blocks, step_size=step, part_order=args.part_order,
                         permute=args.permute, n_threads=args.threads)
    else:
        optimizer = SGD(step_size=step, n_threads=args.threads)
    try:
        result = fit(model, data, optimizer, n_epochs=args.epochs, seed=args.seed, test=test,
                     progress=None if not args.no_progress else False)
    except DivergenceError as exc:
        print(f"pymf: error: {exc}", file=sys.stderr)
        return 2
    cliutil.prepare_out(args.out)
    result.save(os.path.join(args.out, "fit.npz"))
    summary = {"model": model.params(), "optimizer": optimizer.params(),
               "iterations": result.iterations, "epochs": args.epochs,
               "seconds": round(cliutil.last_traced(result.trace, "time") or 0.0, 4),
               "final_loglik": cliutil.last_traced(result.trace, "loglik"),
               "final_logpost": cliutil.last_traced(result.trace, "logpost"),
               "out": os.path.abspath(args.out)}
    if test is not None:
        summary["final_test_rmse"] = cliutil.last_traced(result.trace, "test_rmse")
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary, indent=2))
    return 0
