"""One BLAS thread while a pymf run goes on (pymf.sample, pymf.fit, pymf.mpi.sample).

Why: OpenBLAS's worker threads busy-wait for a while after every call, so a NumPy product
in a run's Python orchestration (a norm in the automatic step's Lanczos steps, a
summary, a K x K eigenvalue problem) left them spinning on the very cores that the C
core's OpenMP threads needed next. On 2 cores the full-data gradient of the 1024^2 NMF
took 9-13 ms after a norm instead of 4.6 ms, which made the automatic step's choice cost
twice what it should. The orchestration's BLAS work is small (vectors of the factors'
size, K x K matrices), so one BLAS thread costs it nothing measurable, and the C core's
threads (n_threads) are unaffected. threadpoolctl finds the process's BLAS (OpenBLAS, MKL,
BLIS) and puts its thread count back when the last run going on ends, also on an
exception."""
import contextlib
import threading


class _OneBlasThread:
    """The process's BLAS held to one thread while any run goes on: the first run to start
    sets the limit, the last to end puts the limits back. Each run used to save and restore
    the limits it found, so two runs overlapping in two Python threads left the process's
    BLAS at one thread for good (the second saved the first's 1), and ran the second's end
    with the BLAS threaded again."""

    def __init__(self):
        self._lock = threading.Lock()
        self._runs = 0
        self._limiter = None

    @contextlib.contextmanager
    def __call__(self):
        with self._lock:
            if self._runs == 0:
                self._limiter = _limit_blas()
            self._runs += 1
        try:
            yield
        finally:
            with self._lock:
                self._runs -= 1
                if self._runs == 0 and self._limiter is not None:
                    self._limiter.restore_original_limits()
                    self._limiter = None


def _limit_blas():
    """BLAS limited to one thread (None without a threaded BLAS). The loaded libraries are
    scanned at every first run (about 1 ms), not once per process: a BLAS loaded after the
    first run (SciPy brings its own OpenBLAS beside NumPy's) must be limited too."""
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    if not controller.select(user_api="blas").lib_controllers:
        return None
    return controller.limit(limits=1, user_api="blas")


one_blas_thread = _OneBlasThread()
