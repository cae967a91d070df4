# core/include/pymf/langevin.h: the LD, SGLD and PSGLD samplers.
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status
from pymf.nmf._blocks cimport pymf_blocked_data, pymf_part_order
from pymf.nmf._chain cimport pymf_nmf_model


cdef extern from "pymf/langevin.h" nogil:
    ctypedef enum pymf_langevin_kind:
        PYMF_LD
        PYMF_SGLD
        PYMF_PSGLD

    ctypedef struct pymf_langevin_config:
        pymf_langevin_kind kind
        int64_t batch_size
        pymf_part_order part_order
        uint64_t noise_seed
        uint64_t schedule_seed
        int n_threads
        int only_row_block
        int64_t phi_every
        double phi_shape
        double phi_rate
        uint64_t phi_seed
        int scale_step_by_phi
        double phi_ref

    ctypedef struct pymf_langevin:
        pass

    pymf_langevin *pymf_langevin_create(const pymf_nmf_model *model,
                                        const pymf_blocked_data *data,
                                        const pymf_langevin_config *config, pymf_error *err)
    void pymf_langevin_destroy(pymf_langevin *sampler)
    pymf_status pymf_langevin_set_state(pymf_langevin *sampler, const double *W,
                                        const double *Ht, int64_t t, pymf_error *err)
    void pymf_langevin_get_state(const pymf_langevin *sampler, double *W, double *Ht, int64_t *t)
    void pymf_langevin_set_threads(pymf_langevin *sampler, int n_threads)
    pymf_status pymf_langevin_run(pymf_langevin *sampler, int64_t n_iter,
                                  const double *step_sizes, pymf_error *err)
    pymf_status pymf_langevin_set_totals(pymf_langevin *sampler, int64_t n_observed,
                                         const int64_t *part_sizes, pymf_error *err)
    void pymf_langevin_get_cols(const pymf_langevin *sampler, int64_t c0, int64_t c1, double *out)
    void pymf_langevin_set_cols(pymf_langevin *sampler, int64_t c0, int64_t c1, const double *inp)
    int pymf_langevin_part(const pymf_langevin *sampler, int64_t t)
    double *pymf_langevin_cols(pymf_langevin *sampler, int64_t c0)
    pymf_status pymf_langevin_loglik(const pymf_langevin *sampler, double *out, pymf_error *err)
    pymf_status pymf_langevin_half_rss(const pymf_langevin *sampler, double *out, pymf_error *err)
    pymf_status pymf_langevin_draw_phi(pymf_langevin *sampler, double half_rss_total, int64_t t,
                                       pymf_error *err)
    double pymf_langevin_phi(const pymf_langevin *sampler)
    pymf_status pymf_langevin_set_phi(pymf_langevin *sampler, double phi, pymf_error *err)
    pymf_status pymf_langevin_set_row_steps(pymf_langevin *sampler, const double *step_W,
                                            const double *step_Ht, int64_t from_t,
                                            pymf_error *err)
    pymf_status pymf_langevin_fisher_block(const pymf_langevin *sampler, int b, int c,
                                           double *fisher_W, double *fisher_Ht, pymf_error *err)
    void pymf_langevin_fisher_mirror(int rank, int64_t n, double *fisher)
    pymf_status pymf_sgld_minibatch(uint64_t schedule_seed, int64_t t, int64_t n_observed,
                                    int64_t batch_size, int64_t *out, pymf_error *err)
