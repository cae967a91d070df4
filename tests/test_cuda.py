"""The CUDA path. Without a GPU: nvcc compiles every kernel (PTX, and cubins for sm_80 and
sm_90), every kernel runs on the CPU under a C++ shim (threads for CUDA threads where a kernel
has barriers, threads for blocks where the ring kernels' blocks wait for one another) and
reproduces the C sampler bit for bit, and so does the GPU chain's own iteration
(pymf.nmf.gpu.CudaPSGLDChain, both strategies) driven through that shim.
With a GPU and pycuda or CuPy: the GPU chain follows the CPU chain and samples the same
posterior. Each test skips, naming what is missing, where its tool is absent."""
import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pymf
import pymf.cli
from pymf import gpu
from pymf.nmf import _blocks, _sgld, _tweedie
from pymf.nmf import gpu as nmf_gpu

NVCC = shutil.which("nvcc")
GXX = shutil.which("g++")
# The shim includes the C core's headers, which include GSL's: where GSL lies outside the
# compiler's paths, setup.py took it from GSL_PREFIX, and so does the shim's build
GSL_INCLUDE = (["-I", os.path.join(os.environ["GSL_PREFIX"], "include")]
               if os.environ.get("GSL_PREFIX") else [])
KERNELS = [f"{name}_{suffix}" for name in gpu.KERNEL_NAMES for suffix in ("f32", "f64")]


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
@pytest.mark.parametrize("target", ["--ptx", "sm_80", "sm_90"])
def test_kernels_compile_with_nvcc(tmp_path, target):
    """The very text the loaders compile: cuda/psgld.cu headed by the digest of its headers."""
    out = tmp_path / "psgld.out"
    source = tmp_path / "psgld.cu"
    source.write_text(gpu._read_kernel_source())
    assert source.read_text().startswith("// pymf headers sha256 ")
    flags = ["--ptx", "-arch=sm_80"] if target == "--ptx" else ["--cubin", f"-arch={target}"]
    done = subprocess.run([NVCC, "-std=c++14", "-I", gpu.include_dir(), *flags, str(source),
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    if target == "--ptx":
        ptx = out.read_text()
        for name in KERNELS:
            assert f".entry {name}(" in ptx, name


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_fatbin_holds_every_kernel_and_is_used_only_for_its_own_source(tmp_path):
    cuda = gpu._cuda_sources()
    text = gpu._read_kernel_source()
    path = cuda.build_fatbin(NVCC, text, gpu.include_dir(), str(tmp_path))
    with open(path, "rb") as fh:
        binary = fh.read()
    for name in KERNELS:
        assert name.encode() in binary, name
    assert cuda.prebuilt_fatbin(str(tmp_path), text) == path
    assert cuda.prebuilt_fatbin(str(tmp_path), text + "// edited\n") is None  # stale: compile
    os.remove(os.path.join(str(tmp_path), cuda.FATBIN_DIGEST))
    assert cuda.prebuilt_fatbin(str(tmp_path), text) is None
    with pytest.raises(RuntimeError, match="nvcc could not build"):
        cuda.build_fatbin(NVCC, text + "\nthis is not C++;\n", gpu.include_dir(), str(tmp_path))


def test_installed_package_carries_a_fatbin_of_its_own_source():
    """`pip install .` with nvcc present ships psgld.fatbin built from the installed text,
    so a GPU machine needs only a driver; an editable install has none and compiles."""
    editable = os.path.exists(os.path.join(os.path.dirname(gpu.kernel_dir()), "setup.py"))
    assert (gpu.prebuilt_fatbin() is not None) == (NVCC is not None and not editable)
    assert pymf.cli.info()["cuda_kernels"].startswith(
        "prebuilt" if gpu.prebuilt_fatbin() else "compiled")


def test_repository_cuda_folder_leaves_nvidia_cuda_namespace_importable(tmp_path):
    """CuPy imports NVIDIA's `cuda` namespace (cuda.pathfinder, cuda.bindings). With the
    repository root on sys.path (a source checkout, or python started in it) a regular
    package cuda/ would hide that namespace and CuPy would not import (seen on a GPU machine,
    2026-11-26); cuda/ is a namespace portion instead. A stand-in for NVIDIA's namespace,
    later on the path, must still be found."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    site = tmp_path / "site"
    (site / "cuda" / "pathfinder").mkdir(parents=True)
    (site / "cuda" / "pathfinder" / "__init__.py").write_text("FOUND = True\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, str(site)]))
    done = subprocess.run([sys.executable, "-c", "import cuda.pathfinder as p; assert p.FOUND"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture(autouse=True)
def patient_ring(monkeypatch):
    """On the CPU shim a ring kernel's thread blocks are OS threads (up to 32 on 2 cores):
    on a loaded machine one can wait for its neighbour far longer than the GPU's 1 s limit
    and report a stall that is not there. The tests of the stall set their own limit."""
    monkeypatch.setattr(nmf_gpu.CudaPSGLDChain, "ring_wait_seconds", 300.0)


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ is not installed: the CPU shim of the CUDA kernels cannot be built")
    library = tmp_path_factory.mktemp("shim") / "shim.so"
    source = os.path.join(os.path.dirname(__file__), "cuda_shim.cpp")
    done = subprocess.run([GXX, "-std=c++14", "-O1", "-shared", "-fPIC", "-pthread", "-I", gpu.include_dir(),
                           *GSL_INCLUDE, "-I", gpu.kernel_dir(), source, "-o", str(library)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lib = ctypes.CDLL(str(library))
    P, L, D = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_double
    update_types = [P, P, P, P, P, P, P, P, L, P, P, L, D, P, P, P, L, P, P, L, D, ctypes.c_int, D,
                    ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong, P, P, P]
    for suffix, real in (("f32", ctypes.c_float), ("f64", ctypes.c_double)):
        getattr(lib, f"shim_launch_factors_sparse_{suffix}").argtypes = [
            ctypes.c_uint, ctypes.c_uint, P, P, P, P, L, P, P, P, ctypes.c_int, real, real]
        getattr(lib, f"shim_launch_update_factors_{suffix}").argtypes = [
            ctypes.c_uint, ctypes.c_uint] + update_types
        I, U64 = ctypes.c_int, ctypes.c_ulonglong
        getattr(lib, f"shim_launch_factors_dense_{suffix}").argtypes = [ctypes.c_uint] * 5 + [
            P, P, P, P, P, P, I, I, L, I, L, real, real]
        ring_types = [P, P, P, P, I, I, L, L, real, P, P, I, U64, D, D, I, U64, P, L, P, P, P, P,
                      U64]
        launch_types = [ctypes.c_uint, ctypes.c_uint, ctypes.c_size_t, I]
        getattr(lib, f"shim_launch_ring_dense_{suffix}").argtypes = launch_types + [P, L] + ring_types
        getattr(lib, f"shim_launch_ring_sparse_{suffix}").argtypes = launch_types + [P] * 5 + ring_types
    lib.shim_factors_sparse_f64.argtypes = [P, P, P, P, L, P, P, P, ctypes.c_int, D, D]
    lib.shim_update_factors_f64.argtypes = update_types
    return lib


def test_synchronising_kernels_have_no_data_race_under_thread_sanitizer(tmp_path):
    """The dense factor kernel (a thread per CUDA thread, barriers over shared tiles) and the
    ring kernel (a thread per block, waits on counters) under ThreadSanitizer: a missing
    barrier or an H block read before it was published is reported even where the numbers
    come out right (tests/cuda_shim_races.cpp)."""
    if GXX is None:
        pytest.skip("g++ is not installed")
    here = os.path.dirname(__file__)
    program = tmp_path / "races"
    built = subprocess.run([GXX, "-std=c++14", "-O1", "-g", "-fsanitize=thread", "-pthread",
                            "-Wno-tsan", "-I", gpu.include_dir(), *GSL_INCLUDE, "-I", gpu.kernel_dir(),
                            os.path.join(here, "cuda_shim_races.cpp"), "-o", str(program)],
                           capture_output=True, text=True, timeout=300)
    if built.returncode != 0 and "tsan" in built.stderr.lower():
        pytest.skip(f"this g++ cannot build with ThreadSanitizer: {built.stderr.strip()[-200:]}")
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=300)
    if "FATAL: ThreadSanitizer" in done.stderr:  # e.g. a kernel whose memory layout TSan rejects
        pytest.skip(f"ThreadSanitizer cannot run here: {done.stderr.strip()[:200]}")
    assert "WARNING: ThreadSanitizer" not in done.stderr, done.stderr[:4000]
    assert done.returncode == 0 and done.stdout.startswith("checksum"), done.stdout + done.stderr


def ptr(array):
    return None if array is None else array.ctypes.data_as(ctypes.c_void_p)


def shim_iteration(lib, data, W, Ht, G, t, eps, model, noise_seed, dense_V=None):
    """One PSGLD iteration (cyclic part (t - 1) mod B) with the GPU kernels on the CPU."""
    part = (t - 1) % data.n_blocks
    lay = nmf_gpu.part_layout(data, part)
    scale = data.n_observed / data.part_sizes()[part]
    coef = scale / model.phi
    n_rows, n_cols = data.shape
    K = model.rank
    if dense_V is None:
        rows, cols, vals = data.sparse_entries()
        lib.shim_factors_sparse_f64(ptr(rows), ptr(cols), ptr(vals), ptr(lay["entries"]),
                                    len(lay["entries"]), ptr(W), ptr(Ht), ptr(G), K, model.beta, coef)
        w = (lay["w_first"], lay["w_count"], None, 0, lay["w_terms"], lay["w_partner"])
        h = (lay["h_first"], lay["h_count"], None, 0, lay["h_terms"], lay["h_partner"])
    else:
        # the dense factor kernel uses shared-memory tiles (GPU only): G from NumPy here
        G[:] = 0.0
        B, rs, cs, width = data.n_blocks, data.row_start, data.col_start, lay["max_width"]
        G2 = G.reshape(n_rows, width)
        for b in range(B):
            c = (b + part) % B
            mu = W[rs[b]:rs[b + 1]] @ Ht[cs[c]:cs[c + 1]].T
            G2[rs[b]:rs[b + 1], : cs[c + 1] - cs[c]] = coef * _tweedie.dlogp_dmu(
                dense_V[rs[b]:rs[b + 1], cs[c]:cs[c + 1]], mu, model.beta)
        w = (lay["w_first"], lay["w_count"], lay["w_offset"], lay["w_stride"], None, None)
        h = (lay["h_first"], lay["h_count"], lay["h_offset"], lay["h_stride"], None, None)
    flag = np.zeros(1, np.int32)
    W_next, Ht_next = np.empty_like(W), np.empty_like(Ht)
    exponential = int(model.prior == "exponential")
    layout = [[ptr(a) if isinstance(a, np.ndarray) or a is None else a for a in args] for args in (w, h)]
    lib.shim_update_factors_f64(ptr(W_next), ptr(W), ptr(Ht_next), ptr(Ht), ptr(G), *layout[0],
                                n_rows, model.lam_w, *layout[1], n_cols, model.lam_h, K, eps,
                                exponential, noise_seed, t, ptr(flag), None, None)
    assert flag[0] == 0
    return W_next, Ht_next


def host_problem(sparse, beta, prior, n_rows=31, n_cols=23, K=6, B=3):
    """A small Tweedie-NMF problem on a permuted 3 x 3 grid and the C sampler's chain at a
    random starting point: (data, model, noise_seed, chain, W, Ht)."""
    rng = np.random.default_rng(4)
    V = rng.gamma(2.0, 1.0, (n_rows, n_cols))
    model = pymf.TweedieNMF(K, beta=beta, phi=1.3, prior=prior, lam_w=0.7, lam_h=1.4)
    if sparse:
        mask = rng.random(V.shape) < 0.5
        r, c = np.nonzero(mask)
        data = _blocks.BlockedData.from_sparse(r.astype(np.int64), c.astype(np.int64), V[mask], V.shape, B, True, 9)
    else:
        data = _blocks.BlockedData.from_dense(V, B, True, 9)
    noise_seed = 0xABCDEF12345
    chain = _sgld.LangevinChain(data, "psgld", K, beta, 1.3, prior, 0.7, 1.4, noise_seed, 1)
    W = rng.uniform(0.2, 1.0, (n_rows, K))
    Ht = rng.uniform(0.2, 1.0, (n_cols, K))
    chain.set_state(W, Ht, 0)
    return data, model, noise_seed, chain, W, Ht


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("beta, prior", [(0.5, "exponential"), (2.0, "gaussian")])
def test_kernels_on_cpu_reproduce_the_c_sampler(shim, sparse, beta, prior):
    data, model, noise_seed, chain, W, Ht = host_problem(sparse, beta, prior)
    n_rows = data.shape[0]
    G = np.zeros(data.n_observed if sparse else n_rows * int(np.max(np.diff(data.col_start))))
    dense_V = None if sparse else data.dense_values()
    for t in range(1, 4):  # every part once
        eps = 1e-3 / t
        W, Ht = shim_iteration(shim, data, W, Ht, G, t, eps, model, noise_seed, dense_V)
        chain.run(np.array([eps]))
        W_c, Ht_c, _ = chain.get_state()
        if sparse:  # the same operations in the same order: the same bits
            assert np.array_equal(W, W_c) and np.array_equal(Ht, Ht_c)
        else:  # G from NumPy's matrix product: equal to rounding
            np.testing.assert_allclose(W, W_c, rtol=1e-11, atol=1e-13)
            np.testing.assert_allclose(Ht, Ht_c, rtol=1e-11, atol=1e-13)
        W, Ht = W_c, Ht_c


class HostShimDevice:
    """pymf.gpu's device interface over host memory, for CudaPSGLDChain on the CPU: each
    launch runs the grid that the chain chose through the C++ shim, with the kernel's own
    arguments; every kernel runs as written (the dense factor kernel with a std::thread per
    CUDA thread and real barriers, the ring kernels' blocks on concurrent threads;
    `absent_block` never runs, as a block that is never made resident)."""

    name = "host-shim"
    null = None

    def __init__(self, lib, multiprocessors=132, shared_limit=gpu.DEFAULT_SHARED_LIMIT):
        self.lib = lib
        self.launched = []
        self.multiprocessors = multiprocessors
        self.shared_limit = shared_limit
        self.allowed_shared = {}
        self.absent_block = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def to_device(self, array):
        return np.array(array, copy=True, order="C")

    def zeros(self, n, dtype):
        return np.zeros(n, dtype)

    def empty_like(self, array):
        return np.empty_like(array)

    def to_host(self, array):
        return array.copy()

    def copy(self, dst, src):
        np.copyto(dst, src)

    def clear(self, array):
        array.fill(0)

    def upload(self, dst, host):
        dst[:len(host)] = host

    def kernels(self, suffix):
        return {name: (name, suffix) for name in gpu.KERNEL_NAMES}

    def allow_shared(self, kernel, shared_bytes):
        self.allowed_shared[kernel[0]] = shared_bytes

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        name, suffix = kernel
        assert shared_bytes <= max(gpu.DEFAULT_SHARED_LIMIT, self.allowed_shared.get(name, 0))
        self.launched.append(name)
        if name == "psgld_factors_dense":
            assert block[2] == 1
            getattr(self.lib, f"shim_launch_factors_dense_{suffix}")(
                *grid, *block[:2], *[ptr(a) if isinstance(a, np.ndarray) else a.item() for a in args])
            return
        assert grid[1:] == (1, 1) and block[1:] == (1, 1)
        launcher = getattr(self.lib, f"shim_launch_{name[len('psgld_'):]}_{suffix}")
        extra = (shared_bytes, self.absent_block) if name.startswith("psgld_ring") else ()
        launcher(grid[0], block[0], *extra, *[ptr(a) if isinstance(a, np.ndarray) or a is None
                                              else a.item() for a in args])


def dense_factors(V, W, Ht, G, row_start, col_start, n_blocks, part, n_cols, rank, max_width, beta,
                  coef):
    """psgld_factors_dense_*, by its definition: G[r, j - c0] = coef d/dmu log p(V_rj | mu_rj)."""
    G2 = G.reshape(-1, int(max_width))
    V2 = V.reshape(-1, int(n_cols))
    for b in range(int(n_blocks)):
        c = (b + int(part)) % int(n_blocks)
        r0, r1, c0, c1 = row_start[b], row_start[b + 1], col_start[c], col_start[c + 1]
        mu = W[r0:r1].astype(np.float64) @ Ht[c0:c1].astype(np.float64).T
        G2[r0:r1, : c1 - c0] = float(coef) * _tweedie.dlogp_dmu(V2[r0:r1, c0:c1], mu, float(beta)
                                                               ).reshape(mu.shape)


def chains_on_the_host(shim, sparse, beta, prior, dtype=np.float64, check_every=64,
                       strategy="launches", n_blocks=3):
    """The C sampler's chain and the GPU chain over the host shim, from the same state."""
    data, model, noise_seed, cpu, W, Ht = host_problem(sparse, beta, prior, B=n_blocks)
    device = HostShimDevice(shim)
    cuda = nmf_gpu.CudaPSGLDChain(data, model, pymf.PSGLD(blocks=data.n_blocks), noise_seed,
                              dtype=dtype, device=device, check_every=check_every,
                              strategy=strategy)
    cuda.set_state(W, Ht, 0)
    return cpu, cuda, device


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("beta, prior", [(0.5, "exponential"), (2.0, "gaussian")])
def test_gpu_chain_iteration_on_host_shim_reproduces_the_c_sampler(shim, sparse, beta, prior):
    """CudaPSGLDChain.run itself (layouts, launch sizes, argument lists, noise streams, buffer
    swaps) with every kernel run on the CPU as written (the dense factor kernel's 16 x 16
    threads with real barriers over shared-memory tiles): the C sampler's chain, bit for bit,
    since the kernels do the C core's operations in its order."""
    cpu, cuda, device = chains_on_the_host(shim, sparse, beta, prior)
    steps = 1e-3 / np.arange(1, 7) ** 0.51  # every part twice
    for eps in steps:
        cpu.run(np.array([eps]))
        cuda.run(np.array([eps]))
        W_c, Ht_c, t_c = cpu.get_state()
        W_g, Ht_g, t_g = cuda.get_state()
        assert t_g == t_c
        assert np.array_equal(W_g, W_c) and np.array_equal(Ht_g, Ht_c)
    factors = "psgld_factors_sparse" if sparse else "psgld_factors_dense"
    assert device.launched == [factors, "psgld_update_factors"] * len(steps)


def test_gpu_chain_queues_chunks_of_iterations_without_changing_the_chain(shim):
    cpu, cuda, _ = chains_on_the_host(shim, True, 0.5, "exponential", check_every=4)
    steps = 1e-3 / np.arange(1, 11) ** 0.51  # 10 iterations: chunks of 4, 4 and 2
    cpu.run(steps)
    cuda.run(steps)
    W_c, Ht_c, t_c = cpu.get_state()
    W_g, Ht_g, t_g = cuda.get_state()
    assert t_g == t_c == 10 and np.array_equal(W_g, W_c) and np.array_equal(Ht_g, Ht_c)
    with pytest.raises(ValueError, match="check_every"):
        chains_on_the_host(shim, True, 0.5, "exponential", check_every=0)


@pytest.mark.parametrize("sparse, strategy", [(True, "launches"), (False, "ring"), (True, "ring")])
def test_gpu_chain_float32_on_host_shim_follows_the_c_sampler(shim, sparse, strategy):
    cpu, cuda, _ = chains_on_the_host(shim, sparse, 1.0, "exponential", dtype=np.float32,
                                      strategy=strategy)
    assert cuda.W.dtype == np.float32
    for eps in 1e-3 / np.arange(1, 4) ** 0.51:
        cpu.run(np.array([eps]))
        cuda.run(np.array([eps]))
    np.testing.assert_allclose(cuda.get_state()[0], cpu.get_state()[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cuda.get_state()[1], cpu.get_state()[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("check_every", [1, 3, 64])
@pytest.mark.parametrize("sparse, strategy", [(True, "launches"), (False, "ring"), (True, "ring")])
def test_gpu_chain_divergence_on_host_shim_keeps_the_last_finite_state(shim, check_every, sparse,
                                                                        strategy):
    """An absurd step overflows within a few iterations: the GPU chain stops at the same
    iteration as the C sampler, keeps the same last finite state (whether the divergence
    falls at the start of a chunk of queued iterations or inside one), and can go on."""
    cpu, cuda, _ = chains_on_the_host(shim, sparse, 1.0, "exponential", check_every=check_every,
                                      strategy=strategy)
    cpu.run(np.array([1e-3]))  # the divergence, a few iterations in, falls inside a chunk of 3
    cuda.run(np.array([1e-3]))
    steps = np.full(50, 1e300)
    errors = []
    for chain in (cpu, cuda):
        with pytest.raises(pymf.DivergenceError, match="diverged at iteration") as info:
            chain.run(steps)
        errors.append(info.value.iteration)
    assert errors[0] == errors[1] >= 1
    W_c, Ht_c, t_c = cpu.get_state()
    W_g, Ht_g, t_g = cuda.get_state()
    assert t_g == t_c == errors[1] - 1
    assert np.array_equal(W_g, W_c) and np.array_equal(Ht_g, Ht_c)
    assert np.all(np.isfinite(W_g)) and np.all(np.isfinite(Ht_g))
    cuda.set_state(np.full_like(W_g, 0.5), np.full_like(Ht_g, 0.5), t_g)
    cuda.run(np.array([1e-3]))  # the divergence flag was reset: the chain goes on
    assert cuda.iteration == t_g + 1


@pytest.mark.parametrize("sparse, strategy", [(True, "launches"), (False, "ring"), (True, "ring")])
def test_gpu_chain_float32_divergence_keeps_a_finite_state(shim, sparse, strategy):
    """A float32 chain overflows where the double arithmetic does not (3.4e38): that is
    divergence too, caught on the iteration that stores the infinity, so the kept state is
    finite."""
    _, cuda, _ = chains_on_the_host(shim, sparse, 1.0, "exponential", dtype=np.float32,
                                    strategy=strategy, check_every=8)
    with pytest.raises(pymf.DivergenceError, match="diverged at iteration"):
        cuda.run(np.geomspace(1e30, 1e80, 40))
    W, Ht, t = cuda.get_state()
    assert t >= 1 and np.all(np.isfinite(W)) and np.all(np.isfinite(Ht))


@pytest.mark.parametrize("sparse, strategy", [(True, "launches"), (False, "ring")])
def test_gpu_chain_rejects_bad_step_sizes_as_the_c_sampler_does(shim, sparse, strategy):
    cpu, cuda, _ = chains_on_the_host(shim, sparse, 1.0, "exponential", strategy=strategy)
    for bad in (0.0, -1e-3, np.nan, np.inf):
        messages = []
        for chain in (cpu, cuda):
            with pytest.raises(ValueError, match="must be positive and finite") as info:
                chain.run(np.array([1e-4, 1e-4, bad, 1e-4]))
            messages.append(str(info.value))
        assert messages[0] == messages[1]  # the same iteration named: the first two ran
        assert cpu.iteration == cuda.iteration
    for a, b in zip(cpu.get_state()[:2], cuda.get_state()[:2]):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_sparse_launch_layouts_share_the_entry_lists(shim):
    """The nnz-long term lists are the same for every part: on the device once, not B times."""
    _, cuda, _ = chains_on_the_host(shim, True, 1.0, "exponential", strategy="launches")
    for key in ("w_terms", "h_terms"):
        assert all(layout[key] is cuda.layouts[0][key] for layout in cuda.layouts)
        assert all("w_partner" not in layout for layout in cuda.layouts)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n_blocks", [3, 7])
@pytest.mark.parametrize("beta, prior", [(0.5, "exponential"), (2.0, "gaussian")])
def test_ring_kernel_on_host_shim_reproduces_the_c_sampler(shim, beta, prior, n_blocks, sparse):
    """psgld_ring_dense_* runs a chunk of iterations in one launch, each thread block (here a
    CPU thread of its own) keeping its W rows and waiting only for its ring neighbour's H
    block: the C sampler's chain, bit for bit (the same operations in the same order), over
    10 iterations in chunks of 4, 4 and 2 iterations per launch."""
    cpu, cuda, device = chains_on_the_host(shim, sparse, beta, prior, check_every=4, strategy="ring",
                                           n_blocks=n_blocks)
    steps = 1e-3 / np.arange(1, 11) ** 0.51
    cpu.run(steps)
    cuda.run(steps)
    W_c, Ht_c, t_c = cpu.get_state()
    W_g, Ht_g, t_g = cuda.get_state()
    assert t_g == t_c == 10
    assert np.array_equal(W_g, W_c) and np.array_equal(Ht_g, Ht_c)
    assert device.launched == ["psgld_ring_sparse" if sparse else "psgld_ring_dense"] * 3


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sparse", [False, True])
def test_ring_kernel_and_launches_give_the_same_chain(shim, sparse, dtype):
    """The two strategies of CudaPSGLDChain on one problem: the same chain, bit for bit."""
    _, ring, _ = chains_on_the_host(shim, sparse, 2.0, "gaussian", dtype, strategy="ring")
    _, launches, _ = chains_on_the_host(shim, sparse, 2.0, "gaussian", dtype, strategy="launches")
    steps = 1e-3 / np.arange(1, 8) ** 0.51
    ring.run(steps)
    launches.run(steps)
    for a, b in zip(ring.get_state()[:2], launches.get_state()[:2]):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("strategy", ["launches", "ring"])
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("beta, prior", [(1.0, "exponential"), (2.0, "gaussian")])
def test_row_step_factors_on_host_shim_reproduce_the_c_sampler(shim, strategy, sparse, beta,
                                                               prior):
    """Per-coordinate step factors (PSGLD's per-row bound) set from iteration 4 on: both
    strategies, queued in chunks of 3 iterations (one crosses iteration 4), mirrored and not,
    move the chain as the C sampler does, bit for bit; without the factors they differ."""
    cpu, cuda, _ = chains_on_the_host(shim, sparse, beta, prior, check_every=3,
                                      strategy=strategy)
    plain_cpu, _, _ = chains_on_the_host(shim, sparse, beta, prior)
    rng = np.random.default_rng(4)
    W, Ht, _ = cpu.get_state()
    step_W = rng.uniform(0.05, 1.0, W.shape)
    step_Ht = rng.uniform(0.05, 1.0, Ht.shape)
    cpu.set_row_steps(step_W, step_Ht, 4)
    cuda.set_row_steps(step_W, step_Ht, 4)
    steps = 1e-3 / np.arange(1, 8) ** 0.51
    cpu.run(steps)
    cuda.run(steps)
    plain_cpu.run(steps)
    for a, b, plain in zip(cuda.get_state()[:2], cpu.get_state()[:2], plain_cpu.get_state()[:2]):
        assert np.array_equal(a, b)
        assert not np.array_equal(a, plain)
    with pytest.raises(ValueError, match="step factor"):
        cuda.set_row_steps(step_W * 0, step_Ht, 4)


def test_dense_factor_kernel_with_many_tiles_and_a_ragged_rank(shim):
    """psgld_factors_dense_* where tiles, blocks and the rank do not line up (70 x 50 on 2
    blocks: 3 x 2 tiles of 16 per block; rank 21: two tiles of k, a ragged last group of
    four): the C sampler's chain bit for bit, and G equal to its NumPy definition."""
    rng = np.random.default_rng(8)
    V = rng.gamma(2.0, 1.0, (70, 50))
    data = _blocks.BlockedData.from_dense(V, 2, True, 3)
    W, Ht = rng.uniform(0.1, 0.5, (70, 21)), rng.uniform(0.1, 0.5, (50, 21))
    cpu = _sgld.LangevinChain(data, "psgld", 21, 1.5, 1.0, "exponential", 1.0, 1.0, 5, 1)
    device = HostShimDevice(shim)
    cuda = nmf_gpu.CudaPSGLDChain(data, pymf.TweedieNMF(21, beta=1.5), pymf.PSGLD(blocks=2), 5,
                              device=device, strategy="launches")
    for chain in (cpu, cuda):
        chain.set_state(W, Ht, 0)
        chain.run(np.full(4, 1e-4))
    W_g, Ht_g, _ = cuda.get_state()
    W_c, Ht_c, _ = cpu.get_state()
    assert np.array_equal(W_g, W_c) and np.array_equal(Ht_g, Ht_c)
    G_kernel, G_numpy = np.zeros(70 * cuda.max_width), np.zeros(70 * cuda.max_width)
    head = (cuda.V, W_g, Ht_g)
    tail = (cuda.row_start, cuda.col_start, np.int32(2), np.int32(1), np.int64(50), np.int32(21),
            np.int64(cuda.max_width), np.float64(1.5), np.float64(0.7))
    tiles = -(-cuda.max_width // 16) * -(-cuda.max_height // 16)
    device.launch(cuda.factors, (tiles, 1, 2), (16, 16, 1), (*head, G_kernel, *tail))
    dense_factors(*head, G_numpy, *tail)
    assert np.count_nonzero(G_numpy) == 70 * 25  # every entry of the part, each block 25 wide
    np.testing.assert_allclose(G_kernel, G_numpy, rtol=1e-12, atol=1e-14)


def test_ring_strategy_is_chosen_only_where_it_applies(shim):
    data, model, noise_seed, _, _, _ = host_problem(False, 1.0, "exponential")
    sampler = pymf.PSGLD(blocks=data.n_blocks)

    def chain(data=data, model=model, multiprocessors=132, strategy="auto",
              shared_limit=gpu.DEFAULT_SHARED_LIMIT):
        device = HostShimDevice(shim, multiprocessors, shared_limit)
        return nmf_gpu.CudaPSGLDChain(data, model, sampler, noise_seed, device=device, strategy=strategy)

    assert chain().strategy == "ring"
    assert chain(strategy="launches").strategy == "launches"
    assert chain(host_problem(True, 1.0, "exponential")[0]).strategy == "ring"
    assert chain(multiprocessors=2).strategy == "launches"
    with pytest.raises(ValueError, match="3 blocks cannot all be resident on 2"):
        chain(multiprocessors=2, strategy="ring")
    wide = pymf.TweedieNMF(400, beta=1.0)  # W_b twice and H_c: 400 * 29 doubles > 48 KB
    assert chain(model=wide).strategy == "launches"
    with pytest.raises(ValueError, match="bytes of shared memory, over the device's 48128"):
        chain(model=wide, strategy="ring")
    # a device that lets a kernel opt in to more (an H100: 227 KB): the ring, with the opt-in
    roomy = chain(model=wide, shared_limit=227 * 1024)
    assert roomy.strategy == "ring"
    assert roomy.device.allowed_shared["psgld_ring_dense"] == roomy.ring_shared_bytes() > 48 * 1024
    # sparse: G holds the largest block's entries
    rng = np.random.default_rng(0)
    crowded = _blocks.BlockedData.from_sparse(np.repeat(np.arange(3000), 3), np.tile(np.arange(3), 3000),
                                              rng.random(9000), (3000, 3), 1, False, 0)
    assert chain(crowded, pymf.TweedieNMF(2)).strategy == "launches"
    with pytest.raises(ValueError, match="strategy must be"):
        chain(strategy="threads")


def test_ring_kernel_without_a_resident_block_raises_and_keeps_the_state(shim):
    """A thread block that never runs (never made resident) must not hang the others: they
    give up after spin_limit polls, and the chain raises with its state before the chunk."""
    _, cuda, device = chains_on_the_host(shim, False, 1.0, "exponential", strategy="ring")
    steps = np.full(6, 1e-4)
    cuda.run(steps[:2])
    W0, Ht0, t0 = cuda.get_state()
    device.absent_block = 0
    cuda.ring_wait_seconds = 0.05
    with pytest.raises(RuntimeError, match="waited in vain"):
        cuda.run(steps)
    W1, Ht1, t1 = cuda.get_state()
    assert t1 == t0 and np.array_equal(W1, W0) and np.array_equal(Ht1, Ht0)
    device.absent_block = -1
    cuda.run(steps[:1])
    assert cuda.iteration == t0 + 1


@pytest.fixture
def shim_as_gpu(shim, monkeypatch):
    """pymf.gpu reaching the host shim as if it were a GPU: pymf.sample(backend="cuda") then
    runs its whole pipeline (CudaPSGLDChain, kept samples, traces) on the CPU."""
    monkeypatch.setattr(gpu, "is_available", lambda: True)
    monkeypatch.setattr(gpu, "open_device", lambda: HostShimDevice(shim))
    monkeypatch.setattr(gpu, "loader", lambda: "host-shim")


def poisson_nmf_data(n_rows, n_cols, rank, sparse):
    """Poisson-NMF data: the dense matrix, or half of its entries as Ratings."""
    V, _, _ = pymf.datasets.make_tweedie_nmf(n_rows, n_cols, rank, seed=1)
    if not sparse:
        return V
    rows, cols = np.nonzero(np.random.default_rng(0).random(V.shape) < 0.5)
    return pymf.Ratings(rows, cols, V[rows, cols], shape=V.shape)


@pytest.mark.parametrize("sparse", [False, True])
def test_sample_with_cuda_backend_on_host_shim_equals_cpu_backend(shim_as_gpu, sparse):
    data = poisson_nmf_data(40, 36, 4, sparse)
    model = pymf.TweedieNMF(4)
    runs = {backend: pymf.sample(model, data, pymf.PSGLD(blocks=4, step_size=1e-4, backend=backend),
                                 n_samples=30, burnin=10, thin=3, seed=2, progress=False)
            for backend in ("cpu", "cuda")}
    assert np.array_equal(runs["cuda"].W_samples, runs["cpu"].W_samples)
    assert np.array_equal(runs["cuda"].H_samples, runs["cpu"].H_samples)
    assert np.array_equal(runs["cuda"].trace["loglik"], runs["cpu"].trace["loglik"])
    single = pymf.sample(model, data, pymf.PSGLD(blocks=4, step_size=1e-4, backend="cuda",
                                                 dtype="float32"),
                         n_samples=30, burnin=10, thin=3, seed=2, progress=False)
    np.testing.assert_allclose(single.W_mean, runs["cpu"].W_mean, rtol=1e-4, atol=1e-6)


def test_gpu_state_is_copied_back_once_between_runs(shim):
    _, cuda, device = chains_on_the_host(shim, False, 1.0, "exponential", strategy="ring")
    copies = []
    to_host = device.to_host
    device.to_host = lambda array: copies.append(array.shape) or to_host(array)
    cuda.run(np.full(3, 1e-4))
    copies.clear()
    first = cuda.get_state()
    cuda.loglik()
    second = cuda.get_state()
    assert len(copies) == 2  # W and H^T, once
    first[0][:] = -1.0  # the caller's copy, not the cache
    assert np.array_equal(second[0], cuda.get_state()[0]) and np.all(second[0] >= 0)
    cuda.run(np.full(1, 1e-4))
    copies.clear()
    assert cuda.get_state()[2] == 4 and len(copies) == 2


def test_ring_launch_uses_the_kernels_own_thread_count():
    """The ring launches RING_THREADS threads a block: the kernel's __launch_bounds__
    (PYMF_RING_THREADS). More threads than that fail at launch on a GPU; fewer leave the
    kernel's register budget unused (and the shim, with one thread a block, cannot tell)."""
    import re
    with open(gpu.kernel_source()) as fh:
        defined = re.search(r"^#define PYMF_RING_THREADS (\d+)$", fh.read(), re.MULTILINE)
    assert defined is not None and int(defined.group(1)) == nmf_gpu.RING_THREADS


def test_psgld_dtype_is_checked():
    assert pymf.PSGLD(blocks=2, backend="cuda", dtype="float32").params()["dtype"] == "float32"
    with pytest.raises(ValueError, match="backend='cuda' only"):
        pymf.PSGLD(blocks=2, dtype="float32")
    with pytest.raises(ValueError, match="dtype must be"):
        pymf.PSGLD(blocks=2, backend="cuda", dtype="float16")


def test_auto_strategy_goes_on_with_launches_when_the_ring_stalls(shim):
    """strategy='auto' on a GPU whose blocks are not all resident: a warning, then the same
    chain through two launches per iteration, from the stalled chunk's first state."""
    cpu, cuda, device = chains_on_the_host(shim, False, 1.0, "exponential", strategy="auto",
                                           check_every=4)
    assert cuda.strategy == "ring"
    steps = 1e-4 / np.arange(1, 11) ** 0.51
    cuda.run(steps[:3])
    device.absent_block = 1
    cuda.ring_wait_seconds = 0.05
    with pytest.warns(RuntimeWarning, match="not all resident"):
        cuda.run(steps[3:])
    assert cuda.strategy == "launches"
    cpu.run(steps)
    assert cuda.iteration == cpu.iteration == 10
    for a, b in zip(cuda.get_state()[:2], cpu.get_state()[:2]):
        assert np.array_equal(a, b)


def test_cuda_backend_is_registered_and_refuses_without_gpu():
    if gpu.is_available():
        pytest.skip("a usable GPU is present")
    reason = gpu.why_unavailable()
    assert gpu.is_available() is False and isinstance(reason, str) and reason
    with pytest.raises(RuntimeError, match="GPU path is unusable"):
        pymf.sample(pymf.TweedieNMF(2), np.ones((6, 6)), pymf.PSGLD(blocks=2, backend="cuda"), n_samples=2)


needs_gpu = pytest.mark.skipif(not gpu.is_available(), reason=f"no usable GPU: {gpu.why_unavailable()}")


@needs_gpu
@pytest.mark.parametrize("sparse", [False, True])
def test_gpu_chain_follows_cpu_chain(sparse):
    data = poisson_nmf_data(96, 80, 8, sparse)
    model = pymf.TweedieNMF(8)
    runs = [pymf.sample(model, data, pymf.PSGLD(blocks=4, step_size=1e-4, backend=backend),
                        n_samples=10, seed=2) for backend in ("cpu", "cuda")]
    np.testing.assert_allclose(runs[1].W_samples, runs[0].W_samples, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(runs[1].H_samples, runs[0].H_samples, rtol=1e-9, atol=1e-12)


def ring_and_c_sampler_on_many_blocks(device, dtype, sparse):
    """The final states of the C sampler and of the ring kernel after 500 iterations of a
    256 x 224 problem on 32 blocks (dense, or 30% of its entries), in launches of 100
    iterations: any H block read before its ring neighbour published it would make the two
    chains part."""
    V, _, _ = pymf.datasets.make_tweedie_nmf(256, 224, 8, seed=3)
    if sparse:
        r, c = np.nonzero(np.random.default_rng(6).random(V.shape) < 0.3)
        data = _blocks.BlockedData.from_sparse(r.astype(np.int64), c.astype(np.int64), V[r, c],
                                               V.shape, 32, True, 8)
    else:
        data = _blocks.BlockedData.from_dense(V, 32)
    cpu = _sgld.LangevinChain(data, "psgld", 8, 1.0, 1.0, "exponential", 1.0, 1.0, 77, 1)
    ring = nmf_gpu.CudaPSGLDChain(data, pymf.TweedieNMF(8), pymf.PSGLD(blocks=32), 77, dtype=dtype,
                              device=device, check_every=100, strategy="ring")
    rng = np.random.default_rng(5)
    W0, Ht0 = rng.uniform(0.3, 1.0, (256, 8)), rng.uniform(0.3, 1.0, (224, 8))
    for chain in (cpu, ring):
        chain.set_state(W0, Ht0, 0)
        chain.run(np.full(500, 1e-5))
    return ring.get_state()[:2], cpu.get_state()[:2]


@pytest.mark.parametrize("sparse", [False, True])
def test_ring_kernel_on_host_shim_with_32_concurrent_blocks(shim, sparse):
    (W_g, Ht_g), (W_c, Ht_c) = ring_and_c_sampler_on_many_blocks(HostShimDevice(shim), np.float64,
                                                                 sparse)
    assert np.array_equal(W_g, W_c) and np.array_equal(Ht_g, Ht_c)


@needs_gpu
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype, tolerance", [(np.float64, 1e-9), (np.float32, 1e-3)])
def test_gpu_ring_kernel_follows_cpu_chain_on_many_blocks(dtype, tolerance, sparse):
    """The ring kernel's waits under the GPU's memory model (L2 loads, fences, counters)."""
    for a, b in zip(*ring_and_c_sampler_on_many_blocks(None, dtype, sparse)):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * 1e-2)


@needs_gpu
def test_gpu_posterior_mean_matches_cpu():
    from mcmc_stats import batch_means, bonferroni_z, z_scores
    from test_posterior import V_POISSON
    model = pymf.TweedieNMF(2)
    draws = {}
    for backend in ("cpu", "cuda"):
        chains = []
        for seed in range(4):
            res = pymf.sample(model, V_POISSON, pymf.PSGLD(blocks=3, step_size=1e-3, backend=backend),
                              n_samples=200_000, burnin=20_000, thin=100, seed=500 + seed + (backend == "cuda") * 50,
                              trace_every=200_000)
            chains.append(np.einsum("sik,skj->sij", res.W_samples, res.H_samples))
        draws[backend] = batch_means(np.stack(chains))
    z = z_scores(*draws["cuda"], *draws["cpu"]).ravel()
    assert np.all(np.abs(z) < bonferroni_z(1e-3, z.size))


def psgld_auto_runs(sparse):
    """run(backend, step="auto"): PSGLD on a 40 x 36 Poisson NMF (dense or sparse) with a
    burn-in, so that the default step bounds each row after it (the per-row tests below)."""
    data = poisson_nmf_data(40, 36, 4, sparse)
    model = pymf.TweedieNMF(4)

    def run(backend, step="auto"):
        return pymf.sample(model, data, pymf.PSGLD(blocks=4, backend=backend, step_size=step),
                           n_samples=20, burnin=10, thin=2, seed=2, progress=False)
    return run


@pytest.mark.parametrize("sparse", [False, True])
def test_gpu_auto_step_runs_the_per_row_bound_as_the_cpu_chain(shim_as_gpu, sparse):
    """PSGLD's default "auto" on the GPU chain (the kernels on the host shim): after the
    burn-in the kernels move each coordinate with its step factor (pymf.engine.autostep,
    point 5), measured by the CPU core's Fisher curvature on the host: the chain, its
    factors and their record are the CPU chain's bit for bit (float64), in chunks that
    cross the burn-in's end. Power: without the factors the chains differ."""
    run = psgld_auto_runs(sparse)
    cuda, cpu = run("cuda"), run("cpu")
    chosen = cuda.params["auto_step"]
    assert chosen["row_steps_from"] == 11 and chosen["row_steps"]["min"] < 1
    assert chosen == cpu.params["auto_step"]
    assert np.array_equal(cuda.W_samples, cpu.W_samples)
    assert np.array_equal(cuda.H_samples, cpu.H_samples)
    assert np.array_equal(cuda.trace["loglik"], cpu.trace["loglik"])
    plain = run("cuda", pymf.AutoStep(per_row=False))
    assert not np.array_equal(plain.W_samples, cuda.W_samples)
    assert np.array_equal(plain.W_samples, run("cpu", pymf.AutoStep(per_row=False)).W_samples)


@needs_gpu
@pytest.mark.parametrize("sparse", [False, True])
def test_gpu_auto_step_per_row_bound_follows_cpu_chain(sparse):
    """PSGLD's default "auto" on a real GPU: the per-row factors, measured on the host from
    the GPU chain's post-burn-in state, and the bounded moves after it follow the CPU chain
    within float64 rounding (the device may contract multiply-adds, so not bit for bit).
    Power: without the factors the GPU chain moves away from the bounded one."""
    run = psgld_auto_runs(sparse)
    cuda, cpu = run("cuda"), run("cpu")
    chosen, reference = cuda.params["auto_step"], cpu.params["auto_step"]
    assert chosen["row_steps_from"] == reference["row_steps_from"] == 11
    assert chosen["row_steps"]["min"] == pytest.approx(reference["row_steps"]["min"], rel=1e-9)
    np.testing.assert_allclose(cuda.W_samples, cpu.W_samples, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cuda.H_samples, cpu.H_samples, rtol=1e-9, atol=1e-12)
    plain = run("cuda", pymf.AutoStep(per_row=False))
    assert np.max(np.abs(plain.W_samples - cuda.W_samples)) > 1e-6
