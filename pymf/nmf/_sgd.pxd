# core/include/pymf/sgd.h: the SGD and DSGD optimisers.
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status
from pymf.nmf._blocks cimport pymf_blocked_data, pymf_part_order
from pymf.nmf._chain cimport pymf_nmf_model


cdef extern from "pymf/sgd.h" nogil:
    ctypedef enum pymf_sgd_kind:
        PYMF_OPT_SGD
        PYMF_OPT_DSGD

    ctypedef struct pymf_sgd_config:
        pymf_sgd_kind kind
        int64_t batch_size
        pymf_part_order part_order
        uint64_t schedule_seed
        int n_threads

    ctypedef struct pymf_sgd:
        pass

    pymf_sgd *pymf_sgd_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                              const pymf_sgd_config *config, pymf_error *err)
    void pymf_sgd_destroy(pymf_sgd *opt)
    pymf_status pymf_sgd_set_state(pymf_sgd *opt, const double *W, const double *Ht, int64_t t,
                                   pymf_error *err)
    void pymf_sgd_get_state(const pymf_sgd *opt, double *W, double *Ht, int64_t *t)
    pymf_status pymf_sgd_run(pymf_sgd *opt, int64_t n_iter, const double *step_sizes,
                             pymf_error *err)
    pymf_status pymf_sgd_loglik(const pymf_sgd *opt, double *out, pymf_error *err)
