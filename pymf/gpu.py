"""The GPU path of PSGLD: pycuda loading the hand-written kernels of cuda/psgld.cu.

Optional at build time and at run time: importing pymf never needs pycuda or a GPU.
available() returns True, or a string saying why the GPU path cannot be used.
pymf.PSGLD(..., backend="cuda") runs through CudaPSGLDChain; where the GPU is unusable that
is an error, never a silent fall-back to the CPU.

The kernels include the C core's headers (shipped in pymf/cuda/include), compiled at first
use with pycuda's SourceModule (no_extern_c=True) and the device's own architecture, within
the primary context (never pycuda.autoinit). part_layout() computes, for a part of the
block grid, the index arrays that let one thread per (row, group of 4 factors) sum its
gradient without atomics; the CPU tests run the same kernels on these layouts through a
C++ shim (tests/test_cuda.py).
"""
import functools
import os

import numpy as np


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
    if not os.path.exists(kernel_source()):
        return "this build of pymf has no CUDA PSGLD kernels (cuda/psgld.cu is missing)"
    return True


def kernel_dir():
    from pymf import cuda
    return str(cuda.source_dir())


def kernel_source():
    return os.path.join(kernel_dir(), "psgld.cu")


def include_dir():
    """The C core's headers: shipped inside pymf.cuda, or core/include in a source tree."""
    shipped = os.path.join(kernel_dir(), "include")
    if os.path.isdir(os.path.join(shipped, "pymf")):
        return shipped
    return os.path.join(os.path.dirname(kernel_dir()), "core", "include")


def part_layout(data, part):
    """Index arrays of part `part` of a BlockedData for the update kernel (grid order).

    Returns a dict with, for the W update ("w_*", one entry per grid row) and the H update
    ("h_*", one per grid column): first (partner start, or offset into the term list),
    count (terms), g_offset (dense: offset of the first term in G), g_stride (dense), and for
    sparse data terms (entry ids) and partner (the other index of each entry).
    """
    B = data.n_blocks
    row_start, col_start = data.row_start, data.col_start
    n_rows, n_cols = data.shape
    max_width = int(np.max(np.diff(col_start)))
    out = {"max_width": max_width}
    w_first = np.zeros(n_rows, np.int64)
    w_count = np.zeros(n_rows, np.int64)
    h_first = np.zeros(n_cols, np.int64)
    h_count = np.zeros(n_cols, np.int64)
    if data.is_dense:
        w_offset = np.zeros(n_rows, np.int64)
        h_offset = np.zeros(n_cols, np.int64)
        for b in range(B):
            c = (b + part) % B
            rows = np.arange(row_start[b], row_start[b + 1])
            cols = np.arange(col_start[c], col_start[c + 1])
            w_first[rows] = col_start[c]
            w_count[rows] = len(cols)
            w_offset[rows] = rows * max_width
            h_first[cols] = row_start[b]
            h_count[cols] = len(rows)
            h_offset[cols] = row_start[b] * max_width + (cols - col_start[c])
        out.update(w_first=w_first, w_count=w_count, w_offset=w_offset, w_stride=1,
                   h_first=h_first, h_count=h_count, h_offset=h_offset, h_stride=max_width)
        return out
    rows, cols, _ = data.sparse_entries()
    sizes = data.block_sizes()
    offsets = np.concatenate([[0], np.cumsum(sizes.ravel())])
    by_column = np.arange(len(rows), dtype=np.int64)
    entries = []
    for b in range(B):
        c = (b + part) % B
        lo, hi = offsets[b * B + c], offsets[b * B + c + 1]
        entries.append(np.arange(lo, hi))
        block_rows, block_cols = rows[lo:hi], cols[lo:hi]
        # W: the block's entries are sorted by row: each row's terms are a contiguous range
        local_rows = np.arange(row_start[b], row_start[b + 1])
        starts = np.searchsorted(block_rows, local_rows, side="left")
        ends = np.searchsorted(block_rows, local_rows, side="right")
        w_first[local_rows] = lo + starts
        w_count[local_rows] = ends - starts
        # H: the block's entries in column-major order (rows ascending inside a column)
        order = np.lexsort((block_rows, block_cols))
        by_column[lo:hi] = lo + order
        local_cols = np.arange(col_start[c], col_start[c + 1])
        sorted_cols = block_cols[order]
        starts = np.searchsorted(sorted_cols, local_cols, side="left")
        ends = np.searchsorted(sorted_cols, local_cols, side="right")
        h_first[local_cols] = lo + starts
        h_count[local_cols] = ends - starts
    out.update(entries=np.concatenate(entries) if entries else np.empty(0, np.int64),
               w_first=w_first, w_count=w_count, w_terms=np.arange(len(rows), dtype=np.int64),
               w_partner=cols.astype(np.int32), h_first=h_first, h_count=h_count,
               h_terms=by_column, h_partner=rows.astype(np.int32))
    return out


@functools.lru_cache(maxsize=None)
def _module(arch):
    """Compile cuda/psgld.cu once per architecture (pycuda caches the cubin on disk too)."""
    from pycuda.compiler import SourceModule
    with open(kernel_source()) as fh:
        source = fh.read()
    return SourceModule(source, no_extern_c=True, include_dirs=[include_dir()], arch=arch,
                        options=["-std=c++14"])


class CudaPSGLDChain:
    """PSGLD on one GPU, with the interface of pymf._sgld.LangevinChain.

    All of V (dense) or the entries (sparse), W, H^T and the per-part layouts stay on the
    device; the state is copied back only by get_state (kept samples, traces)."""

    def __init__(self, data, model, sampler, noise_seed, dtype=np.float64):
        reason = available()
        if reason is not True:
            raise RuntimeError(f"backend='cuda' was requested but the GPU path is unusable: {reason}")
        import pycuda.driver as driver
        import pycuda.gpuarray as gpuarray
        if sampler.part_order != "cyclic":
            raise ValueError("the CUDA backend runs cyclic parts only")
        self.driver, self.gpuarray = driver, gpuarray
        device = driver.Device(0)
        self.context = device.retain_primary_context()
        self.context.push()
        try:
            major, minor = device.compute_capability()
            module = _module(f"sm_{major}{minor}")
            suffix = "f64" if dtype == np.float64 else "f32"
            self.factors = module.get_function(("psgld_factors_dense_" if data.is_dense else
                                                "psgld_factors_sparse_") + suffix)
            self.update = module.get_function("psgld_update_rows_" + suffix)
            self.dtype, self.data, self.model = dtype, data, model
            self.rank, self.noise_seed, self.t = model.rank, noise_seed, 0
            self.B = data.n_blocks
            self.layouts = [self._upload_layout(part_layout(data, p)) for p in range(self.B)]
            self.part_sizes = data.part_sizes()
            n_rows, n_cols = data.shape
            self.max_width = self.layouts[0]["max_width"]
            if data.is_dense:
                self.V = gpuarray.to_gpu(data.dense_values().astype(dtype))
                self.G = gpuarray.zeros(n_rows * self.max_width, dtype)
                self.row_start = gpuarray.to_gpu(data.row_start.astype(np.int64))
                self.col_start = gpuarray.to_gpu(data.col_start.astype(np.int64))
            else:
                rows, cols, vals = data.sparse_entries()
                self.rows = gpuarray.to_gpu(rows.astype(np.int32))
                self.cols = gpuarray.to_gpu(cols.astype(np.int32))
                self.vals = gpuarray.to_gpu(vals.astype(dtype))
                self.G = gpuarray.zeros(max(len(vals), 1), dtype)
            self.diverged = gpuarray.zeros(1, np.int32)
        finally:
            self.context.pop()

    def _upload_layout(self, layout):
        up = {}
        for key, value in layout.items():
            up[key] = self.gpuarray.to_gpu(value) if isinstance(value, np.ndarray) else value
        return up

    def set_state(self, W, Ht, t=0):
        self.context.push()
        try:
            self.W = self.gpuarray.to_gpu(np.ascontiguousarray(W, dtype=self.dtype))
            self.Ht = self.gpuarray.to_gpu(np.ascontiguousarray(Ht, dtype=self.dtype))
            self.W_next = self.gpuarray.empty_like(self.W)
            self.Ht_next = self.gpuarray.empty_like(self.Ht)
            self.t = int(t)
        finally:
            self.context.pop()

    def get_state(self):
        self.context.push()
        try:
            return (self.W.get().astype(np.float64), self.Ht.get().astype(np.float64), self.t)
        finally:
            self.context.pop()

    @property
    def iteration(self):
        return self.t

    def loglik(self):
        from pymf import _tweedie
        W, Ht, _ = self.get_state()
        return _tweedie.loglik(self.data, W, Ht, self.model.beta, self.model.phi)

    def run(self, step_sizes):
        from pymf.errors import DivergenceError
        T, i64 = self.dtype, np.int64
        n_rows, n_cols = self.data.shape
        K, groups = self.rank, (self.rank + 3) // 4
        exponential = np.int32(self.model.prior == "exponential")
        self.context.push()
        try:
            for eps in np.asarray(step_sizes, dtype=np.float64):
                t = self.t + 1
                part = (t - 1) % self.B
                lay = self.layouts[part]
                scale = self.data.n_observed / self.part_sizes[part] if self.part_sizes[part] else 0.0
                coef = T(scale / self.model.phi)
                if self.data.is_dense:
                    tile = 16
                    heights = np.diff(self.data.row_start)
                    grid = (int(-(-self.max_width // tile)), int(-(-heights.max() // tile)), self.B)
                    self.factors(self.V, self.W, self.Ht, self.G, self.row_start, self.col_start,
                                 np.int32(self.B), np.int32(part), i64(n_cols), np.int32(K),
                                 i64(self.max_width), T(self.model.beta), coef,
                                 block=(tile, tile, 1), grid=grid)
                    null = np.intp(0)
                    w_args = (lay["w_first"], lay["w_count"], lay["w_offset"], i64(1), null, null)
                    h_args = (lay["h_first"], lay["h_count"], lay["h_offset"], i64(self.max_width), null, null)
                else:
                    n = len(lay["entries"])
                    if n:
                        self.factors(self.rows, self.cols, self.vals, lay["entries"], i64(n), self.W,
                                     self.Ht, self.G, np.int32(K), T(self.model.beta), coef,
                                     block=(256, 1, 1), grid=(int(-(-n // 256)), 1))
                    null = np.intp(0)
                    w_args = (lay["w_first"], lay["w_count"], null, i64(0), lay["w_terms"], self.cols)
                    h_args = (lay["h_first"], lay["h_count"], null, i64(0), lay["h_terms"], self.rows)
                for X_next, X, Y, args, n, lam, stream in (
                        (self.W_next, self.W, self.Ht, w_args, n_rows, self.model.lam_w, 1),
                        (self.Ht_next, self.Ht, self.W, h_args, n_cols, self.model.lam_h, 2)):
                    threads = n * groups
                    self.update(X_next, X, Y, self.G, *args, i64(0), i64(n), np.int32(K),
                                np.float64(eps), np.float64(lam), exponential,
                                np.uint64(self.noise_seed), np.uint32(stream), np.uint64(t),
                                self.diverged, block=(128, 1, 1), grid=(int(-(-threads // 128)), 1))
                if int(self.diverged.get()[0]):
                    self.diverged.fill(0)
                    raise DivergenceError(f"the chain diverged at iteration {t} on the GPU; the last "
                                          "finite state is kept", iteration=t)
                self.W, self.W_next = self.W_next, self.W
                self.Ht, self.Ht_next = self.Ht_next, self.Ht
                self.t = t
        finally:
            self.context.pop()
