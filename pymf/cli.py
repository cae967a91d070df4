"""The pymf command line: `pymf sample`, `pymf fit`, `pymf predict`, `pymf info`.

    pymf sample --model tweedie --beta 1 --rank 32 --sampler psgld --blocks 32 \
                --data demo --samples 10000 --out DIR
    pymf sample --sampler gibbs --data demo --samples 200 --out DIR
    pymf fit --optimizer dsgd --blocks 8 --epochs 20 --data demo --out DIR
    pymf bpmf --data ratings.csv --rank 10 --sampler dsgld --split square --blocks 2 \
              --samples 2000 --burnin 200 --thin 5 --test-fraction 0.2 --out DIR
    pymf predict --result DIR --rows 0 1 --cols 5 7
    pymf info
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np


def _load_data(spec, args):
    """--data: 'demo' (the paper's synthetic Poisson-NMF) or a file (read_data_file)."""
    import pymf
    if spec == "demo":
        V, _, _ = pymf.datasets.demo(size=args.demo_size, rank=args.rank, seed=args.seed)
        return V
    return read_data_file(spec)


def read_data_file(path):
    """A .npy matrix, a .npz with a matrix V or with ratings (rows, cols, values, shape), or
    a MovieLens ratings file (u.data / ratings.dat / ratings.csv)."""
    import pymf
    if not os.path.exists(path):
        raise FileNotFoundError(f"--data {path!r}: no such file (or use --data demo)")
    try:
        if path.endswith(".npy"):
            return np.load(path, allow_pickle=False)
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                if "V" in archive.files:
                    return archive["V"]
                if {"rows", "cols", "values", "shape"} <= set(archive.files):
                    return pymf.Ratings(archive["rows"], archive["cols"], archive["values"],
                                        shape=tuple(np.atleast_1d(archive["shape"])))
                raise ValueError(f"{path!r} holds neither a matrix V nor ratings (rows, cols, "
                                 "values, shape)")
    except (OSError, EOFError) as exc:
        raise ValueError(f"--data {path!r} cannot be read: {exc}") from None
    return pymf.datasets.load_movielens(path)


def _data_and_model(args):
    """The training data, an optional held-out split (--test-fraction) and the model."""
    import pymf
    data = _load_data(args.data, args)
    test = None
    if args.test_fraction > 0:
        ratings = data if isinstance(data, pymf.Ratings) else pymf.Ratings.from_dense(data)
        data, test = ratings.split(args.test_fraction, seed=args.seed)
    model = pymf.TweedieNMF(args.rank, beta=args.beta, phi=args.phi, prior=args.prior,
                            lam_w=args.lam_w, lam_h=args.lam_h)
    return data, test, model


def _make_sampler(args):
    import pymf
    if args.step_a is not None:
        step = pymf.PolynomialDecay(args.step_a, args.step_b)
    else:
        step = args.step_size
    if args.sampler == "psgld":
        return pymf.PSGLD(blocks=args.blocks, step_size=step, part_order=args.part_order,
                          permute=args.permute, n_threads=args.threads, backend=args.backend,
                          dtype=args.dtype)
    if args.sampler == "sgld":
        batch = int(args.batch_size) if args.batch_size > 1 else args.batch_size
        return pymf.SGLD(step_size=step, batch_size=batch, n_threads=args.threads)
    if args.sampler == "gibbs":
        return pymf.Gibbs(n_threads=args.threads)
    return pymf.LD(step_size=step, n_threads=args.threads)


def cmd_sample(args):
    import pymf
    data, test, model = _data_and_model(args)
    sampler = _make_sampler(args)
    os.makedirs(args.out, exist_ok=True)
    checkpoint = os.path.join(args.out, "checkpoint.npz") if args.checkpoint else None
    started = time.perf_counter()
    try:
        result = pymf.sample(model, data, sampler, n_samples=args.samples, burnin=args.burnin,
                             thin=args.thin, seed=args.seed, test=test,
                             trace_every=args.trace_every,
                             sample_dir=args.out if args.stream else None,
                             checkpoint=checkpoint, checkpoint_every=args.checkpoint_every,
                             progress=None if not args.no_progress else False)
    except pymf.DivergenceError as exc:
        if exc.result is not None:
            exc.result.save(args.out)
        print(f"pymf: error: {exc}\n(the samples kept before it are in {args.out})", file=sys.stderr)
        return 2
    wall = time.perf_counter() - started
    result.save(args.out)
    iterations = result.iterations
    sampling = float(result.trace["time"][-1])
    summary = {
        "model": model.params(), "sampler": sampler.params(), "shape": list(np.shape(data)),
        "iterations": iterations, "kept_samples": result.n_kept,
        "sampling_seconds": round(sampling, 4), "wall_seconds": round(wall, 4),
        "samples_per_second": round(iterations / sampling, 2) if sampling > 0 else None,
        "final_loglik": float(result.trace["loglik"][-1]),
        "interrupted": result.interrupted, "out": os.path.abspath(args.out),
    }
    if "test_rmse" in result.trace:
        summary["final_test_rmse"] = float(result.trace["test_rmse"][-1])
    if args.plot:
        summary["plot"] = _plot_trace(result, os.path.join(args.out, "trace.png"))
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary, indent=2))
    print(f"\n{sampler.kind}: {iterations} iterations in {sampling:.2f} s "
          f"({summary['samples_per_second']} samples/s), final log-likelihood "
          f"{summary['final_loglik']:.6g}; results in {summary['out']}")
    return 0


def _plot_trace(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, ax = plt.subplots(figsize=(6, 4))
    time_axis = np.maximum(result.trace["time"], 1e-4)
    ax.plot(time_axis, result.trace["loglik"])
    ax.set_xscale("log")
    ax.set_xlabel("sampling time (s)")
    ax.set_ylabel("log-likelihood (up to a constant)")
    ax.set_title(result.params["sampler"]["sampler"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cmd_fit(args):
    import pymf
    data, test, model = _data_and_model(args)
    step = pymf.PolynomialDecay(args.step_a, args.step_b) if args.step_a is not None else args.step_size
    if args.optimizer == "dsgd":
        optimizer = pymf.DSGD(blocks=args.blocks, step_size=step, part_order=args.part_order,
                              permute=args.permute, n_threads=args.threads)
    else:
        optimizer = pymf.SGD(step_size=step, n_threads=args.threads)
    try:
        result = pymf.fit(model, data, optimizer, n_epochs=args.epochs, seed=args.seed, test=test,
                          progress=None if not args.no_progress else False)
    except pymf.DivergenceError as exc:
        print(f"pymf: error: {exc}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    result.save(os.path.join(args.out, "fit.npz"))
    summary = {"model": model.params(), "optimizer": optimizer.params(),
               "iterations": result.iterations, "epochs": args.epochs,
               "seconds": round(float(result.trace["time"][-1]), 4),
               "final_loglik": float(result.trace["loglik"][-1]),
               "final_logpost": float(result.trace["logpost"][-1]),
               "out": os.path.abspath(args.out)}
    if test is not None:
        summary["final_test_rmse"] = float(result.trace["test_rmse"][-1])
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary, indent=2))
    return 0


def bpmf_arguments(parser):
    """The options of a BPMF run, shared by `pymf bpmf` and `python -m pymf.bpmf.mpi`."""
    parser.add_argument("--data", required=True,
                        help="MovieLens file, .npy matrix, or .npz with V or with ratings "
                             "(rows, cols, values, shape)")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--tau", type=float, default=2.0)
    parser.add_argument("--alpha0", type=float, default=1.0)
    parser.add_argument("--beta0", type=float, default=1.0)
    parser.add_argument("--no-bias", action="store_true")
    parser.add_argument("--split", choices=["square", "column", "hybrid"], default="square")
    parser.add_argument("--blocks", default="2", help="B (square), S (column) or P,Q (hybrid)")
    parser.add_argument("--chains", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--round-length", type=int, default=10)
    parser.add_argument("--eps0", type=float, default=1e-3)
    parser.add_argument("--kappa", type=float, default=1000.0)
    parser.add_argument("--hyper-every", type=int, default=10)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--burnin", type=int, default=200)
    parser.add_argument("--burnin-rmse", type=float, default=None)
    parser.add_argument("--thin", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-keep-samples", action="store_true")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="rounds (sweeps) between checkpoints (default: a tenth of the run)")


def bpmf_run_from_args(args, ratings):
    """(train, test, model, DSGLD sampler) from the shared options."""
    import pymf
    test = None
    if args.test_fraction > 0:
        ratings, test = ratings.split(args.test_fraction, seed=args.split_seed)
    model = pymf.BPMF(args.rank, tau=args.tau, alpha0=args.alpha0, beta0=args.beta0,
                      bias=not args.no_bias)
    try:
        blocks = tuple(int(x) for x in args.blocks.split(",")) if args.split == "hybrid" \
            else int(args.blocks)
    except ValueError:
        raise ValueError(f"--blocks must be an integer (or P,Q for --split hybrid), got "
                         f"{args.blocks!r}") from None
    sampler = pymf.DSGLD(chains=args.chains, split=args.split, blocks=blocks,
                         n_threads=getattr(args, "threads", None), batch_size=args.batch_size,
                         round_length=args.round_length,
                         step_size=pymf.AnnealedStep(args.eps0, args.kappa),
                         hyper_every=args.hyper_every)
    return ratings, test, model, sampler


def cmd_bpmf(args):
    """Bayesian PMF: DSGLD (square / column / hybrid split), SGLD or BPMF Gibbs."""
    import pymf
    data = _load_data(args.data, args)
    ratings = data if isinstance(data, pymf.Ratings) else pymf.Ratings.from_dense(data)
    if args.sampler == "sgld":
        args.blocks, args.split, args.chains = "1", "square", 1
    ratings, test, model, sampler = bpmf_run_from_args(args, ratings)
    if args.sampler == "gibbs":
        sampler = pymf.BPMFGibbs(hyperprior=args.hyperprior, n_threads=args.threads)
    os.makedirs(args.out, exist_ok=True)
    checkpoint = os.path.join(args.out, "checkpoint.npz") if args.checkpoint else None
    started = time.perf_counter()
    result = pymf.sample(model, ratings, sampler, n_samples=args.samples, burnin=args.burnin,
                         thin=args.thin, seed=args.seed, test=test, burnin_rmse=args.burnin_rmse,
                         keep_samples=not args.no_keep_samples, checkpoint=checkpoint,
                         checkpoint_every=args.checkpoint_every if checkpoint else None,
                         progress=False if args.no_progress else None)
    path = result.save(os.path.join(args.out, "result.npz"))
    summary = {"result": path, "sampler": sampler.params(), "model": model.params(),
               "seconds": time.perf_counter() - started,
               "final_test_rmse": float(result.trace["test_rmse"][-1]) if test is not None else None,
               "final_train_rmse": float(result.trace["train_rmse"][-1]),
               "kept_samples": result.test_count, "burnin_end": result.burnin_end}
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary))
    return 0


def cmd_predict(args):
    import pymf
    result = pymf.load(args.result, mmap=True)
    if len(args.rows) != len(args.cols):
        raise SystemExit("pymf: error: --rows and --cols need the same number of values")
    mean, std = result.predict(args.rows, args.cols, return_std=True)
    for r, c, m, s in zip(args.rows, args.cols, mean, std):
        print(f"{r}\t{c}\t{m:.6g}\t{s:.6g}")
    return 0


def info():
    """Build and environment facts, as a dict."""
    import pymf
    from pymf import _core_info, gpu, mpi
    gpu_reason = gpu.why_unavailable()
    mpi_reason = mpi.why_unavailable()
    return {
        "pymf": pymf.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "openmp": bool(_core_info.openmp_enabled()),
        "openmp_threads": _core_info.default_threads(),
        "gsl": _core_info.gsl_version(),
        "cuda": f"usable through {gpu.loader()}" if gpu_reason is None else f"unusable: {gpu_reason}",
        "cuda_kernels": ("prebuilt fatbin (sm_80, sm_90, PTX for later GPUs), used where the "
                         "driver loads it, else compiled at first use" if gpu.prebuilt_fatbin()
                         else "compiled from cuda/psgld.cu at first use (needs nvcc)"),
        "mpi": f"usable: {mpi.library_version()}" if mpi_reason is None else f"unusable: {mpi_reason}",
        "mpi_hint": "mpi4py uses the MPI it was built against; for a cluster's own MPI: "
                    "pip install --no-binary mpi4py mpi4py (with that MPI's mpicc on PATH)",
    }


def cmd_info(args):
    facts = info()
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        for key, value in facts.items():
            print(f"{key:16s} {value}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="pymf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sample", help="sample the posterior of a matrix factorisation")
    s.add_argument("--model", choices=["tweedie"], default="tweedie")
    s.add_argument("--beta", type=float, default=1.0)
    s.add_argument("--phi", type=float, default=1.0)
    s.add_argument("--rank", type=int, default=32)
    s.add_argument("--prior", choices=["exponential", "gaussian"], default="exponential")
    s.add_argument("--lam-w", type=float, default=1.0)
    s.add_argument("--lam-h", type=float, default=1.0)
    s.add_argument("--sampler", choices=["psgld", "sgld", "ld", "gibbs"], default="psgld")
    s.add_argument("--blocks", type=int, default=8)
    s.add_argument("--part-order", choices=["cyclic", "random"], default="cyclic")
    s.add_argument("--permute", action="store_true", help="shuffle rows/columns before blocking")
    s.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    s.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                   help="PSGLD on the GPU: float32 halves the bytes moved (CPU: float64 only)")
    s.add_argument("--batch-size", type=float, default=1.0 / 32,
                   help="SGLD minibatch: a fraction of the entries (<= 1) or a count")
    s.add_argument("--step-size", type=float, default=1e-4, help="constant step size")
    s.add_argument("--step-a", type=float, default=None, help="eps_t = (a/t)^b, overrides --step-size")
    s.add_argument("--step-b", type=float, default=0.51)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--data", default="demo",
                   help="'demo', a .npy matrix, a .npz holding V, or a MovieLens ratings file")
    s.add_argument("--demo-size", type=int, default=256)
    s.add_argument("--test-fraction", type=float, default=0.0)
    s.add_argument("--samples", type=int, default=2000)
    s.add_argument("--burnin", type=int, default=0)
    s.add_argument("--thin", type=int, default=10)
    s.add_argument("--trace-every", type=int, default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", default="pymf-out")
    s.add_argument("--stream", action="store_true", help="write samples to --out as they come")
    s.add_argument("--checkpoint", action="store_true",
                   help="checkpoint to OUT/checkpoint.npz and resume from it if present")
    s.add_argument("--checkpoint-every", type=int, default=None,
                   help="iterations between checkpoints (default: a tenth of the run)")
    s.add_argument("--plot", action="store_true", help="write OUT/trace.png")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_sample)

    f = sub.add_parser("fit", help="MAP estimate with SGD or DSGD (optimisation baselines)")
    f.add_argument("--model", choices=["tweedie"], default="tweedie")
    f.add_argument("--beta", type=float, default=1.0)
    f.add_argument("--phi", type=float, default=1.0)
    f.add_argument("--rank", type=int, default=32)
    f.add_argument("--prior", choices=["exponential", "gaussian"], default="exponential")
    f.add_argument("--lam-w", type=float, default=1.0)
    f.add_argument("--lam-h", type=float, default=1.0)
    f.add_argument("--optimizer", choices=["dsgd", "sgd"], default="dsgd")
    f.add_argument("--blocks", type=int, default=8)
    f.add_argument("--part-order", choices=["cyclic", "random"], default="cyclic")
    f.add_argument("--permute", action="store_true")
    f.add_argument("--step-size", type=float, default=1e-3)
    f.add_argument("--step-a", type=float, default=None)
    f.add_argument("--step-b", type=float, default=0.51)
    f.add_argument("--epochs", type=int, default=20)
    f.add_argument("--threads", type=int, default=None)
    f.add_argument("--data", default="demo")
    f.add_argument("--demo-size", type=int, default=256)
    f.add_argument("--test-fraction", type=float, default=0.0)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--out", default="pymf-fit")
    f.add_argument("--no-progress", action="store_true")
    f.set_defaults(func=cmd_fit)

    p = sub.add_parser("predict", help="posterior mean and sd of (W H)_ij from a saved result")
    b = sub.add_parser("bpmf", help="Bayesian PMF by DSGLD, SGLD or Gibbs")
    bpmf_arguments(b)
    b.add_argument("--sampler", choices=["dsgld", "sgld", "gibbs"], default="dsgld")
    b.add_argument("--hyperprior", choices=["wishart", "gamma"], default="wishart",
                   help="BPMF Gibbs hyperprior")
    b.add_argument("--threads", type=int, default=None)
    b.add_argument("--demo-size", type=int, default=256)
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--out", default="pymf-bpmf", help="output folder")
    b.add_argument("--checkpoint", action="store_true",
                   help="checkpoint to OUT/checkpoint.npz and resume from it if present")
    b.set_defaults(func=cmd_bpmf)

    p.add_argument("--result", required=True)
    p.add_argument("--rows", type=int, nargs="+", required=True)
    p.add_argument("--cols", type=int, nargs="+", required=True)
    p.set_defaults(func=cmd_predict)

    i = sub.add_parser("info", help="build facts: version, OpenMP, GSL, CUDA, MPI")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_info)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    fraction = getattr(args, "test_fraction", 0.0)
    if not 0.0 <= fraction < 1.0:
        print(f"pymf: error: --test-fraction must be in [0, 1), got {fraction}", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
            IsADirectoryError, PermissionError) as exc:
        print(f"pymf: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
