"""Exceptions raised by pymf, and where its warnings point."""
import os
import sys


def user_stacklevel():
    """The stacklevel for warnings.warn, called in the function that warns, that names the
    first frame outside pymf: the user's call of pymf.sample or pymf.fit, which reaches the
    warning through wrappers (the engine's registry, the family's runner, the driver), so
    no fixed level names it. The outermost frame where every frame is pymf's."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        level, frame = level + 1, frame.f_back
    return level


class DivergenceError(RuntimeError):
    """A chain produced a non-finite parameter (or a state whose log-likelihood is not), or
    cannot go on (an IBP chain whose feature count would pass pymf.ibp.chain.MAX_FEATURES).

    Attributes, the same for every family
    ----------
    iteration : int
        The unit (iteration, round or sweep) whose update was not finite; that update was
        discarded.
    state : dict or None
        The last finite state, by variable name (NMF: W, H; BPMF: U, V, a, b per chain;
        HAMCMC: theta), set by pymf.sample.
    result : the family's result or None
        Everything sampled before the divergence, set by pymf.sample / pymf.fit.
    """

    def __init__(self, message, iteration, state=None, result=None):
        super().__init__(message)
        self.iteration = iteration
        self.state = state
        self.result = result

    def _variable(self, name):
        return None if self.state is None else self.state.get(name)

    @property
    def W(self):
        """The last finite W of an NMF chain (state["W"])."""
        return self._variable("W")

    @property
    def H(self):
        """The last finite H of an NMF chain (state["H"])."""
        return self._variable("H")


class GPUUnavailableError(RuntimeError):
    """backend="cuda" was asked for where the GPU path cannot run (no GPU, or neither pycuda
    nor CuPy): the message says why and what to install."""


def abort_mpi_job(exc):
    """Print exc in one line naming this rank, then end every rank of the MPI job
    (comm.Abort: a rank that fails alone would leave the others waiting for ever in a
    collective); without MPI, or in a job of one process, exit with status 2."""
    rank, size, world = 0, 1, None
    try:
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        rank, size = world.Get_rank(), world.Get_size()
    except Exception:  # no MPI here: a one-process job
        pass
    where = f"rank {rank}: " if size > 1 else ""
    print(f"pymf.mpi: error: {where}{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    if size > 1:
        world.Abort(2)
    raise SystemExit(2)
