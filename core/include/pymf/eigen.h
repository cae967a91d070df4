/*
 * pymf/eigen.h: the largest eigenvalue of small symmetric matrices, for the per-row step
 * bounds of DSGLD and PSGLD (pymf/engine/autostep.py, point 5): rho, the largest eigenvalue
 * of each row's (D + 1) x (D + 1) or K x K correlation matrix, for tens of thousands of rows
 * at a time. LAPACK's full eigen-decomposition (NumPy's eigvalsh) computes all n eigenvalues
 * where one is needed, and its per-call set-up dominates at n = 11 (about 8 us a matrix);
 * GSL's gsl_eigen_symm measured 6.9 us. This is LAPACK's Householder tridiagonalisation
 * (dsytd2, without the vectors), then bisection on the tridiagonal matrix for the one
 * eigenvalue: 3.8 against NumPy's 7.0 us at n = 11, 15.5 against 43 us at n = 32 (one
 * thread, an AMD EPYC; Lanczos with full re-orthogonalisation, tried first, did three times
 * the arithmetic and was no faster than NumPy). Bisecting four matrices side by side, their
 * Sturm recurrences interleaved (the same bits), was no faster either: 0.37 against 0.34 s
 * for 82,248 matrices at n = 11 (2026-11-28, the same CPU).
 */
#ifndef PYMF_EIGEN_H
#define PYMF_EIGEN_H

#include <stdint.h>

/* doubles of work space pymf_largest_eigenvalue needs for an n x n matrix */
#define PYMF_LARGEST_EIGENVALUE_WORK(n) ((int64_t)(n) * (int64_t)(n) + 4 * (int64_t)(n))

/* The largest eigenvalue of the symmetric n x n matrix A (row-major, both triangles read as
 * given; n >= 1), accurate to a few units of rounding of its largest absolute row sum (the
 * reflections are orthogonal, and the bisection runs to the last bits). A pure function of
 * A, without clones or contraction: the same result on any thread and any x86-64 build.
 * work: PYMF_LARGEST_EIGENVALUE_WORK(n) doubles. Returns NaN where A holds a NaN or an
 * infinity. */
double pymf_largest_eigenvalue(int n, const double *A, double *work);

#endif
