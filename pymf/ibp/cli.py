"""The IBP family's subcommand, registered in pymf/ibp/__init__.py:

    pymf ibp --data cambridge --n 1000 --sampler hybrid --processes 2 --samples 200 --out DIR

(over MPI: mpiexec -n P python -m pymf.mpi ibp ...). Writes DIR/result.npz,
DIR/summary.json and DIR/features.png.
"""
import json
import os

from pymf import cliutil
from pymf.engine.api import sample
from pymf.ibp.mpi import add_arguments, run_from_args
from pymf.ibp.samplers import CollapsedIBP, HybridIBP

IBP_HELP = "IBP latent features (linear-Gaussian): collapsed Gibbs or the hybrid sampler"


def ibp_arguments(parser):
    add_arguments(parser)
    parser.add_argument("--sampler", choices=["collapsed", "hybrid"], default="hybrid",
                        help="collapsed Gibbs or the hybrid parallel sampler")
    parser.add_argument("--processes", type=int, default=2, help="P of the hybrid")
    cliutil.add_threads(parser)
    cliutil.add_out(parser, "pymf-ibp", help="output folder: result.npz, summary.json, "
                                             "features.png")


def cmd_ibp(args):
    sampler = (CollapsedIBP(split_merge=args.split_merge) if args.sampler == "collapsed" else
               HybridIBP(processes=args.processes, sub_iterations=args.sub_iterations,
                         warm_start=args.warm_start, n_threads=args.threads,
                         split_merge=args.split_merge))
    cliutil.prepare_out(args.out)
    result, summary = run_from_args(args, sampler, sample, args.out)
    summary["result"] = result.save(os.path.join(args.out, "result.npz"))
    summary["features_png"] = result.features_png(os.path.join(args.out, "features.png"))
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(json.dumps(summary))
    return 0
