"""The C core's largest eigenvalue of small symmetric matrices (pymf._linalg,
core/src/eigen.c), which sets rho in DSGLD's and PSGLD's per-row step bounds: NumPy's
eigvalsh is the reference, on the shapes those bounds meet (correlation matrices of
rank-deficient rows, block-diagonal ones, repeated eigenvalues) and on extreme scales."""
import numpy as np
import pytest

from pymf._linalg import largest_eigenvalues


def _cases(n, rng):
    X = rng.standard_normal((n, 2 * n))
    yield "psd", X @ X.T
    Y = rng.standard_normal((n, n))
    yield "indefinite", Y + Y.T
    yield "negative definite", -(X @ X.T) - np.eye(n)
    x = rng.choice([-1.0, 1.0], n) * rng.uniform(0.5, 2.0, n)
    yield "rank one, mixed signs", np.outer(x, x)
    block = np.zeros((n, n))
    k = max(1, n // 3)
    Z = rng.standard_normal((k, k))
    block[:k, :k] = Z @ Z.T
    block[k:, k:] = 0.3 * np.eye(n - k)
    yield "block diagonal", block
    yield "multiple of the identity", 2.5 * np.eye(n)
    yield "zero", np.zeros((n, n))
    F = np.hstack([rng.standard_normal((n, 3)), np.ones((n, 1))])
    H = F @ F.T
    r = 1.0 / np.sqrt(np.diag(H))
    yield "correlation of rank 4", H * r[:, None] * r[None, :]
    yield "tiny", (X @ X.T) * 1e-200
    yield "huge", (X @ X.T) * 1e200
    yield "diagonal, unsorted", np.diag(rng.permutation(np.arange(n, dtype=float)) - 1.5)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 11, 32, 33, 64])
def test_largest_eigenvalue_is_numpys(n):
    rng = np.random.default_rng(n)
    for name, A in _cases(n, rng):
        reference = np.linalg.eigvalsh(A)[-1]
        got = largest_eigenvalues(A[None])[0]
        scale = max(np.abs(A).sum(axis=1).max(), np.finfo(float).tiny)
        assert abs(got - reference) <= 1e-13 * scale, (name, got, reference)


def test_large_matrices_are_numpys_own():
    """Above LAPACK_ABOVE the blocked LAPACK reduction is faster: the value is NumPy's."""
    from pymf import _linalg
    rng = np.random.default_rng(5)
    n = _linalg.LAPACK_ABOVE + 2
    X = rng.standard_normal((3, n, n))
    stack = X + X.transpose(0, 2, 1)
    assert np.array_equal(largest_eigenvalues(stack), np.linalg.eigvalsh(stack)[:, -1])
    assert largest_eigenvalues(np.zeros((0, n, n))).shape == (0,)
    small = stack[:, :_linalg.LAPACK_ABOVE, :_linalg.LAPACK_ABOVE]
    np.testing.assert_allclose(largest_eigenvalues(small), np.linalg.eigvalsh(small)[:, -1],
                               rtol=1e-13)


def test_a_stack_is_each_matrix_alone():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((50, 11, 20))
    stack = X @ X.transpose(0, 2, 1)
    together = largest_eigenvalues(stack)
    alone = np.array([largest_eigenvalues(A[None])[0] for A in stack])
    assert np.array_equal(together, alone)
    np.testing.assert_allclose(together, np.linalg.eigvalsh(stack)[:, -1], rtol=1e-13)
    # non-contiguous input is copied, not misread
    assert np.array_equal(largest_eigenvalues(np.asfortranarray(stack)), together)


def test_a_wrong_matrix_gives_a_different_answer():
    """The comparison above can fail: dropping the rank-2 update's second term (or reading
    one triangle as the other) moves the result far beyond the tolerance."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((11, 22))
    A = X @ X.T
    skewed = A.copy()
    skewed[np.triu_indices(11, 1)] *= 0.5  # no longer symmetric: half the upper triangle
    assert abs(largest_eigenvalues(skewed[None])[0] - np.linalg.eigvalsh(A)[-1]) > 1e-3


def test_entries_near_the_largest_double():
    """Finite entries whose row sums overflow still have a finite largest eigenvalue."""
    A = np.array([[1e308, 1e308], [1e308, 1e308]]) / 2.0 * 1.5
    got = largest_eigenvalues(A[None])[0]
    assert np.isfinite(got)
    np.testing.assert_allclose(got, 2 * A[0, 0], rtol=1e-15)


def test_bad_input():
    assert np.isnan(largest_eigenvalues(np.array([[[1.0, np.nan], [np.nan, 1.0]]]))[0])
    assert np.isnan(largest_eigenvalues(np.array([[[np.inf, 0.0], [0.0, 1.0]]]))[0])
    assert largest_eigenvalues(np.zeros((0, 3, 3))).shape == (0,)
    for shape in [(3, 3), (2, 3, 4), (2, 0, 0)]:
        with pytest.raises(ValueError, match="square matrices"):
            largest_eigenvalues(np.zeros(shape))
