"""A real Ctrl-C (SIGINT from another thread) delivered while a run is under way, for the
tests of checkpoints written on Ctrl-C: where the signal lands (inside a C call, between
two lines of the bookkeeping) is up to the operating system, as for a user."""
import os
import signal
import threading


def run_with_ctrl_c(run, delay):
    """run() with SIGINT sent to this process `delay` seconds after it starts; returns what
    run returns. The signal goes to Python's own handler (KeyboardInterrupt), as in a user's
    session; one arriving after run() has returned is swallowed instead of ending pytest."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    late = []
    try:
        timer.start()
        return run()
    finally:
        signal.signal(signal.SIGINT, lambda *_: late.append(True))
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, previous)
