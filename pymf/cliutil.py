"""What every family's subcommands share: the help formatter, reading --data, and the
options several subcommands take (--seed, --threads, --out, --no-progress, ...).

pymf.cli builds the parser; the families' command modules (pymf/nmf/cli.py,
pymf/bpmf/cli.py) import this module, which imports no family (only pymf.data,
pymf.datasets and the engine), so neither depends on pymf.cli.
"""
import argparse
import os
import zipfile

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


def last_traced(trace, key):
    """A trace column's last value as a float; None where the run has no such point (a run
    stopped by Ctrl-C before its first trace point, or a column this run does not trace).
    The summaries read it instead of trace[key][-1], which failed there after the result
    had been saved (KeyError, IndexError)."""
    values = trace.get(key, ())
    return float(values[-1]) if len(values) else None


NPY_MAGIC = b"\x93NUMPY"  # how every .npy file begins (numpy.lib.format)


def _not_numpy(path, what, accepted, option):
    return ValueError(f"{option} {path!r} {what}; {option} takes {accepted}")


def read_npy(path, accepted=DATA_HELP, option="--data"):
    """The array of a .npy file; a file that is not one is a ValueError naming it, what is
    wrong and the formats `accepted`. numpy's own messages named neither: random bytes or a
    text file named .npy were 'This file contains pickled (object) data. If you trust the
    file you can load it unsafely using the `allow_pickle=` keyword argument'."""
    with open(path, "rb") as fh:
        head = fh.read(len(NPY_MAGIC))
    if not head:
        raise _not_numpy(path, "is empty, not a NumPy .npy file", accepted, option)
    if head.startswith(b"PK"):
        raise _not_numpy(path, "is a zip archive (a NumPy .npz?), not a .npy file: name it "
                         ".npz", accepted, option)
    if head != NPY_MAGIC:
        raise _not_numpy(path, "is not a valid NumPy .npy file (it does not begin with the "
                         "\\x93NUMPY of numpy.save's files)", accepted, option)
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise _not_numpy(path, _damaged(".npy", exc), accepted, option) from None


def _damaged(kind, exc):
    if "pickle" in str(exc):  # 'Object arrays cannot be loaded when allow_pickle=False'
        return (f"holds an object array (pickled Python objects), which pymf does not load: "
                f"save an array of numbers with numpy.save{'z' if kind == '.npz' else ''}")
    return f"is not a valid NumPy {kind} file: it is damaged or truncated ({exc})"


def npz_problem(path):
    """Why the file at path is not a .npz archive as numpy.savez writes one: "empty", "npy"
    (a NumPy .npy file) or "not zip"; None if it is a zip archive. numpy's np.load called
    each of these 'pickled (object) data'. check_npz and pymf.load word the answer."""
    with open(path, "rb") as fh:
        head = fh.read(len(NPY_MAGIC))
    if head == NPY_MAGIC:
        return "npy"
    if not zipfile.is_zipfile(path):
        return "not zip" if head else "empty"
    return None


def check_npz(path, accepted=DATA_HELP, option="--data"):
    """Refuse (ValueError naming the file and the formats `accepted`) a file that is not a
    zip archive, as numpy.savez writes: numpy called one 'pickled (object) data'."""
    problem = npz_problem(path)
    if problem == "npy":
        raise _not_numpy(path, "is a NumPy .npy file, not a .npz archive: name it .npy",
                         accepted, option)
    if problem is not None:
        raise _not_numpy(path, "is empty, not a NumPy .npz file" if problem == "empty" else
                         "is not a valid NumPy .npz file (it is not a zip archive, as "
                         "numpy.savez writes)", accepted, option)


def read_npz(path, names, accepted=DATA_HELP, option="--data"):
    """(the arrays of the .npz file named in `names` that it holds, all the names it holds);
    a file that is not a .npz, or a damaged member, is a ValueError naming the file, what
    is wrong and the formats `accepted` (numpy's messages named neither)."""
    check_npz(path, accepted, option)
    try:
        with np.load(path, allow_pickle=False) as archive:
            return ({name: archive[name] for name in names if name in archive.files},
                    list(archive.files))
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise _not_numpy(path, _damaged(".npz", exc), accepted, option) from None


def read_data_file(path):
    """A .npy matrix, a .npz with a matrix V or with ratings (rows, cols, values, shape), or
    a MovieLens ratings file (u.data / ratings.dat / ratings.csv)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"--data {path!r}: no such file (or use --data demo)")
    try:
        if path.endswith(".npy"):
            return read_npy(path)
        if path.endswith(".npz"):
            arrays, held = read_npz(path, ("V", "rows", "cols", "values", "shape"))
            if "V" in arrays:
                return arrays["V"]
            if {"rows", "cols", "values", "shape"} <= set(arrays):
                return Ratings(arrays["rows"], arrays["cols"], arrays["values"],
                               shape=tuple(np.atleast_1d(arrays["shape"])))
            raise ValueError(f"--data {path!r} holds neither a matrix V nor ratings (rows, cols, "
                             f"values, shape); it holds {', '.join(held) or 'nothing'}")
    except OSError as exc:
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


def prepare_out(path):
    """Create the --out folder and check that it can be written to, before the run (a
    read-only --out failed after the whole run, every draw lost); returns path."""
    from pymf.engine.storage import check_writable
    os.makedirs(path, exist_ok=True)
    check_writable(path, "--out")
    return path


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
