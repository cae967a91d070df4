"""Convergence diagnostics across chains: split-R-hat and effective sample size.

Both take draws of one scalar as an array (chains, draws). Formulas of Gelman et al.,
Bayesian Data Analysis (3rd ed.), section 11.4-11.5: every chain is split in halves, so a
chain that drifts also shows up; the ESS uses Geyer's initial positive sequence on the
autocorrelations combined across chains.
"""
import numpy as np


def _as_draws(x):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"draws must be a (chains, draws) array, got shape {x.shape}")
    if x.shape[1] < 4:
        raise ValueError("at least 4 draws per chain are needed")
    if not np.all(np.isfinite(x)):
        raise ValueError("draws must be finite")
    return x


def _split(x):
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half:]], axis=0)


def split_rhat(draws):
    """Potential scale reduction of split chains: about 1 when they agree; > 1.01 - 1.1
    signals chains that have not mixed."""
    x = _split(_as_draws(draws))
    n = x.shape[1]
    B = n * x.mean(axis=1).var(ddof=1)
    W = x.var(axis=1, ddof=1).mean()
    if W == 0.0:
        return 1.0 if B == 0.0 else float("inf")
    var_plus = (n - 1) / n * W + B / n
    return float(np.sqrt(var_plus / W))


def ess(draws):
    """Effective sample size of the mean over all chains."""
    x = _split(_as_draws(draws))
    m, n = x.shape
    centred = x - x.mean(axis=1, keepdims=True)
    # autocovariances of every chain by FFT, lags 0 .. n-1
    size = 1 << int(np.ceil(np.log2(2 * n)))
    f = np.fft.rfft(centred, size, axis=1)
    acov = np.fft.irfft(f * np.conj(f), size, axis=1)[:, :n] / n
    W = x.var(axis=1, ddof=1).mean()
    var_plus = (n - 1) / n * W + n * x.mean(axis=1).var(ddof=1) / n
    if var_plus == 0.0:
        return float(m * n)
    rho = 1.0 - (W - acov.mean(axis=0)) / var_plus
    rho[0] = 1.0
    # Geyer: sum pairs rho_2k + rho_2k+1 while positive, made monotone
    total, previous = 0.0, np.inf
    for k in range(0, n - 1, 2):
        pair = rho[k] + rho[k + 1]
        if pair <= 0:
            break
        pair = min(pair, previous)
        total += pair
        previous = pair
    tau = -1.0 + 2.0 * total
    return float(m * n / max(tau, 1.0 / np.log10(max(m * n, 10))))
