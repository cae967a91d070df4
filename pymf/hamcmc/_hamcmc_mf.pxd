# core/include/pymf/hamcmc_mf.h: HAMCMC for Tweedie matrix factorisation on the block grid.
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status
from pymf.nmf._blocks cimport BlockedData, pymf_blocked_data, pymf_part_order
from pymf.nmf._chain cimport pymf_nmf_model


cdef extern from "pymf/hamcmc_mf.h" nogil:
    ctypedef struct pymf_hamcmc_mf_config:
        int memory
        double gamma
        int scaled_gamma
        double lambda_ "lambda"
        pymf_part_order part_order
        uint64_t noise_seed
        uint64_t schedule_seed
        int n_threads
        int only_row_block
        int langevin_only

    ctypedef struct pymf_hamcmc_mf:
        pass

    ctypedef int (*pymf_block_potential_grad)(const void *ctx, const pymf_blocked_data *data,
                                              int b, int c, double scale, const double *W,
                                              const double *Ht, double *gW, double *gHt)

    ctypedef struct pymf_hamcmc_potential:
        pymf_block_potential_grad grad
        const void *ctx
        int rank
        int non_negative
        int tamed

    pymf_hamcmc_mf *pymf_hamcmc_mf_create(const pymf_nmf_model *model,
                                          const pymf_blocked_data *data,
                                          const pymf_hamcmc_mf_config *config, pymf_error *err)
    pymf_hamcmc_mf *pymf_hamcmc_mf_create_potential(const pymf_hamcmc_potential *potential,
                                                    const pymf_blocked_data *data,
                                                    const pymf_hamcmc_mf_config *config,
                                                    pymf_error *err)
    void pymf_hamcmc_mf_destroy(pymf_hamcmc_mf *s)
    pymf_status pymf_hamcmc_mf_start(pymf_hamcmc_mf *s, const double *W, const double *Ht,
                                     pymf_error *err)
    void pymf_hamcmc_mf_get_state(const pymf_hamcmc_mf *s, double *W, double *Ht, int64_t *t)
    void pymf_hamcmc_mf_set_threads(pymf_hamcmc_mf *s, int n_threads)
    int64_t pymf_hamcmc_mf_skipped_pairs(const pymf_hamcmc_mf *s)
    int pymf_hamcmc_mf_part(const pymf_hamcmc_mf *s, int64_t t)
    pymf_status pymf_hamcmc_mf_run(pymf_hamcmc_mf *s, int64_t n_iter, const double *eps,
                                   pymf_error *err)
    pymf_status pymf_hamcmc_mf_loglik(const pymf_hamcmc_mf *s, double *out, pymf_error *err)
    pymf_status pymf_hamcmc_mf_grad_potential(pymf_hamcmc_mf *s, const double *W,
                                              const double *Ht, int part, double *gW,
                                              double *gHt, pymf_error *err)
    pymf_status pymf_hamcmc_mf_products(pymf_hamcmc_mf *s, const double *gW, const double *gHt,
                                        const double *zW, const double *zHt, double *hgW,
                                        double *hgHt, double *szW, double *szHt, int *used,
                                        pymf_error *err)
    int pymf_hamcmc_mf_gram_len(const pymf_hamcmc_mf *s)
    pymf_status pymf_hamcmc_mf_begin(pymf_hamcmc_mf *s, double *partial, pymf_error *err)
    pymf_status pymf_hamcmc_mf_finish(pymf_hamcmc_mf *s, double eps, const double *partials,
                                      pymf_error *err)
    pymf_status pymf_hamcmc_mf_set_totals(pymf_hamcmc_mf *s, int64_t n_observed,
                                          const int64_t *part_sizes, pymf_error *err)
    int64_t pymf_hamcmc_mf_piece_len(const pymf_hamcmc_mf *s, int c)
    void pymf_hamcmc_mf_get_piece(const pymf_hamcmc_mf *s, int c, double *out)
    void pymf_hamcmc_mf_set_piece(pymf_hamcmc_mf *s, int c, const double *inp)
    void pymf_hamcmc_mf_set_cols(pymf_hamcmc_mf *s, int64_t c0, int64_t c1, const double *inp)
    int pymf_hamcmc_mf_planes(const pymf_hamcmc_mf *s)
    void pymf_hamcmc_mf_export(const pymf_hamcmc_mf *s, double *W_planes, double *Ht_planes,
                               int64_t *t, int64_t *skipped_pairs)
    pymf_status pymf_hamcmc_mf_import(pymf_hamcmc_mf *s, const double *W_planes,
                                      const double *Ht_planes, int64_t t, int64_t skipped_pairs,
                                      pymf_error *err)


# the chain's checkpoint and gradient (pymf/hamcmc/_hamcmc_mf.pyx), for the families whose
# (W, H) step is this chain
cdef pymf_hamcmc_mf_config chain_config(int memory, double gamma, bint scaled_gamma, double lam,
                                        str part_order, uint64_t noise_seed,
                                        uint64_t schedule_seed, int n_threads,
                                        int only_row_block, bint langevin_only) except *
cdef tuple chain_planes(pymf_hamcmc_mf *chain, BlockedData data, int rank)
cdef dict chain_snapshot(pymf_hamcmc_mf *chain, BlockedData data, int rank)
cdef chain_restore(pymf_hamcmc_mf *chain, BlockedData data, int rank, arrays)
cdef tuple chain_grad_potential(pymf_hamcmc_mf *chain, BlockedData data, int rank, W, Ht,
                                int part)
