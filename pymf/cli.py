"""The pymf command line: `pymf sample`, `pymf fit`, `pymf bpmf`, `pymf sibm`, `pymf ibp`,
`pymf predict`, `pymf info`.

    pymf sample --model tweedie --beta 1 --rank 32 --sampler psgld --blocks 32 \\
                --data demo --samples 10000 --out DIR
    pymf sample --sampler gibbs --data demo --samples 200 --out DIR
    pymf fit --optimizer dsgd --blocks 8 --epochs 20 --data demo --out DIR
    pymf bpmf --data ratings.csv --rank 10 --sampler dsgld --split square --blocks 2 \\
              --samples 2000 --burnin 200 --thin 5 --test-fraction 0.2 --out DIR
    pymf sibm --data u.data --rank 10 --sampling biased --updates 2000 --out DIR
    pymf ibp --data cambridge --sampler hybrid --processes 2 --samples 200 --out DIR
    pymf predict --result DIR --rows 0 1 --cols 5 7
    pymf info

predict and info are generic; the families register the others (pymf/nmf/cli.py,
pymf/bpmf/cli.py, pymf/sibm/cli.py, pymf/ibp/cli.py). `pymf COMMAND --help` lists a
command's options with their defaults.
"""
import argparse
import inspect
import json
import os
import platform
import sys

import numpy as np

from pymf.cliutil import HelpFormatter, read_data_file  # noqa: F401  (read_data_file: as before)
from pymf.engine import registry
from pymf.errors import DivergenceError, GPUUnavailableError

PREDICT_HELP = "posterior mean and sd of (W H)_ij from a saved result"
INFO_HELP = "build facts: version, OpenMP, GSL, CUDA, MPI"


def _rows_of_ids(folder, user_ids, item_ids):
    """The rows and columns of a data file's own user and item ids, from the ids.npz that
    pymf bpmf writes beside its result."""
    ids_path = os.path.join(folder, "ids.npz")
    if not os.path.isfile(ids_path):
        raise ValueError(f"--by-id needs the ids.npz that pymf bpmf writes beside its result "
                         f"(for a MovieLens file); {folder or '.'!r} has none")
    with np.load(ids_path) as ids:
        out = []
        for given, known, what in ((user_ids, ids["user_ids"], "user"),
                                   (item_ids, ids["item_ids"], "item")):
            index = {int(v): k for k, v in enumerate(known)}
            missing = [v for v in given if v not in index]
            if missing:
                raise ValueError(f"--by-id: {what} id {missing[0]} is not in the data")
            out.append([index[v] for v in given])
    return out


def cmd_predict(args):
    import pymf
    path = args.result
    inner = os.path.join(path, "result.npz")
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "meta.json")) \
            and os.path.isfile(inner):
        path = inner  # the --out folder of pymf bpmf, pymf fit, pymf sibm or pymf ibp
    result = pymf.load(path, mmap=True)
    if len(args.rows) != len(args.cols):
        raise SystemExit("pymf: error: --rows and --cols need the same number of values")
    rows, cols = args.rows, args.cols
    if args.by_id:
        rows, cols = _rows_of_ids(os.path.dirname(path), rows, cols)
    if "cols" not in inspect.signature(result.predict).parameters and \
            "items" not in inspect.signature(result.predict).parameters:
        raise SystemExit(f"pymf: error: {args.result!r} holds a {type(result).__name__}, "
                         "whose predict takes new design rows, not (row, column) cells: "
                         "call its predict from Python")
    mean, std = result.predict(rows, cols, return_std=True)
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
    """The `pymf` parser: the generic subcommands (predict, info), then every command a
    family registered (pymf.engine.registry.register_command), in registration order."""
    import pymf  # noqa: F401  (the families register their commands)
    parser = argparse.ArgumentParser(prog="pymf", description=__doc__,
                                     formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True,
                                help="the subcommand (pymf COMMAND --help: its options)")

    p = sub.add_parser("predict", help=PREDICT_HELP, description=PREDICT_HELP,
                       formatter_class=HelpFormatter)
    p.add_argument("--result", required=True,
                   help="a saved result (pymf.load): the --out folder of any command, or a "
                        "result's .npz or folder saved from Python")
    p.add_argument("--rows", type=int, nargs="+", required=True, help="row indices (0-based)")
    p.add_argument("--cols", type=int, nargs="+", required=True,
                   help="column indices (0-based), one per --rows value")
    p.add_argument("--by-id", action="store_true",
                   help="--rows and --cols are the data file's own user and item ids (the "
                        "ids.npz pymf bpmf writes for a MovieLens file), not 0-based indices")
    p.set_defaults(func=cmd_predict)

    i = sub.add_parser("info", help=INFO_HELP, description=INFO_HELP,
                       formatter_class=HelpFormatter)
    i.add_argument("--json", action="store_true", help="print the facts as JSON")
    i.set_defaults(func=cmd_info)

    for name, help_, add_arguments, run in registry.commands():
        c = sub.add_parser(name, help=help_, description=help_, formatter_class=HelpFormatter)
        add_arguments(c)
        c.set_defaults(func=run)
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
    except DivergenceError as exc:
        # the commands that do not catch it themselves (bpmf's DSGLD with a large --eps0)
        # ended in a traceback; its message already names the iteration and what to try.
        # What the run kept before it is saved where the command saves its result
        # (OUT/result.npz), as `pymf sample` does: it was lost with the process
        kept, result, out = "", getattr(exc, "result", None), getattr(args, "out", None)
        if result is not None and out and os.path.isdir(out):
            kept = f"\n(the draws kept before it are in {result.save(os.path.join(out, 'result.npz'))})"
        print(f"pymf: error: {exc}{kept}", file=sys.stderr)
        return 2
    except GPUUnavailableError as exc:
        # --backend cuda where no GPU (or no pycuda / CuPy) is: the message names what to
        # install; a traceback added nothing
        print(f"pymf: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
