"""Build facts of the C core (for `pymf info`)."""
from pymf._core cimport pymf_default_threads, pymf_gsl_version, pymf_openmp_enabled


def openmp_enabled():
    return bool(pymf_openmp_enabled())


def default_threads():
    return pymf_default_threads()


def gsl_version():
    return pymf_gsl_version().decode()
