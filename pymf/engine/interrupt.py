"""Ctrl-C that takes effect where a run's state is whole.

Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread is. In a
sampling run that is most often just after a C call has returned, before the Python lines
that account for it (keep the sample, move the counters): a checkpoint written on the way
out would then hold a chain one step ahead of its bookkeeping, and resuming it would lose
a kept sample. DeferredInterrupt holds the signal back: the first Ctrl-C only sets a flag
(`requested`), which the run loop reads at a point where the chain and its bookkeeping
agree (and where the processes of a chain spread over several agree to stop: the MPI
ring), raising KeyboardInterrupt there, so that the loop's own handler saves and
returns. A second Ctrl-C is obeyed at once: ForcedInterrupt, and nothing is written (the
last checkpoint stays as it was).

Only the main thread can handle signals, and a handler the application installed itself
is left alone: in both cases Ctrl-C behaves as before.
"""
import signal
import threading


class ForcedInterrupt(KeyboardInterrupt):
    """A second Ctrl-C during a run: stop now, without writing a checkpoint."""


class DeferredInterrupt:
    """with DeferredInterrupt() as interrupt: ... interrupt.requested at each safe point."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum, frame):
        if self.requested:
            raise ForcedInterrupt("interrupted twice: stopped at once, no checkpoint written")
        self.requested = True
