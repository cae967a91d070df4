"""Data of the IBP family: the "Cambridge" images and the checkerboard held-out mask."""
import numpy as np

from pymf.engine.checks import check_count, check_real
from pymf.engine.seeds import check_seed

SIDE = 6


def cambridge_features():
    """The four 6 x 6 bar features (4 x 36, entries 0 or 1): horizontal bars in rows 1 and
    4, vertical bars in columns 1 and 4."""
    images = np.zeros((4, SIDE, SIDE))
    images[0, 1, :] = 1.0
    images[1, 4, :] = 1.0
    images[2, :, 1] = 1.0
    images[3, :, 4] = 1.0
    return images.reshape(4, SIDE * SIDE)


def make_cambridge(n=1000, sigma_x=0.5, seed=0, p=0.5):
    """(X, Z_true, A_true): n images of 6 x 6 pixels (X: n x 36), each the sum of the four
    bar features it has (each present with probability p) plus N(0, sigma_x^2) noise."""
    n = check_count(n, "n", 1)
    sigma_x = check_real(sigma_x, "sigma_x", positive=True)
    p = check_real(p, "p")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    rng = np.random.default_rng(check_seed(seed))
    A = cambridge_features()
    Z = (rng.random((n, A.shape[0])) < p).astype(np.float64)
    X = Z @ A + sigma_x * rng.standard_normal((n, A.shape[1]))
    return X, Z, A


def checkerboard_mask(n_rows, n_cols, fraction=0.1):
    """The paper's held-out set: a checkerboard over the first ceil(fraction n_rows) rows
    (cell (n, d) held out where n + d is even). True = held out."""
    n_rows, n_cols = check_count(n_rows, "n_rows", 1), check_count(n_cols, "n_cols", 1)
    fraction = check_real(fraction, "fraction")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    mask = np.zeros((n_rows, n_cols), dtype=bool)
    rows = int(np.ceil(fraction * n_rows))
    r, c = np.indices((rows, n_cols))
    mask[:rows] = (r + c) % 2 == 0
    return mask
