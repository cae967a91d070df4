"""One BLAS thread while a pymf run goes on (pymf.sample, pymf.fit, pymf.mpi.sample).

Why: OpenBLAS's worker threads busy-wait for a while after every call, so a NumPy product
in a run's Python orchestration (a norm in the automatic step's Lanczos steps, a
summary, a K x K eigenvalue problem) left them spinning on the very cores that the C
core's OpenMP threads needed next. On 2 cores the full-data gradient of the 1024^2 NMF
took 9-13 ms after a norm instead of 4.6 ms, which made the automatic step's choice cost
twice what it should. The orchestration's BLAS work is small (vectors of the factors'
size, K x K matrices), so one BLAS thread costs it nothing measurable, and the C core's
threads (n_threads) are unaffected. threadpoolctl finds the process's BLAS (OpenBLAS, MKL,
BLIS) and puts its thread count back when the run ends, also on an exception."""
import contextlib


def one_blas_thread():
    """A context manager: BLAS limited to one thread inside it (nothing to do without a
    threaded BLAS). The loaded libraries are scanned at every run (about 1 ms), not once
    per process: a BLAS loaded after the first run (SciPy brings its own OpenBLAS beside
    NumPy's) must be limited too."""
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    if not controller.select(user_api="blas").lib_controllers:
        return contextlib.nullcontext()
    return controller.limit(limits=1, user_api="blas")
