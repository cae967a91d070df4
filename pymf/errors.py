"""Exceptions raised by pymf."""


class DivergenceError(RuntimeError):
    """A chain produced a non-finite parameter.

    Attributes
    ----------
    iteration : int
        The 1-based iteration whose update was not finite. That update was discarded.
    W, H : ndarray or None
        The last finite state (set by :func:`pymf.sample`).
    result : SampleResult or None
        Everything sampled before the divergence (set by :func:`pymf.sample`).
    """

    def __init__(self, message, iteration, W=None, H=None, result=None):
        super().__init__(message)
        self.iteration = iteration
        self.W = W
        self.H = H
        self.result = result
