"""What every family's subcommands share: the help formatter, reading --data, and the
options several subcommands take (--seed, --threads, --out, --no-progress, ...).

pymf.cli builds the parser; the families' command modules (pymf/nmf/cli.py,
pymf/bpmf/cli.py) import this module, which imports no family (only pymf.data,
pymf.datasets and the engine), so neither depends on pymf.cli.
"""
import argparse
import os

import numpy as np

from pymf import datasets
from pymf.data import Ratings


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written (examples keep their lines); every option's help ends with
    its default, except a required option's (it has none)."""

    def _get_help_string(self, action):
        if action.required:
            return action.help
        return super()._get_help_string(action)


DATA_HELP = ("'demo' (the synthetic Poisson-NMF data of the PSGLD paper, --demo-size square), "
             "a .npy matrix, a .npz holding a matrix V or ratings (rows, cols, values, shape), "
             "or a MovieLens ratings file (u.data, ratings.dat, ratings.csv)")


def read_data_file(path):
    """A .npy matrix, a .npz with a matrix V or with ratings (rows, cols, values, shape), or
    a MovieLens ratings file (u.data / ratings.dat / ratings.csv)."""
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
                    return Ratings(archive["rows"], archive["cols"], archive["values"],
                                   shape=tuple(np.atleast_1d(archive["shape"])))
                raise ValueError(f"{path!r} holds neither a matrix V nor ratings (rows, cols, "
                                 "values, shape)")
    except (OSError, EOFError) as exc:
        raise ValueError(f"--data {path!r} cannot be read: {exc}") from None
    return datasets.load_movielens(path)


def load_data(spec, args):
    """--data: 'demo' (the paper's synthetic Poisson-NMF, args.demo_size square, rank
    args.rank, seed args.seed) or a file (read_data_file)."""
    if spec == "demo":
        V, _, _ = datasets.demo(size=args.demo_size, rank=args.rank, seed=args.seed)
        return V
    return read_data_file(spec)


def add_data(parser, default="demo", required=False, help=DATA_HELP):
    """--data (a required one has no default)."""
    if required:
        parser.add_argument("--data", required=True, help=help)
    else:
        parser.add_argument("--data", default=default, help=help)


def add_demo_size(parser):
    parser.add_argument("--demo-size", type=int, default=256,
                        help="rows and columns of the matrix of --data demo")


def add_test_fraction(parser, default, help="fraction of the observed entries held out as a "
                                           "test set (traced as test_rmse); 0: none"):
    parser.add_argument("--test-fraction", type=float, default=default, help=help)


def add_threads(parser, help="OpenMP threads (None: all cores)"):
    parser.add_argument("--threads", type=int, default=None, help=help)


def add_seed(parser, default=0, help="random seed: the same seed gives the same run"):
    parser.add_argument("--seed", type=int, default=default, help=help)


def add_out(parser, default, help="output folder (created if missing)"):
    parser.add_argument("--out", default=default, help=help)


def add_checkpoint(parser):
    parser.add_argument("--checkpoint", action="store_true",
                        help="checkpoint to OUT/checkpoint.npz and resume from it if present")


def add_minibatch_noise(parser, auto_flag, samplers):
    """--minibatch-noise DELTA: AutoStep(minibatch_noise=DELTA) for an automatic step
    (pymf.engine.steps.step_option refuses it with a numeric one)."""
    parser.add_argument("--minibatch-noise", type=float, default=None, metavar="DELTA",
                        help=f"with {auto_flag} auto ({samplers}): also bound the step so "
                             "that the minibatch noise inflates the posterior variance by at "
                             "most 1 + DELTA (e.g. 0.1: calibrated intervals, slower mixing; "
                             "the stable step still runs the burn-in); none: not bounded")


def add_no_progress(parser):
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (it is shown on a terminal unless CI is set)")
