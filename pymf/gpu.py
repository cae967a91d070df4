"""The GPU path (pycuda loading the hand-written kernels of cuda/).

Optional at build time and at run time: importing pymf never needs pycuda or a GPU.
available() returns True, or a string saying why the GPU path cannot be used.
"""


def available():
    try:
        import pycuda.driver as driver
    except ImportError as exc:  # pycuda missing (needs libcuda and a CUDA toolkit to build)
        return f"pycuda is not installed ({exc}); install the 'gpu' extra on a machine with a GPU"
    try:
        driver.init()
    except Exception as exc:  # pycuda.driver.Error, without importing it by name here
        return f"the CUDA driver could not be initialised ({exc})"
    if driver.Device.count() == 0:
        return "the CUDA driver reports no GPU device"
    from pymf import cuda
    if not (cuda.source_dir() / "psgld.cu").is_file():
        return "this build of pymf has no CUDA PSGLD kernels (cuda/psgld.cu is missing)"
    return True
