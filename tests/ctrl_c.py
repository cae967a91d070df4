"""A real Ctrl-C (SIGINT from another thread) delivered while a run is under way, for the
tests of checkpoints written on Ctrl-C: where the signal lands (inside a C call, between
two lines of the bookkeeping) is up to the operating system, as for a user."""
import os
import signal
import threading


class CtrlC:
    """with CtrlC() as ctrl_c: run(callback=ctrl_c.press_at(t0)) sends SIGINT from another
    thread a moment after the callback first sees unit t0, so that it lands while the run
    goes on (most often inside the C sampler), whatever the machine's speed or load. The
    signal meets Python's own handler, as in a user's session; one arriving after the run
    has returned is swallowed instead of ending pytest."""

    def __init__(self, delay=0.002):
        self.delay = delay
        self.timer = None

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def press_at(self, unit):
        def callback(info):
            t = info["iteration"]
            if t >= unit and self.timer is None:
                self.timer = threading.Timer(self.delay, os.kill, (os.getpid(), signal.SIGINT))
                self.timer.start()
        return callback

    def __exit__(self, *exc):
        late = []
        signal.signal(signal.SIGINT, lambda *_: late.append(True))
        if self.timer is not None:
            self.timer.cancel()
            self.timer.join()
        signal.signal(signal.SIGINT, self.previous)
