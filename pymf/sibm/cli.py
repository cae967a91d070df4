"""The SIBM family's subcommand, registered in pymf/sibm/__init__.py:

    pymf sibm --data u.data --rank 10 --sampling biased --updates 2000 --out DIR

--data: a MovieLens ratings file (binarised: rated = 1), a .npz holding a scipy.sparse
matrix of ones (scipy.sparse.save_npz), or 'synthetic' (drawn from the model).
"""
import json
import os
import time

from pymf import cliutil
from pymf.datasets import load_movielens
from pymf.engine.api import fit
from pymf.sibm.binary import binarize, holdout, make_binary_mf
from pymf.sibm.models import LogisticMF
from pymf.sibm.samplers import SAMPLINGS, SIBM, BatchVB

SIBM_HELP = "logistic MF of a binary matrix by stochastic VI (SIBM) or batch VB"
DATA_HELP = ("'synthetic' (a --synthetic-size square matrix drawn from the model), a MovieLens "
             "ratings file (u.data, ratings.dat, ratings.csv: rated = 1), or a .npz of a "
             "scipy.sparse matrix of ones (scipy.sparse.save_npz)")


def sibm_arguments(parser):
    cliutil.add_data(parser, default="synthetic", help=DATA_HELP)
    parser.add_argument("--synthetic-size", type=int, default=2000,
                        help="rows and columns of --data synthetic")
    parser.add_argument("--density", type=float, default=0.01,
                        help="expected fraction of ones of --data synthetic")
    parser.add_argument("--rank", type=int, default=10, help="rank D of U and V")
    parser.add_argument("--method", choices=["sibm", "batch"], default="sibm",
                        help="sibm: stochastic natural-gradient VI; batch: batch VB (every "
                             "entry every sweep)")
    parser.add_argument("--sampling", choices=SAMPLINGS, default="biased",
                        help="SIBM's entry sampling strategy")
    parser.add_argument("--batch-size", default="auto",
                        help="SIBM's minibatch: 'auto' or a number of entries")
    parser.add_argument("--theta-delta", type=float, default=100.0,
                        help="the automatic minibatch size's parameter (smaller: larger batches)")
    parser.add_argument("--updates", type=int, default=2000,
                        help="SIBM updates (minibatches), or batch VB sweeps")
    cliutil.add_test_fraction(parser, 0.1, help="fraction of the ones held out, with as many "
                                                 "zeros (traced as test_loglik, test_auc); 0: none")
    cliutil.add_seed(parser)
    cliutil.add_threads(parser)
    cliutil.add_no_progress(parser)
    cliutil.add_out(parser, "pymf-sibm", help="output folder: result.npz and summary.json "
                                               "(and checkpoint.npz)")
    cliutil.add_checkpoint(parser)


def _load(args):
    if args.data == "synthetic":
        X, _, _, _ = make_binary_mf(args.synthetic_size, args.synthetic_size, args.rank,
                                    density=args.density, seed=args.seed)
        return X
    if args.data.endswith((".npz", ".npy")):
        import scipy.sparse as sparse
        if not os.path.exists(args.data):
            raise FileNotFoundError(f"--data {args.data!r}: no such file")
        if args.data.endswith(".npy"):  # was read as a MovieLens file: 'utf-8' codec can't ...
            raise ValueError(f"--data {args.data!r}: pymf sibm reads no .npy file; --data "
                             f"takes {DATA_HELP}")
        cliutil.check_npz(args.data, DATA_HELP)
        try:
            return sparse.load_npz(args.data)
        except (ValueError, OSError) as exc:
            raise ValueError(f"--data {args.data!r} is not a scipy.sparse .npz: {exc}") from None
    return binarize(load_movielens(args.data))


def cmd_sibm(args):
    X = _load(args)
    test = None
    if args.test_fraction > 0:
        X, test = holdout(X, args.test_fraction, seed=args.seed)
    batch_size = args.batch_size if args.batch_size == "auto" else _int(args.batch_size)
    method = BatchVB(n_threads=args.threads) if args.method == "batch" else SIBM(
        sampling=args.sampling, batch_size=batch_size, theta_delta=args.theta_delta,
        n_threads=args.threads)
    model = LogisticMF(args.rank)
    cliutil.prepare_out(args.out)
    checkpoint = os.path.join(args.out, "checkpoint.npz") if args.checkpoint else None
    started = time.perf_counter()
    result = fit(model, X, method, n_updates=args.updates, seed=args.seed, test=test,
                 checkpoint=checkpoint, progress=False if args.no_progress else None)
    path = result.save(os.path.join(args.out, "result.npz"))
    summary = {"result": path, "method": method.params(), "model": model.params(),
               "shape": list(X.shape), "ones": int(X.nnz), "seconds": time.perf_counter() - started,
               "final_elbo": cliutil.last_traced(result.trace, "elbo"),
               "final_batch_size": cliutil.last_traced(result.trace, "batch_size")}
    if test is not None:
        summary["final_test_loglik"] = cliutil.last_traced(result.trace, "test_loglik")
        summary["final_test_auc"] = cliutil.last_traced(result.trace, "test_auc")
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary))
    return 0


def _int(text):
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--batch-size must be 'auto' or an integer, got {text!r}") from None
