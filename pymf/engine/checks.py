"""Checks of user input shared by every family: each names the parameter it refuses."""
import math
import numbers

import numpy as np

MAX_RANK = 1 << 20  # the C core holds the rank in an int; far above any factorisation's
# OpenMP threads a run may ask for: far above any node's cores, far below what makes the
# runtime fail to create them (tens of thousands abort or crash the process)
MAX_THREADS = 1024


C_INT_MAX = 2**31 - 1  # an option the C core takes as an int


def check_count(value, name, minimum, maximum=None):
    """An integer >= minimum (bool refused: True is not a count), and <= maximum where one
    is given: the most the C core's type holds (C_INT_MAX), named here rather than in a
    bare OverflowError from the binding."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) \
            or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        most = "2**31 - 1" if maximum == C_INT_MAX else f"{maximum}"
        raise ValueError(f"{name}={value} is too large (at most {most})")
    return int(value)


def check_rank(rank):
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank <= 0:
        raise ValueError(f"rank must be a positive integer, got {rank!r}")
    if rank > MAX_RANK:
        raise ValueError(f"rank={rank} is too large (at most {MAX_RANK})")
    return int(rank)


def check_real(value, name, positive=False):
    """A finite real parameter (positive=True: > 0), named in the error."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or (positive and not value > 0):
        kind = "a positive finite number" if positive else "a finite number"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return float(value)


def check_flag(value, name):
    """A boolean option: True or False, not a truthy string such as 'no'."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_threads(n_threads, name="n_threads"):
    """None: every core OpenMP offers (returned as 0, the C core's "default"); else a
    thread count in [1, MAX_THREADS]."""
    if n_threads is None:
        return 0
    if isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral) or n_threads < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {n_threads!r}")
    if n_threads > MAX_THREADS:
        raise ValueError(f"{name}={n_threads} is too many threads (at most {MAX_THREADS})")
    return int(n_threads)


def check_blocks(blocks, name="blocks"):
    if isinstance(blocks, bool) or not isinstance(blocks, numbers.Integral) or blocks < 1:
        raise ValueError(f"{name} must be a positive integer, got {blocks!r}")
    return int(blocks)


def check_batch_size(batch_size):
    """A minibatch size: an int >= 1, or a float in (0, 1] meaning that fraction of the data."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Real):
        raise ValueError(f"batch_size must be an int or a fraction, got {batch_size!r}")
    if isinstance(batch_size, numbers.Integral):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    elif not 0.0 < batch_size <= 1.0:
        raise ValueError(f"a fractional batch_size must be in (0, 1], got {batch_size}")
    return batch_size


def batch_count(batch_size, n):
    """The number of entries per minibatch out of n (check_batch_size's value); more than n
    is refused (a minibatch larger than the data only costs time and memory)."""
    if isinstance(batch_size, numbers.Integral):
        if batch_size > n:
            raise ValueError(f"batch_size={batch_size} is larger than the {n} entries of the data")
        return int(batch_size)
    return max(1, int(round(batch_size * n)))


def check_callback(callback):
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable, got {callback!r}")
    return callback


MAX_UNITS = 2 ** 62  # the most units (iterations, rounds, sweeps) a run counts


def check_run_length(n_samples, burnin, thin):
    """(n_samples, burnin, thin) of a sampling run, checked together."""
    n_samples = check_count(n_samples, "n_samples", 1)
    burnin = check_count(burnin, "burnin", 0)
    thin = check_count(thin, "thin", 1)
    if thin > n_samples:
        raise ValueError(f"thin={thin} is larger than n_samples={n_samples}: nothing would be kept")
    if burnin + n_samples > MAX_UNITS:
        # the C cores count units in 64 bits; 10**30 ended in numpy's "Maximum allowed
        # dimension exceeded" (an array of kept draws' scalars)
        raise ValueError(f"burnin + n_samples = {burnin + n_samples} units is more than a run "
                         f"counts (at most 2**62)")
    return n_samples, burnin, thin
