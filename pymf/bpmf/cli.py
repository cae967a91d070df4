"""The BPMF family's subcommand, registered in pymf/bpmf/__init__.py:

    pymf bpmf --data ratings.csv --rank 10 --sampler dsgld --split square --blocks 2 \\
              --samples 2000 --burnin 200 --thin 5 --test-fraction 0.2 --out DIR

bpmf_arguments and bpmf_run_from_args are shared with `python -m pymf.mpi dsgld`
(pymf.bpmf.mpi).
"""
import json
import os
import time

import numpy as np

from pymf import cliutil
from pymf.bpmf.models import BPMF
from pymf.bpmf.samplers import DSGLD, BPMFGibbs
from pymf.data import Ratings
from pymf.engine.api import sample
from pymf.engine.storage import save_npz
from pymf.engine.steps import AnnealedStep, step_option

BPMF_HELP = "Bayesian PMF by DSGLD, SGLD or Gibbs"


def _tau(text):
    """--tau: 'sample' or a number."""
    return text if text == "sample" else float(text)


def _eps0(text):
    """--eps0: a number or 'auto'."""
    return text if text == "auto" else float(text)


def bpmf_arguments(parser):
    """The options of a BPMF run, shared by `pymf bpmf` and `python -m pymf.mpi dsgld`."""
    cliutil.add_data(parser, required=True,
                     help="MovieLens file (u.data, ratings.dat, ratings.csv), .npy matrix, "
                          ".npz with V or with ratings (rows, cols, values, shape), or 'demo' "
                          "(the synthetic matrix of --demo-size)")
    cliutil.add_test_fraction(parser, 0.2)
    parser.add_argument("--split-seed", type=int, default=0,
                        help="random seed of the train/test split")
    parser.add_argument("--rank", type=int, default=10,
                        help="rank D of the user and item factors")
    parser.add_argument("--tau", type=_tau, default="sample",
                        help="precision of the ratings' noise: 'sample' (Gamma(alpha0, beta0) "
                             "prior, drawn with the other precisions) or a fixed number")
    parser.add_argument("--alpha0", type=float, default=1.0,
                        help="shape of the Gamma prior of every precision")
    parser.add_argument("--beta0", type=float, default=1.0,
                        help="rate of the Gamma prior of every precision")
    parser.add_argument("--no-bias", action="store_true",
                        help="no user and item biases a_i, b_j in the model")
    parser.add_argument("--split", choices=["square", "column", "hybrid"], default="square",
                        help="DSGLD block split: square (B x B grid), column (S row stripes) or "
                             "hybrid (P x Q grid)")
    parser.add_argument("--blocks", default="2", help="B (square), S (column) or P,Q (hybrid)")
    parser.add_argument("--chains", type=int, default=None,
                        help="DSGLD chains (None: the number of orthogonal groups, max(P, Q))")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="DSGLD minibatch: ratings per step, drawn from one block (None: "
                             "1000, at most a tenth and at least a hundredth of an average "
                             "block of N / (P Q) ratings)")
    parser.add_argument("--round-length", type=int, default=10,
                        help="DSGLD steps per block between exchanges (one round)")
    parser.add_argument("--eps0", type=_eps0, default="auto",
                        help="DSGLD step size eps_t = eps0 (1 + t/kappa)^-0.51 at round t, or "
                             "'auto': eps0 chosen from the curvature at the start (half the "
                             "stability limit, checked by a pilot), annealed with kappa 1000; "
                             "1e-3 is bench/bpmf_movielens.py's best on MovieLens-100K")
    parser.add_argument("--kappa", type=float, default=1000.0,
                        help="kappa of the annealed step size with a numeric --eps0 ('auto' "
                             "anneals with kappa 1000)")
    cliutil.add_minibatch_noise(parser, "--eps0", "dsgld")
    parser.add_argument("--hyper-every", type=int, default=10,
                        help="DSGLD: Gibbs draw of the precisions every this many rounds "
                             "(0: never)")
    parser.add_argument("--samples", type=int, default=2000,
                        help="rounds (DSGLD, SGLD) or sweeps (Gibbs) after burn-in")
    parser.add_argument("--burnin", type=int, default=200,
                        help="rounds or sweeps run first, not kept (with --burnin-rmse: at most)")
    parser.add_argument("--burnin-rmse", type=float, default=None,
                        help="end burn-in as soon as the mean training RMSE is at or below this "
                             "(None: run all of --burnin)")
    parser.add_argument("--thin", type=int, default=5, help="keep every thin-th sample")
    cliutil.add_seed(parser, help="random seed of the chains")
    parser.add_argument("--no-keep-samples", action="store_true",
                        help="keep only the running means and the traces, not the samples")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="rounds (sweeps) between checkpoints, with --checkpoint (None: a "
                             "tenth of the run)")


def bpmf_run_from_args(args, ratings):
    """(train, test, model, DSGLD sampler) from the shared options."""
    test = None
    if args.test_fraction > 0:
        ratings, test = ratings.split(args.test_fraction, seed=args.split_seed)
    model = BPMF(args.rank, tau=args.tau, alpha0=args.alpha0, beta0=args.beta0,
                 bias=not args.no_bias)
    try:
        blocks = tuple(int(x) for x in args.blocks.split(",")) if args.split == "hybrid" \
            else int(args.blocks)
    except ValueError:
        raise ValueError(f"--blocks must be an integer (or P,Q for --split hybrid), got "
                         f"{args.blocks!r}") from None
    sampler = DSGLD(chains=args.chains, split=args.split, blocks=blocks,
                    n_threads=getattr(args, "threads", None), batch_size=args.batch_size,
                    round_length=args.round_length,
                    step_size=step_option(args.eps0, args.minibatch_noise,
                                          lambda eps0: AnnealedStep(eps0, args.kappa)),
                    hyper_every=args.hyper_every)
    return ratings, test, model, sampler


def bpmf_command_arguments(parser):
    """The options of `pymf bpmf`: the shared ones and those of a local run."""
    bpmf_arguments(parser)
    parser.add_argument("--sampler", choices=["dsgld", "sgld", "gibbs"], default="dsgld",
                        help="dsgld: distributed SGLD (--split, --blocks); sgld: DSGLD with one "
                             "block and one chain, rounds of --round-length steps (pymf.SGLD "
                             "in Python runs rounds of 50: another chain); gibbs: BPMF Gibbs, "
                             "the exact baseline")
    parser.add_argument("--hyperprior", choices=["wishart", "gamma"], default="wishart",
                        help="BPMF Gibbs hyperprior")
    cliutil.add_threads(parser)
    cliutil.add_demo_size(parser)
    cliutil.add_no_progress(parser)
    cliutil.add_out(parser, "pymf-bpmf",
                    help="output folder: result.npz and summary.json (and checkpoint.npz)")
    cliutil.add_checkpoint(parser)


def cmd_bpmf(args):
    """Bayesian PMF: DSGLD (square / column / hybrid split), SGLD or BPMF Gibbs."""
    data = cliutil.load_data(args.data, args)
    ratings = data if isinstance(data, Ratings) else Ratings.from_dense(data)
    if args.sampler == "sgld":
        args.blocks, args.split, args.chains = "1", "square", 1
    ratings, test, model, sampler = bpmf_run_from_args(args, ratings)
    if args.sampler == "gibbs":
        sampler = BPMFGibbs(hyperprior=args.hyperprior, n_threads=args.threads)
    cliutil.prepare_out(args.out)
    checkpoint = os.path.join(args.out, "checkpoint.npz") if args.checkpoint else None
    started = time.perf_counter()
    result = sample(model, ratings, sampler, n_samples=args.samples, burnin=args.burnin,
                    thin=args.thin, seed=args.seed, test=test, burnin_rmse=args.burnin_rmse,
                    keep_samples=not args.no_keep_samples, checkpoint=checkpoint,
                    checkpoint_every=args.checkpoint_every if checkpoint else None,
                    progress=False if args.no_progress else None)
    path = result.save(os.path.join(args.out, "result.npz"))
    # the result's settings: the minibatch and an "auto" step resolved for this data
    summary = {"result": path, "sampler": result.params["sampler"], "model": model.params(),
               "seconds": time.perf_counter() - started,
               "final_test_rmse": (cliutil.last_traced(result.trace, "test_rmse")
                                   if test is not None else None),
               "final_train_rmse": cliutil.last_traced(result.trace, "train_rmse"),
               "kept_samples": result.test_count, "burnin_end": result.burnin_end,
               "interrupted": result.interrupted}
    if "auto_step" in result.params:
        summary["auto_step"] = result.params["auto_step"]
    if getattr(data, "user_ids", None) is not None:
        # a MovieLens file's own ids, in the order of the rows and columns they became:
        # pymf predict --by-id reads them (the result numbers users and items 0, 1, ...)
        summary["ids"] = save_npz(os.path.join(args.out, "ids.npz"),
                                  {"user_ids": np.asarray(data.user_ids),
                                   "item_ids": np.asarray(data.item_ids)})
    if test is not None and result.test_count:
        # the fraction of held-out ratings inside their central posterior predictive intervals
        summary["coverage"] = {str(level): value for level, value in result.coverage(test).items()}
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary))
    return 0
