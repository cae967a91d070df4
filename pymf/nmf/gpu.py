"""PSGLD on one GPU: the NMF family's chain on the devices and kernels of pymf.gpu.

CudaPSGLDChain reaches the GPU in one of two ways (its `strategy`), the same chain either
way: a ring kernel running a chunk of iterations per launch where the blocks fit in shared
memory, or two launches per iteration; for the latter, part_layout() computes, for a part
of the block grid, the index arrays that let one thread per (row, group of 4 factors) sum
its gradient without atomics.
"""
import warnings

import numpy as np

from pymf import gpu
from pymf.errors import DivergenceError, GPUUnavailableError, user_stacklevel
from pymf.nmf import _sgld, _tweedie

RING_THREADS = 512  # PYMF_RING_THREADS in cuda/psgld.cu (its __launch_bounds__)


def sparse_block_order(data):
    """For sparse BlockedData (entries grouped by block (b, c), row-major inside a block):
    offsets (B * B + 1, block (b, c) starts at offsets[b * B + c]) and by_column, the entry
    ids of each block in column-major order (rows ascending inside a column)."""
    rows, cols, _ = data.sparse_entries()
    offsets = np.concatenate([[0], np.cumsum(data.block_sizes().ravel())]).astype(np.int64)
    by_column = np.arange(len(rows), dtype=np.int64)
    for lo, hi in zip(offsets[:-1], offsets[1:]):
        by_column[lo:hi] = lo + np.lexsort((rows[lo:hi], cols[lo:hi]))
    return offsets, by_column


def part_layout(data, part, block_order=None):
    """Index arrays of part `part` of a BlockedData for the update kernel (grid order).

    Returns a dict with, for the W update ("w_*", one entry per grid row) and the H update
    ("h_*", one per grid column): first (partner start, or offset into the term list),
    count (terms), g_offset (dense: offset of the first term in G), g_stride (dense), and for
    sparse data terms (entry ids) and partner (the other index of each entry), the same for
    every part. block_order: sparse_block_order(data), where already computed.
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
    offsets, by_column = sparse_block_order(data) if block_order is None else block_order
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
        local_cols = np.arange(col_start[c], col_start[c + 1])
        sorted_cols = cols[by_column[lo:hi]]
        starts = np.searchsorted(sorted_cols, local_cols, side="left")
        ends = np.searchsorted(sorted_cols, local_cols, side="right")
        h_first[local_cols] = lo + starts
        h_count[local_cols] = ends - starts
    out.update(entries=np.concatenate(entries) if entries else np.empty(0, np.int64),
               w_first=w_first, w_count=w_count, w_terms=np.arange(len(rows), dtype=np.int64),
               w_partner=cols.astype(np.int32), h_first=h_first, h_count=h_count,
               h_terms=by_column, h_partner=rows.astype(np.int32))
    return out


class CudaPSGLDChain:
    """PSGLD on one GPU, with the interface of pymf.nmf._sgld.LangevinChain.

    All of V (dense) or the entries (sparse), W, H^T and the per-part layouts stay on the
    device; the state is copied back only by get_state (kept samples, traces). `device` is
    the loader's device (pymf.gpu.open_device() when None); the tests pass a host shim.
    check_every: iterations queued between two reads of the divergence flags.
    strategy: how an iteration reaches the GPU, the chain being the same either way:
      "launches": two kernel launches per iteration (any data, any block size);
      "ring":     one launch per chunk of check_every iterations (psgld_ring_dense_* or
                  psgld_ring_sparse_*), thread block b keeping W_b in shared memory and
                  waiting only for its ring neighbour; blocks that fit in a thread block's
                  shared memory (an H100: 227 KB), B at most the device's multiprocessors
                  (all blocks must be resident at once);
      "auto":     "ring" where it applies, else "launches"; and if a ring launch stalls
                  (its blocks were not all resident: a shared GPU), "launches" from then on,
                  with a warning, the chunk rerun from its first state."""

    ring_wait_seconds = 1.0  # how long a ring block waits for its neighbour before giving up

    def __init__(self, data, model, sampler, noise_seed, dtype=np.float64, device=None,
                 check_every=64, strategy="auto"):
        if sampler.part_order != "cyclic":
            raise ValueError("the CUDA backend runs cyclic parts only")
        if device is None:  # looked up in pymf.gpu at each call (the tests substitute a shim)
            if not gpu.is_available():
                raise GPUUnavailableError("backend='cuda' was requested but the GPU path "
                                          "is unusable: "
                                   f"{gpu.why_unavailable()}")
            device = gpu.open_device()
        self.device = device
        self.dtype = np.dtype(dtype).type
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {np.dtype(dtype).name}")
        self.data, self.model = data, model
        self.rank, self.noise_seed, self.t = model.rank, noise_seed, 0
        self.B = data.n_blocks
        self.part_sizes = data.part_sizes()
        self.max_width = int(np.max(np.diff(data.col_start)))
        self.max_height = int(np.max(np.diff(data.row_start)))
        self.check_every = int(check_every)
        if self.check_every < 1:
            raise ValueError(f"check_every must be >= 1, got {check_every}")
        self.requested_strategy = strategy
        self.strategy = self._choose_strategy(strategy)
        # PSGLD's per-row step factors on the device (set_row_steps), from iteration
        # row_steps_from on; None: the plain chain
        self.step_W = self.step_Ht = None
        self.row_steps_from = 0
        self._host_chain = None  # the CPU core's chain that measures the Fisher curvature
        self._host_synced = None  # the host_state it was last given
        with device:
            kernels = device.kernels("f64" if self.dtype == np.float64 else "f32")
            self.row_start = device.to_device(data.row_start.astype(np.int64))
            self.col_start = device.to_device(data.col_start.astype(np.int64))
            if data.is_dense:
                self.V = device.to_device(data.dense_values().astype(self.dtype))
            else:
                rows, cols, vals = data.sparse_entries()
                self.rows = device.to_device(rows.astype(np.int32))
                self.cols = device.to_device(cols.astype(np.int32))
                self.vals = device.to_device(vals.astype(self.dtype))
                block_order = sparse_block_order(data)
            self.exponential = np.int32(model.prior == "exponential")
            self.flags = device.zeros(self.check_every, np.int32)  # one per queued iteration
            self.kernels = kernels
            self.block_order = None if data.is_dense else block_order
            if self.strategy == "ring":
                self._prepare_ring()
            else:
                self._prepare_launches()

    def _prepare_ring(self):
        """The ring kernel and its inputs: per-part likelihood scales, the data (dense: V;
        sparse: the entries and each block's column order), progress counters."""
        device, data, kernels = self.device, self.data, self.kernels
        self.ring = kernels["psgld_ring_dense" if data.is_dense else "psgld_ring_sparse"]
        device.allow_shared(self.ring, self.ring_shared_bytes())
        coef = [data.n_observed / size / self.model.phi if size else 0.0 for size in self.part_sizes]
        # rounded to the real type first, as the launch path passes it: the same chain
        self.coef_of_part = device.to_device(np.asarray(coef, self.dtype).astype(np.float64))
        if data.is_dense:
            self.ring_data = (self.V, np.int64(data.shape[1]))
        else:
            offsets, by_column = self.block_order
            self.ring_data = (self.rows, self.cols, self.vals, device.to_device(by_column),
                              device.to_device(offsets))
        self.steps = device.zeros(self.check_every, np.float64)  # a launch's step sizes
        self.progress = device.zeros(self.B, np.int32)
        self.stalled = device.zeros(1, np.int32)

    def _prepare_launches(self):
        """The two kernels of an iteration, the gradient factors G and every part's layout."""
        device, data, kernels, block_order = self.device, self.data, self.kernels, self.block_order
        self.factors = kernels["psgld_factors_dense" if data.is_dense else "psgld_factors_sparse"]
        self.update = kernels["psgld_update_factors"]
        if data.is_dense:
            self.G = device.zeros(data.shape[0] * self.max_width, self.dtype)
            self.layouts = [self._upload_layout(part_layout(data, p)) for p in range(self.B)]
            return
        self.G = device.zeros(max(data.n_observed, 1), self.dtype)
        # the entry lists are the same for every part: on the device once (nnz, not B * nnz);
        # the partners are self.cols and self.rows
        layouts = [part_layout(data, p, block_order) for p in range(self.B)]
        shared = {key: device.to_device(layouts[0][key]) for key in ("w_terms", "h_terms")}
        common = ("w_terms", "h_terms", "w_partner", "h_partner")
        self.layouts = [dict(self._upload_layout({key: value for key, value in layout.items()
                                                  if key not in common}), **shared)
                        for layout in layouts]

    def ring_shared_bytes(self):
        """Shared memory of one ring thread block: W_b twice (now, next), H_c (rows padded to
        rank + 1 against bank conflicts), and G of the block's entries."""
        h, w, ld = self.max_height, self.max_width, self.rank + 1
        entries = h * w if self.data.is_dense else int(np.max(self.data.block_sizes()))
        return (2 * h * ld + w * ld + entries) * np.dtype(self.dtype).itemsize

    def _choose_strategy(self, strategy):
        if strategy not in ("auto", "ring", "launches"):
            raise ValueError(f"strategy must be 'auto', 'ring' or 'launches', got {strategy!r}")
        if strategy == "launches":
            return strategy
        why_not = None
        if self.ring_shared_bytes() > self.device.shared_limit:
            why_not = (f"a block needs {self.ring_shared_bytes()} bytes of shared memory, over "
                       f"the device's {self.device.shared_limit}: use more blocks or a lower rank")
        elif self.B > self.device.multiprocessors:
            why_not = (f"{self.B} blocks cannot all be resident on {self.device.multiprocessors} "
                       "multiprocessors")
        if why_not is None:
            return "ring"
        if strategy == "ring":
            raise ValueError(f"strategy='ring' is not possible here: {why_not}")
        return "launches"

    def _upload_layout(self, layout):
        return {key: self.device.to_device(value) if isinstance(value, np.ndarray) else value
                for key, value in layout.items()}

    def set_state(self, W, Ht, t=0):
        with self.device:
            self.W = self.device.to_device(np.asarray(W, dtype=self.dtype))
            self.Ht = self.device.to_device(np.asarray(Ht, dtype=self.dtype))
            if self.strategy == "launches":  # the ring updates in place
                self.W_next = self.device.empty_like(self.W)
                self.Ht_next = self.device.empty_like(self.Ht)
            self.W_saved = self.device.empty_like(self.W)  # a chunk's first state (see run)
            self.Ht_saved = self.device.empty_like(self.Ht)
            self.t = int(t)
            self.host_state = None

    def get_state(self):
        """(W, H^T, t) on the host, in float64. Copied from the device once between two runs
        however often it is asked for (a kept sample, its trace point and its log-likelihood
        come at the same iteration)."""
        if self.host_state is None:
            with self.device:
                self.host_state = (self.device.to_host(self.W).astype(np.float64),
                                   self.device.to_host(self.Ht).astype(np.float64), self.t)
        W, Ht, t = self.host_state
        return W.copy(), Ht.copy(), t

    @property
    def iteration(self):
        return self.t

    def loglik(self):
        W, Ht, _ = self.get_state()
        return _tweedie.loglik(self.data, W, Ht, self.model.beta, self.model.phi)

    def set_row_steps(self, step_W, step_Ht, from_t=1):
        """Per-coordinate step factors c in (0, 1] (grid order) from iteration from_t on, as
        LangevinChain.set_row_steps: the kernels move a coordinate by eps c (gradient) and
        sqrt(2 eps) sqrt(c) z. None for both removes them."""
        if step_W is None and step_Ht is None:
            self.step_W = self.step_Ht = None
            return
        step_W = np.ascontiguousarray(step_W, dtype=np.float64)
        step_Ht = np.ascontiguousarray(step_Ht, dtype=np.float64)
        if step_W.shape != (self.data.shape[0], self.rank) or \
                step_Ht.shape != (self.data.shape[1], self.rank):
            raise ValueError(f"row step factors must be {self.data.shape[0]} x {self.rank} and "
                             f"{self.data.shape[1]} x {self.rank}")
        if not (np.all(step_W > 0) and np.all(step_W <= 1) and np.all(step_Ht > 0)
                and np.all(step_Ht <= 1)):
            raise ValueError("a step factor must be in (0, 1]")
        if int(from_t) < 1:
            raise ValueError("row steps need a first iteration >= 1")
        with self.device:
            self.step_W = self.device.to_device(step_W.ravel())
            self.step_Ht = self.device.to_device(step_Ht.ravel())
        self.row_steps_from = int(from_t)

    def fisher_block(self, b, c, fisher_W, fisher_Ht):
        """LangevinChain.fisher_block at the device's current state: the CPU core's
        function on a host chain of the same data (synchronised once per state), so the
        factors are the CPU chain's."""
        if self._host_chain is None:
            m = self.model
            self._host_chain = _sgld.LangevinChain(self.data, "psgld", m.rank, m.beta, m.phi,
                                                   m.prior, m.lam_w, m.lam_h, 0, 0)
        if self._host_synced is not self.host_state or self.host_state is None:
            W, Ht, t = self.get_state()  # caches host_state until the next run / set_state
            self._host_chain.set_state(W, Ht, t)
            self._host_synced = self.host_state
        self._host_chain.fisher_block(b, c, fisher_W, fisher_Ht)

    def _row_step_args(self, t):
        """The kernels' factor pointers for iteration t (null before row_steps_from, or
        without factors; the ring kernel gets them with row_steps_from and checks t itself)."""
        null = self.device.null
        if self.step_W is None or t < self.row_steps_from:
            return null, null
        return self.step_W, self.step_Ht

    def run(self, step_sizes):
        """Iterations with these step sizes. The kernels of up to check_every iterations are
        queued back to back, each iteration raising its own divergence flag, and the host
        reads the flags once per chunk: one synchronisation per chunk instead of one per
        iteration. A chunk in which an iteration diverged is replayed from its first state up
        to that iteration (the noise is counter-based and the kernels deterministic, so the
        replay is the same chain): the last finite state is kept, as on the CPU."""
        self.host_state = None
        steps = np.asarray(step_sizes, dtype=np.float64)
        invalid = np.flatnonzero(~(np.isfinite(steps) & (steps > 0)))
        if invalid.size:  # as the C sampler: the iterations before the bad step run
            first = int(invalid[0])
            self.run(steps[:first])
            raise ValueError(f"step size at iteration {self.t + 1} is {steps[first]:g}; it must "
                             "be positive and finite")
        device = self.device
        with device:
            for start in range(0, len(steps), self.check_every):
                chunk = steps[start:start + self.check_every]
                t0 = self.t
                device.copy(self.W_saved, self.W)
                device.copy(self.Ht_saved, self.Ht)
                self._queue(chunk)
                flags = device.to_host(self.flags)[:len(chunk)]
                if not flags.any():
                    continue
                bad = int(np.flatnonzero(flags)[0])
                device.clear(self.flags)
                device.copy(self.W, self.W_saved)
                device.copy(self.Ht, self.Ht_saved)
                self.t = t0
                if bad:
                    self._queue(chunk[:bad])
                if device.to_host(self.flags).any():
                    raise RuntimeError("the GPU chain's replay of a chunk differed from its first "
                                       "run: the kernels are not deterministic")
                raise DivergenceError(f"the chain diverged at iteration {t0 + bad + 1} on the GPU; "
                                      "the last finite state is kept", iteration=t0 + bad + 1)

    def _queue(self, steps):
        """Queue these iterations (no synchronisation); self.flags[i] is raised if a new value
        of iteration i is not finite."""
        if self.strategy == "launches":
            for i, eps in enumerate(steps):
                self._iterate(eps, self.flags[i:i + 1])
            return
        device = self.device
        device.clear(self.progress)
        device.upload(self.steps, np.asarray(steps, np.float64))
        device.launch(self.ring, (self.B, 1, 1), (RING_THREADS, 1, 1), (
            *self.ring_data, self.W, self.Ht, self.row_start, self.col_start, np.int32(self.B),
            np.int32(self.rank), np.int64(self.max_height), np.int64(self.max_width),
            self.dtype(self.model.beta), self.coef_of_part, self.steps, np.int32(len(steps)),
            np.uint64(self.t), np.float64(self.model.lam_w), np.float64(self.model.lam_h),
            self.exponential, np.uint64(self.noise_seed), self.progress,
            np.int64(self.ring_wait_seconds * 1e9), self.flags, self.stalled,
            *self._row_step_args(self.row_steps_from), np.uint64(self.row_steps_from)),
            shared_bytes=int(self.ring_shared_bytes()))
        self.t += len(steps)
        if device.to_host(self.stalled).any():
            device.clear(self.stalled)
            device.clear(self.flags)  # flags of the iterations that ran before the stall
            device.copy(self.W, self.W_saved)
            device.copy(self.Ht, self.Ht_saved)
            self.t -= len(steps)
            if self.requested_strategy == "auto":
                warnings.warn("the ring kernel's thread blocks were not all resident (a shared "
                              "GPU?): CudaPSGLDChain goes on with strategy='launches'",
                              RuntimeWarning, stacklevel=user_stacklevel())
                self.strategy = "launches"
                self._prepare_launches()
                self.W_next = device.empty_like(self.W)
                self.Ht_next = device.empty_like(self.Ht)
                self._queue(steps)
                return
            raise RuntimeError("a thread block of the ring kernel waited in vain for its "
                               "neighbour (the blocks were not all resident: is the GPU shared?); "
                               "the state before this chunk is kept; use strategy='launches'")

    def _iterate(self, eps, flag):
        """Queue one iteration's kernels (no synchronisation); `flag` is raised if any new
        value is not finite."""
        T, i64, device, null = self.dtype, np.int64, self.device, self.device.null
        n_rows, n_cols = self.data.shape
        K, groups = self.rank, (self.rank + 3) // 4
        t = self.t + 1
        part = (t - 1) % self.B
        lay = self.layouts[part]
        scale = self.data.n_observed / self.part_sizes[part] if self.part_sizes[part] else 0.0
        coef = T(scale / self.model.phi)
        if self.data.is_dense:
            tile = 16  # PYMF_TILE; a block's tiles are flattened into grid.x
            grid = (int(-(-self.max_width // tile)) * int(-(-self.max_height // tile)), 1, self.B)
            device.launch(self.factors, grid, (tile, tile, 1), (
                self.V, self.W, self.Ht, self.G, self.row_start, self.col_start,
                np.int32(self.B), np.int32(part), i64(n_cols), np.int32(K),
                i64(self.max_width), T(self.model.beta), coef))
            w_args = (lay["w_first"], lay["w_count"], lay["w_offset"], i64(1), null, null)
            h_args = (lay["h_first"], lay["h_count"], lay["h_offset"], i64(self.max_width), null, null)
        else:
            n = len(lay["entries"])
            if n:
                device.launch(self.factors, (int(-(-n // 256)), 1, 1), (256, 1, 1), (
                    self.rows, self.cols, self.vals, lay["entries"], i64(n), self.W,
                    self.Ht, self.G, np.int32(K), T(self.model.beta), coef))
            w_args = (lay["w_first"], lay["w_count"], null, i64(0), lay["w_terms"], self.cols)
            h_args = (lay["h_first"], lay["h_count"], null, i64(0), lay["h_terms"], self.rows)
        # the W rows and the H columns in one launch, both reading this iteration's G
        threads = (n_rows + n_cols) * groups
        device.launch(self.update, (int(-(-threads // 128)), 1, 1), (128, 1, 1), (
            self.W_next, self.W, self.Ht_next, self.Ht, self.G, *w_args, i64(n_rows),
            np.float64(self.model.lam_w), *h_args, i64(n_cols), np.float64(self.model.lam_h),
            np.int32(K), np.float64(eps), self.exponential, np.uint64(self.noise_seed),
            np.uint64(t), flag, *self._row_step_args(t)))
        self.W, self.W_next = self.W_next, self.W
        self.Ht, self.Ht_next = self.Ht_next, self.Ht
        self.t = t
