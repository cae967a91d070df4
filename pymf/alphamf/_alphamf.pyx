"""Bindings of core/src/alphamf.c: alpha-stable matrix factorisation, a Metropolis step of
Phi and an SG-MCMC step of (W, H) per iteration on the PSGLD block grid (grid order
throughout). pymf.alphamf.sampling validates the settings and the data first."""
import numpy as np

cimport cython
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear, pymf_status
from pymf._status cimport check
from pymf.hamcmc._hamcmc_mf cimport (chain_config, chain_grad_potential, chain_restore,
                                     chain_snapshot,
                                     pymf_hamcmc_mf_config, pymf_hamcmc_mf_get_state,
                                     pymf_hamcmc_mf_part, pymf_hamcmc_mf_set_threads,
                                     pymf_hamcmc_mf_skipped_pairs)
from pymf.nmf._blocks cimport BlockedData
from pymf.nmf._chain cimport FactorChain


def draw_phi(double alpha, uint64_t seed, int64_t n, uint64_t t=1):
    """n prior draws of Phi = 2 A, E[exp(-lambda A)] = exp(-lambda^(alpha / 2)), from the
    Philox uniforms of entries 0 .. n - 1 at iteration t (core/include/pymf/alphamf.h)."""
    out = np.empty(max(n, 0))
    cdef double[::1] o = out
    cdef pymf_error err
    if n <= 0:
        return out
    pymf_error_clear(&err)
    with nogil:
        pymf_alphamf_draw_phi(alpha, seed, t, n, &o[0], &err)
    check(&err)
    return out


# The C object points into `data`: the cycle collector must not clear that reference
# before __dealloc__ has destroyed the C object.
@cython.no_gc_clear
cdef class AlphaChain(FactorChain):
    """One alpha-stable MF chain over a BlockedData: HAMCMC (memory M) or, with
    langevin_only, PSGLD's Langevin step for (W, H); update_phi=False keeps Phi fixed;
    tamed=False takes the plain (untamed) drift (core/include/pymf/alphamf.h)."""
    cdef pymf_alphamf *state

    def __cinit__(self, BlockedData data, int rank, double alpha, double a_w, double b_w,
                  double a_h, double b_h, uint64_t noise_seed, uint64_t schedule_seed,
                  int memory=2, double gamma=1.0, bint scaled_gamma=False, double lam=0.0,
                  bint langevin_only=False, str part_order="random", int n_threads=0,
                  bint update_phi=True, bint tamed=True):
        cdef pymf_alphamf_model model
        cdef pymf_hamcmc_mf_config config
        cdef pymf_error err
        self.state = NULL
        self.data = data
        self.rank = rank
        model.rank = rank
        model.alpha = alpha
        model.a_w = a_w
        model.b_w = b_w
        model.a_h = a_h
        model.b_h = b_h
        model.tamed = tamed
        config = chain_config(memory, gamma, scaled_gamma, lam, part_order, noise_seed,
                              schedule_seed, n_threads, -1, langevin_only)
        pymf_error_clear(&err)
        self.state = pymf_alphamf_create(&model, &data.data, &config, update_phi, &err)
        if self.state == NULL:
            check(&err)
            raise MemoryError("could not create the sampler")

    def __dealloc__(self):
        pymf_alphamf_destroy(self.state)

    cdef pymf_status c_set_state(self, const double *W, const double *Ht, int64_t t,
                                 pymf_error *err) noexcept nogil:
        return pymf_alphamf_start(self.state, W, Ht, err)

    cdef void c_get_state(self, double *W, double *Ht, int64_t *t) noexcept nogil:
        pymf_hamcmc_mf_get_state(pymf_alphamf_chain(self.state), W, Ht, t)

    cdef pymf_status c_run(self, int64_t n, const double *step_sizes, pymf_error *err) noexcept nogil:
        return pymf_alphamf_run(self.state, n, step_sizes, err)

    cdef pymf_status c_loglik(self, double *out, pymf_error *err) noexcept nogil:
        return pymf_alphamf_loglik(self.state, out, err)

    def set_state(self, W, Ht, int64_t t=0):
        """Start (W, H^T) (grid order) as iteration 0, the HAMCMC memory empty, every Phi at
        its conditional maximiser (core/include/pymf/alphamf.h); restore() resumes a chain
        at t > 0."""
        if t != 0:
            raise ValueError("the chain starts at iteration 0; restore() resumes one")
        FactorChain.set_state(self, W, Ht, 0)

    def set_threads(self, int n_threads):
        pymf_hamcmc_mf_set_threads(pymf_alphamf_chain(self.state), n_threads)

    @property
    def skipped_pairs(self):
        return int(pymf_hamcmc_mf_skipped_pairs(pymf_alphamf_chain(self.state)))

    @property
    def phi_counts(self):
        """(Phi proposals accepted, Phi proposals made) so far."""
        cdef int64_t accepted = 0, proposed = 0
        pymf_alphamf_counts(self.state, &accepted, &proposed)
        return int(accepted), int(proposed)

    def part(self, int64_t t):
        return pymf_hamcmc_mf_part(pymf_alphamf_chain(self.state), t)

    @property
    def phi_copies(self):
        """Copies of Phi: 1 (PSGLD), M (HAMCMC: one per subchain, core/include/pymf/alphamf.h)."""
        return int(pymf_alphamf_phi_copies(self.state))

    def get_phi(self):
        """Phi, one per observed entry (dense data: grid-order row-major), each copy in turn
        (phi_copies x n_observed values, flat)."""
        out = np.empty(pymf_alphamf_n_phi(self.state))
        cdef double[::1] o = out
        if out.size:
            pymf_alphamf_get_phi(self.state, &o[0])
        return out

    def set_phi(self, values):
        """Every copy (get_phi's layout), or one per observed entry for all copies alike."""
        values = np.ascontiguousarray(values, dtype=np.float64).ravel()
        copies = pymf_alphamf_phi_copies(self.state)
        if copies > 1 and values.shape[0] * copies == pymf_alphamf_n_phi(self.state):
            values = np.tile(values, copies)
        cdef const double[::1] v = values
        cdef pymf_error err
        if v.shape[0] != pymf_alphamf_n_phi(self.state):
            raise ValueError(f"Phi must hold {pymf_alphamf_n_phi(self.state)} values, got "
                             f"{v.shape[0]}")
        pymf_error_clear(&err)
        pymf_alphamf_set_phi(self.state, &v[0], &err)
        check(&err)

    def phi_step(self, int64_t t, int part):
        """One Metropolis step of the Phi of `part` at the current state with iteration t's
        uniforms."""
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_alphamf_phi_step(self.state, t, part, &err)
        check(&err)

    def snapshot(self):
        """The (W, H) chain's planes and counters (pymf.hamcmc._hamcmc_mf), Phi and the
        accepted count."""
        out = chain_snapshot(pymf_alphamf_chain(self.state), self.data, self.rank)
        out["phi"] = self.get_phi()
        out["phi_counts"] = np.array(self.phi_counts, dtype=np.int64)
        return out

    def restore(self, arrays):
        """The inverse of snapshot(); refused (ValueError) on shapes or values that do not
        fit, Phi checked before the chain is touched."""
        for key in ("phi", "phi_counts"):
            if key not in arrays:
                raise ValueError(f"the saved chain state lacks {key}")
        counts = np.asarray(arrays["phi_counts"])
        if counts.shape != (2,) or counts.dtype.kind not in "iu":
            raise ValueError("the saved chain state's phi_counts must be two integers")
        cdef pymf_error err
        before = self.get_phi()
        before_counts = self.phi_counts
        self.set_phi(arrays["phi"])
        try:
            pymf_error_clear(&err)
            pymf_alphamf_set_counts(self.state, int(counts[0]), int(counts[1]), &err)
            check(&err)
            chain_restore(pymf_alphamf_chain(self.state), self.data, self.rank, arrays)
        except ValueError:
            self.set_phi(before)
            pymf_alphamf_set_counts(self.state, before_counts[0], before_counts[1], &err)
            raise

    def grad_potential(self, W, Ht, int part):
        """grad U of `part` given Phi (scaled N / |Pi_part|, prior included), grid order."""
        return chain_grad_potential(pymf_alphamf_chain(self.state), self.data, self.rank, W,
                                    Ht, part)
