"""Build facts of the C core (for `pymf info`)."""
from pymf._core cimport (pymf_default_threads, pymf_gsl_version, pymf_openmp_enabled,
                         pymf_set_default_threads)


def openmp_enabled():
    return bool(pymf_openmp_enabled())


def default_threads():
    return pymf_default_threads()


def set_default_threads(n_threads):
    """OpenMP's thread count for regions given none (pymf.engine.forks: 1 in a forked child)."""
    pymf_set_default_threads(n_threads)


def gsl_version():
    return pymf_gsl_version().decode()
