"""Build of pymf: the C core (core/) as a static library, the Cython bindings linking it,
and the CUDA sources (cuda/) shipped as package data of pymf.cuda.

GSL comes from $GSL_PREFIX when set (a cluster module's prefix, or a package unpacked
somewhere), else from gsl-config when it is on PATH, else from the compiler's own paths
(Debian: libgsl-dev); a GSL found outside the default paths is linked with an rpath, so no
LD_LIBRARY_PATH is needed at run time. OpenMP comes from the compiler. No -march=native: set
PYMF_NATIVE=1 to opt in on your own machine.
"""
import glob
import os
import shutil
import subprocess

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py


def gsl_paths():
    """(include dirs, library dirs) of GSL beyond the compiler's defaults."""
    prefix = os.environ.get("GSL_PREFIX")
    if prefix:
        if not os.path.isfile(os.path.join(prefix, "include", "gsl", "gsl_rng.h")):
            raise SystemExit(f"GSL_PREFIX={prefix!r} has no include/gsl/gsl_rng.h")
        libs = [d for d in glob.glob(os.path.join(prefix, "lib*")) +
                glob.glob(os.path.join(prefix, "lib", "*-linux-gnu"))
                if glob.glob(os.path.join(d, "libgsl.so*"))]
        if not libs:
            raise SystemExit(f"GSL_PREFIX={prefix!r} has no lib*/libgsl.so")
        return [os.path.join(prefix, "include")], libs
    gsl_config = shutil.which("gsl-config")
    if gsl_config is None:
        return [], []
    flags = subprocess.run([gsl_config, "--cflags", "--libs"], capture_output=True,
                           text=True).stdout.split()
    default = {"/usr/include", "/usr/lib", "/usr/lib64", "/usr/lib/x86_64-linux-gnu"}
    return ([f[2:] for f in flags if f.startswith("-I") and f[2:] not in default],
            [f[2:] for f in flags if f.startswith("-L") and f[2:] not in default])


gsl_include_dirs, gsl_library_dirs = gsl_paths()
core_sources = sorted(glob.glob(os.path.join("core", "src", "*.c")))
include_dirs = [os.path.join("core", "include"), numpy.get_include()] + gsl_include_dirs

# -std=c99 also turns off floating-point contraction (no silent FMA), which keeps a chain
# bit-identical between the scalar and the vector code paths of different machines. The
# fused multiply-adds of the Tweedie block gradient are explicit fma() calls (correctly
# rounded in every clone: core/include/pymf/linalg.h), not contraction.
# -fno-math-errno and -fno-trapping-math change no computed value; they let the compiler
# vectorise sqrt and floating-point selects (the Gaussian noise loops, core/src/philox.c).
c_flags = ["-std=c99", "-O3", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-fopenmp", "-Wall",
           "-Wno-unknown-pragmas"]
if os.environ.get("PYMF_NATIVE") == "1":
    c_flags.append("-march=native")

core_library = (
    "pymfcore",
    {"sources": core_sources, "include_dirs": [os.path.join("core", "include")] + gsl_include_dirs,
     "cflags": c_flags},
)


def binding(path):
    """The extension of pymf/{path}.pyx, named by its dotted package path (pymf.nmf._sgld)."""
    return Extension(
        "pymf." + path.replace("/", "."),
        sources=[os.path.join("pymf", *path.split("/")) + ".pyx"],
        include_dirs=include_dirs,
        libraries=["pymfcore", "gsl", "gslcblas", "m"],
        library_dirs=gsl_library_dirs,
        runtime_library_dirs=gsl_library_dirs,
        extra_compile_args=["-O3", "-fopenmp"],
        # an old-style RPATH, which (unlike RUNPATH) also serves libgsl's own libgslcblas
        extra_link_args=["-fopenmp"] + (["-Wl,--disable-new-dtags"] if gsl_library_dirs else []),
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        depends=core_sources + glob.glob(os.path.join("core", "include", "pymf", "*.h")) +
                glob.glob(os.path.join("core", "src", "*.h")),
    )


# pymf/ holds the bindings every family shares; each family's own bindings (and the .pxd
# declaring its C headers) live in its folder
extensions = [binding(path) for path in (
    "_status", "_core_info", "_rng", "_linalg",
    "nmf/_blocks", "nmf/_tweedie", "nmf/_chain", "nmf/_sgld", "nmf/_sgd", "nmf/_gibbs_nmf",
    "bpmf/_bpmf",
    "hamcmc/_hamcmc",
    "hamcmc/_hamcmc_mf",
    "alphamf/_alphamf",
    "sibm/_sibm",
    "ibp/_ibp",
)]


def cuda_sources_module():
    """cuda/sources.py (pymf.cuda.sources: kernel text and fatbin helpers, standard library only),
    loaded from the source tree before pymf exists."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("pymf_cuda_sources",
                                                  os.path.join("cuda", "sources.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class build_py_with_headers(build_py):
    """Ships the C core's headers inside pymf.cuda: the CUDA kernels include them at run
    time (pycuda or CuPy compiles cuda/psgld.cu on the GPU machine), one copy of every
    formula. Where nvcc is here, also builds psgld.fatbin (sm_80, sm_90, PTX) so that a GPU
    machine without the CUDA toolkit can load the kernels; PYMF_NO_FATBIN=1 skips it, and a
    failure only warns (the kernels are then compiled at first use)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "pymf", "cuda", "include", "pymf")
        self.mkpath(target)
        for header in glob.glob(os.path.join("core", "include", "pymf", "*.h")):
            shutil.copy(header, target)  # always, not only when newer: no stale copy is kept
        installed = os.path.join(self.build_lib, "pymf", "cuda")
        shutil.copy(os.path.join("cuda", "psgld.cu"), installed)  # likewise always
        sources = cuda_sources_module()
        nvcc = sources.find_nvcc()
        if nvcc is None or os.environ.get("PYMF_NO_FATBIN"):
            return
        # the text from the very files that are installed, so its digest is the one the
        # loader computes from them
        include = os.path.join(installed, "include")
        try:
            text = sources.kernel_text(os.path.join(installed, "psgld.cu"), include)
            sources.build_fatbin(nvcc, text, include, installed)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"warning: no prebuilt CUDA kernels ({exc}); they will be compiled at first use")


setup(
    cmdclass={"build_py": build_py_with_headers},
    packages=["pymf", "pymf.engine", "pymf.nmf", "pymf.bpmf", "pymf.hamcmc", "pymf.sibm",
              "pymf.ibp", "pymf.alphamf", "pymf.cuda"],
    package_dir={"pymf": "pymf", "pymf.cuda": "cuda"},
    # the .pxd files, so that code outside pymf can cimport the bindings' declarations
    package_data={"pymf.cuda": ["*.cu", "*.cuh", "include/pymf/*.h"],
                  **{package: ["*.pxd"] for package in ("pymf", "pymf.nmf", "pymf.bpmf",
                                                        "pymf.hamcmc", "pymf.sibm",
                                                        "pymf.ibp", "pymf.alphamf")}},
    libraries=[core_library],
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    ),
)
