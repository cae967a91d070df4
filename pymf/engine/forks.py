"""Runs in a process forked from one that had run pymf.

GCC's OpenMP runtime (libgomp) cannot start a thread team in a child forked after the
parent used one: the child's first parallel region of more than one thread waits for ever,
asleep (multiprocessing.Pool's default start method on Linux is fork, so a pool of chains
started after a first run in the parent hung). A run in such a child uses one thread, with
a warning naming the remedy: the same chain, bit for bit, since no chain depends on its
thread count. The flag is per process, set by the parent's runs (pymf.engine.registry)
and carried into the child by fork itself.
"""
import copy
import os
import warnings

from pymf.errors import user_stacklevel

_process = {"ran": False, "forked_after_run": False, "warned": False}


def note_run():
    """A pymf run starts in this process (its OpenMP threads may be started)."""
    _process["ran"] = True


def _after_fork_in_child():
    if _process["ran"]:
        _process["forked_after_run"] = True
        _process["warned"] = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def one_thread_here(sampler):
    """The sampler a run in this process uses: itself, or, in a child forked after a pymf
    run, a copy on one thread (and OpenMP's default set to one thread for the calls that
    take no thread count), with a warning once per process."""
    if not _process["forked_after_run"]:
        return sampler
    from pymf import _core_info
    _core_info.set_default_threads(1)
    if not _process["warned"]:
        _process["warned"] = True
        warnings.warn("this process was forked from one that had run pymf: OpenMP cannot "
                      "start threads here (the run would hang), so it runs on one thread (the "
                      "same chain); to have threads, start processes with multiprocessing's "
                      "'spawn' or 'forkserver' (multiprocessing.get_context('spawn'))",
                      RuntimeWarning, stacklevel=user_stacklevel())
    if getattr(sampler, "n_threads", 1) == 1:  # one already (or a sampler without threads)
        return sampler
    single = copy.copy(sampler)
    single.n_threads = 1
    return single
