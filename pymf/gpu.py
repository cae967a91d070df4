"""The GPU path of pymf: the hand-written kernels of cuda/psgld.cu, loaded with pycuda (or,
where pycuda is missing, CuPy's RawModule), and the devices that run them.

Optional at build time and at run time: importing pymf never needs pycuda, CuPy or a GPU.
is_available() says whether the GPU path can be used, why_unavailable() why not.
pymf.PSGLD(..., backend="cuda") runs through the NMF family's chain on these devices,
pymf.nmf.gpu.CudaPSGLDChain; where the GPU is unusable that is an error, never a silent
fall-back to the CPU.

The kernels include the C core's headers (shipped in pymf/cuda/include). They come from the
fatbin built at install time where it matches the installed source and the driver loads it
(pymf.cuda, prebuilt_fatbin()), else they are compiled at first use for the device's own
architecture: pycuda's SourceModule (no_extern_c=True) within the primary context (never
pycuda.autoinit), or CuPy's RawModule through nvcc. pycuda is the primary loader; CuPy is
the fall-back for machines where pycuda cannot be built (CuPy ships as wheels). Both sit
behind the same small device interface (_PycudaDevice, _CupyDevice: arrays to and from the
device, kernels, launches, shared-memory opt-in), so a chain has one iteration for both,
and the CPU tests drive that very iteration with a third device that runs the kernels
through a C++ host shim (tests/test_cuda.py).
"""
import functools
import os

import numpy as np

KERNEL_NAMES = ("psgld_factors_dense", "psgld_factors_sparse", "psgld_update_factors",
                "psgld_ring_dense", "psgld_ring_sparse")
STATIC_SHARED_MARGIN = 1024  # room for static shared memory (the ring kernels have none)
# dynamic shared memory a launch gets without opting in: 48 KB, static and dynamic together
DEFAULT_SHARED_LIMIT = 48 * 1024 - STATIC_SHARED_MARGIN


class _PycudaDevice:
    """GPU 0 through pycuda, in its primary context."""

    name = "pycuda"
    null = np.intp(0)  # a NULL pointer argument

    def __init__(self):
        import pycuda.driver as driver
        import pycuda.gpuarray as gpuarray
        driver.init()
        if driver.Device.count() == 0:
            raise RuntimeError("the CUDA driver reports no GPU device")
        device = driver.Device(0)
        self.driver, self.gpuarray = driver, gpuarray
        self.context = device.retain_primary_context()
        self.arch = "sm_%d%d" % device.compute_capability()
        self.multiprocessors = device.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)
        # more than 48 KB needs an opt-in per kernel (compute capability >= 7.0), where this
        # pycuda can name it
        self.shared_limit = DEFAULT_SHARED_LIMIT
        if (hasattr(driver.device_attribute, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
                and hasattr(driver.function_attribute, "MAX_DYNAMIC_SHARED_SIZE_BYTES")
                and hasattr(driver.Function, "set_attribute")):
            self.shared_limit = max(DEFAULT_SHARED_LIMIT, device.get_attribute(
                driver.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) - STATIC_SHARED_MARGIN)

    def __enter__(self):
        self.context.push()
        return self

    def __exit__(self, *exc):
        self.context.pop()

    def to_device(self, array):
        return self.gpuarray.to_gpu(np.ascontiguousarray(array))

    # zeros, clear and copy use memset/memcpy only: pycuda's own gpuarray.zeros and fill
    # compile element-wise kernels with nvcc, which a node running the prebuilt fatbin lacks
    def zeros(self, n, dtype):
        return self.gpuarray.to_gpu(np.zeros(n, dtype))

    def clear(self, array):
        """Set a device array's bytes to zero."""
        self.driver.memset_d8(array.gpudata, 0, array.nbytes)

    def empty_like(self, array):
        return self.gpuarray.empty_like(array)

    def to_host(self, array):
        return array.get()

    def copy(self, dst, src):
        self.driver.memcpy_dtod(dst.gpudata, src.gpudata, src.nbytes)

    def upload(self, dst, host):
        """The first len(host) elements of the device array dst from host memory."""
        dst[:len(host)].set(host)

    def kernels(self, suffix):
        module = _pycuda_module(self.arch)
        return {name: module.get_function(f"{name}_{suffix}") for name in KERNEL_NAMES}

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        # pycuda's plain call inspects every argument's type at every launch (measured on an
        # H100: 2.7x the per-iteration time of CuPy's launches); a prepared call packs them
        # by a format fixed at the kernel's first launch. Pointers travel as integers, so a
        # NULL (np.intp) and a device array fill the same 8 bytes whichever came first.
        if getattr(kernel, "arg_format", None) is None:
            kernel.prepare("".join("P" if hasattr(a, "gpudata") else np.asarray(a).dtype.char
                                   for a in args))
        kernel.prepared_async_call(grid, block, None,
                                   *[int(a.gpudata) if hasattr(a, "gpudata") else a for a in args],
                                   shared_size=shared_bytes)

    def allow_shared(self, kernel, shared_bytes):
        """Let `kernel` launch with this much dynamic shared memory (over 48 KB: opt in)."""
        if shared_bytes > DEFAULT_SHARED_LIMIT:
            kernel.set_attribute(self.driver.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 int(shared_bytes))


class _CupyDevice:
    """GPU 0 through CuPy (the fall-back loader): the same .cu source, compiled by nvcc."""

    name = "cupy"
    null = np.intp(0)

    def __init__(self):
        import cupy
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("the CUDA runtime reports no GPU device")
        self.cupy = cupy
        self.device = cupy.cuda.Device(0)
        self.multiprocessors = self.device.attributes["MultiProcessorCount"]
        optin = self.device.attributes.get("MaxSharedMemoryPerBlockOptin", 0)
        self.shared_limit = max(DEFAULT_SHARED_LIMIT, optin - STATIC_SHARED_MARGIN)

    def __enter__(self):
        self.device.__enter__()
        return self

    def __exit__(self, *exc):
        self.device.__exit__(*exc)

    def to_device(self, array):
        return self.cupy.asarray(np.ascontiguousarray(array))

    def zeros(self, n, dtype):
        return self.cupy.zeros(n, dtype)

    def empty_like(self, array):
        return self.cupy.empty_like(array)

    def to_host(self, array):
        return self.cupy.asnumpy(array)

    def clear(self, array):
        array.data.memset_async(0, array.nbytes)

    # a plain device-to-device copy: cupy.copyto may build an element-wise kernel (NVRTC)
    def copy(self, dst, src):
        dst.data.copy_from_device_async(src.data, src.nbytes)

    def upload(self, dst, host):
        dst[:len(host)].set(host)

    def kernels(self, suffix):
        module = _cupy_module()
        return {name: module.get_function(f"{name}_{suffix}") for name in KERNEL_NAMES}

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        kernel(grid, block, args, shared_mem=shared_bytes)

    def allow_shared(self, kernel, shared_bytes):
        if shared_bytes > DEFAULT_SHARED_LIMIT:
            kernel.max_dynamic_shared_size_bytes = int(shared_bytes)


def open_device():
    """The device of the first loader that works (pycuda, then CuPy); RuntimeError naming
    why each failed where none does."""
    if not os.path.exists(kernel_source()):
        raise RuntimeError("this build of pymf has no CUDA PSGLD kernels (cuda/psgld.cu is missing)")
    reasons = []
    for loader in (_PycudaDevice, _CupyDevice):
        try:
            return loader()
        except ImportError as exc:
            reasons.append(f"{loader.name} cannot be imported ({exc})")
        except Exception as exc:  # the driver's own error types, without importing them here
            reasons.append(f"{loader.name} found no usable GPU ({exc})")
    raise RuntimeError("; ".join(reasons) + "; on a machine with a GPU, pip install "
                       "\"pymf[gpu]\" (pycuda), or CuPy")


@functools.lru_cache(maxsize=1)
def _available():
    try:
        return open_device().name
    except RuntimeError as exc:
        return exc


def is_available():
    """True where a loader (pycuda, else CuPy) reaches a GPU. Checked once."""
    return not isinstance(_available(), RuntimeError)


def why_unavailable():
    """None where the GPU path is usable, else the reason (names what to install)."""
    state = _available()
    return str(state) if isinstance(state, RuntimeError) else None


def loader():
    """"pycuda" or "cupy": the loader CudaPSGLDChain uses here (None where none works)."""
    state = _available()
    return None if isinstance(state, RuntimeError) else state


def _cuda_sources():
    """pymf.cuda.sources: installed (or editable), the module; run from a source tree (the
    repository root on sys.path), the repository's cuda/sources.py, loaded by its path, so
    that `pymf info` and the CUDA tests work there too."""
    try:
        from pymf.cuda import sources
        return sources
    except ImportError:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda",
                            "sources.py")
        if not os.path.exists(path):
            raise
        import importlib.util
        import sys
        name = "pymf._cuda_sources_of_the_tree"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
        return sys.modules[name]


def kernel_dir():
    return str(_cuda_sources().source_dir())


def kernel_source():
    return os.path.join(kernel_dir(), "psgld.cu")


def include_dir():
    """The C core's headers: shipped inside pymf.cuda, or core/include in a source tree."""
    shipped = os.path.join(kernel_dir(), "include")
    if os.path.isdir(os.path.join(shipped, "pymf")):
        return shipped
    return os.path.join(os.path.dirname(kernel_dir()), "core", "include")


def _read_kernel_source():
    """cuda/psgld.cu headed by the digest of its headers (pymf.cuda.sources.kernel_text)."""
    return _cuda_sources().kernel_text(kernel_source(), include_dir())


def prebuilt_fatbin():
    """The fatbin setup.py built from exactly this source and these headers, or None (no
    nvcc at install time, an editable install, or sources changed since)."""
    return _cuda_sources().prebuilt_fatbin(kernel_dir(), _read_kernel_source())


_kernel_origin = {}  # loader name -> where its kernels came from (see kernel_origin)


def kernel_origin():
    """Where the kernels in use came from: "prebuilt fatbin", "compiled from source", or
    None before any chain has loaded them."""
    return next(iter(_kernel_origin.values()), None)


@functools.lru_cache(maxsize=None)
def _pycuda_module(arch):
    """The kernels for this architecture: the prebuilt fatbin where it loads (a driver and no
    toolkit is enough), else cuda/psgld.cu compiled by nvcc (pycuda caches the cubin)."""
    import pycuda.driver as driver
    from pycuda.compiler import SourceModule
    fatbin = prebuilt_fatbin()
    if fatbin is not None:
        try:
            module = driver.module_from_file(fatbin)
            _kernel_origin["pycuda"] = "prebuilt fatbin"
            return module
        except driver.Error:  # e.g. a driver older than the toolkit that built it
            pass
    _kernel_origin["pycuda"] = "compiled from source"
    return SourceModule(_read_kernel_source(), no_extern_c=True, include_dirs=[include_dir()],
                        arch=arch, options=["-std=c++14"])


@functools.lru_cache(maxsize=None)
def _cupy_module():
    """As _pycuda_module, through CuPy: the prebuilt fatbin, else nvcc (the kernels include C
    headers that NVRTC lacks); CuPy targets the current device and caches the binary."""
    import cupy
    fatbin = prebuilt_fatbin()
    if fatbin is not None:
        try:
            module = cupy.RawModule(path=fatbin)
            module.get_function(f"{KERNEL_NAMES[0]}_f64")  # loads it: fails here, not later
            _kernel_origin["cupy"] = "prebuilt fatbin"
            return module
        except cupy.cuda.driver.CUDADriverError:
            pass
    _kernel_origin["cupy"] = "compiled from source"
    return cupy.RawModule(code=_read_kernel_source(), backend="nvcc",
                          options=("-std=c++14", "-I" + include_dir()))
