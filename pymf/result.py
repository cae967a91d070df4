"""The result of a sampling run: posterior means, thinned samples, traces; save / load.

Storage never uses pickle: either one .npz file or a directory of .npy files plus a
meta.json. A directory is also how long runs stream their samples (pymf.sample with
sample_dir=...): the sample arrays are .npy files written in place as the run goes.
"""
import json
import os
import zipfile

import numpy as np

from pymf import _tweedie
from pymf.data import entry_ids

_ARRAYS = ("W_mean", "H_mean", "W_samples", "H_samples", "sample_iterations")


class SampleResult:
    """Posterior summaries of one chain.

    W_mean (I x K), H_mean (K x J): means over the kept samples.
    W_samples (kept x I x K), H_samples (kept x K x J): the kept samples (None if not kept).
    trace: dict of 1-D arrays, all of the same length: "iteration", "time" (seconds of
        sampling, trace computations excluded), "loglik" (sum of -d_beta/phi, i.e. the
        log-likelihood up to a constant of V), "logpost" (loglik + log prior) and, with a
        test set, "test_rmse" (of the running posterior-mean prediction) and
        "test_rmse_sample" (of the current state).
    params: the model, sampler and run settings.
    n_kept: the number of kept samples; iterations: the iterations the chain ran (burn-in
    included); interrupted: True if Ctrl-C ended the run early.
    """

    def __init__(self, W_mean, H_mean, W_samples, H_samples, sample_iterations, trace, params,
                 n_kept, interrupted=False, iterations=None):
        self.W_mean = W_mean
        self.H_mean = H_mean
        self.W_samples = W_samples
        self.H_samples = H_samples
        self.sample_iterations = sample_iterations
        self.trace = trace
        self.params = params
        self.n_kept = int(n_kept)
        self.interrupted = bool(interrupted)
        if iterations is None:
            iterations = int(trace["iteration"][-1]) if len(trace.get("iteration", [])) else 0
        self.iterations = int(iterations)

    def __repr__(self):
        shape = None if self.W_mean is None else (self.W_mean.shape[0], self.H_mean.shape[1])
        return (f"SampleResult(shape={shape}, n_kept={self.n_kept}, "
                f"interrupted={self.interrupted}, trace={sorted(self.trace)})")

    def predict(self, rows, cols, return_std=False):
        """Posterior mean (and standard deviation) of mu_ij = (W H)_ij over the kept samples."""
        rows, cols = entry_ids(rows, cols, (self.W_mean.shape[0], self.H_mean.shape[1]))
        if self.W_samples is None or self.n_kept == 0:
            raise ValueError("this result kept no samples; run with keep_samples=True "
                             "(the default) to predict posterior means")
        total = np.zeros(rows.size)
        total_sq = np.zeros(rows.size)
        for s in range(self.n_kept):
            W = np.ascontiguousarray(self.W_samples[s])
            Ht = np.ascontiguousarray(self.H_samples[s].T)
            mu = _tweedie.predict_entries(W, Ht, rows, cols)
            total += mu
            total_sq += mu * mu
        mean = total / self.n_kept
        if not return_std:
            return mean
        var = np.maximum(total_sq / self.n_kept - mean * mean, 0.0)
        return mean, np.sqrt(var)

    # ---- persistence ----
    def _arrays(self):
        out = {}
        for name in _ARRAYS:
            value = getattr(self, name)
            if value is not None:
                if name in ("W_samples", "H_samples"):
                    value = value[: self.n_kept]
                out[name] = np.asarray(value)
        for key, value in self.trace.items():
            out["trace_" + key] = np.asarray(value)
        return out

    def _meta(self):
        return {"params": self.params, "n_kept": self.n_kept, "interrupted": self.interrupted,
                "iterations": self.iterations,
                "trace_keys": sorted(self.trace), "format": 1}

    def save(self, path):
        """Save to `path`: a .npz file if it ends in .npz, else a directory of .npy files."""
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise ValueError(f"the result path must be a non-empty file name, got {path!r}")
        path = os.fspath(path)
        arrays = self._arrays()
        meta = json.dumps(self._meta())
        if path.endswith(".npz"):
            tmp = path[:-4] + ".tmp.npz"
            np.savez(tmp, meta=np.array(meta), **arrays)
            os.replace(tmp, path)
            return path
        os.makedirs(path, exist_ok=True)
        for name, value in arrays.items():
            target = os.path.join(path, name + ".npy")
            if isinstance(value, np.memmap) and os.path.abspath(value.filename) == os.path.abspath(target):
                value.flush()  # already streamed there
                continue
            tmp = target + ".tmp.npy"
            np.save(tmp, value)
            os.replace(tmp, target)
        with open(os.path.join(path, "meta.json.tmp"), "w") as fh:
            fh.write(meta)
        os.replace(os.path.join(path, "meta.json.tmp"), os.path.join(path, "meta.json"))
        return path


def load(path, mmap=False):
    """Load a result written by SampleResult.save (or streamed by pymf.sample),
    BPMFResult.save or FitResult.save; a file that is none of these is a ValueError."""
    path = os.fspath(path)
    if not isinstance(mmap, (bool, np.bool_)):
        raise ValueError(f"mmap must be True or False, got {mmap!r}")
    if os.path.exists(path) and not (os.path.isdir(path) or os.path.isfile(path)):
        raise ValueError(f"{path!r} is not a regular file or a directory")
    try:
        return _load(path, mmap)
    except FileNotFoundError:
        raise
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, AttributeError,
            TypeError, IndexError) as exc:
        raise ValueError(f"{path!r} is not a result saved by pymf (or it is damaged): "
                         f"{type(exc).__name__}: {exc}") from exc


def npz_path(path, what="result"):
    """The .npz path a save writes: a non-empty path (str or os.PathLike), with .npz added,
    in a directory that exists."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"the {what} path must be a non-empty file name, got {path!r}")
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    if os.path.isdir(path):
        raise ValueError(f"the {what} path {path!r} is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"the {what} path's directory {parent!r} does not exist")
    return path


def open_checkpoint(path):
    """np.load of a checkpoint, with a file that is not one (empty, truncated, foreign)
    turned into a ValueError that says so; the caller checks its fingerprint."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"the checkpoint {path!r} cannot be read ({type(exc).__name__}: "
                         f"{exc}); remove it or pass another path") from exc
    if not hasattr(archive, "files") or "fingerprint" not in archive.files:
        raise ValueError(f"{path!r} is not a pymf checkpoint; remove it or pass another path")
    return archive


def _load(path, mmap):
    if os.path.isdir(path):
        with open(os.path.join(path, "meta.json")) as fh:
            meta = json.load(fh)

        def get(name):
            file = os.path.join(path, name + ".npy")
            if not os.path.exists(file):
                return None
            return np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
    else:
        archive = np.load(path, allow_pickle=False)
        meta = json.loads(str(archive["meta"]))
        if meta.get("kind") == "bpmf":
            from pymf.bpmf import load_bpmf
            return load_bpmf(archive, meta)
        if meta.get("kind") == "linear":
            from pymf.hamcmc import LinearResult
            return LinearResult.from_archive(archive, meta)
        if meta.get("kind") == "fit" or ("W" in archive.files and "n_kept" not in meta):
            from pymf.optim import FitResult
            return FitResult(archive["W"], archive["H"],
                             {k: archive["trace_" + k] for k in meta["trace_keys"]},
                             meta["params"], meta["iterations"])

        def get(name):
            return archive[name] if name in archive.files else None
    n_kept = meta["n_kept"]
    values = {name: get(name) for name in _ARRAYS}
    for name in ("W_samples", "H_samples", "sample_iterations"):
        if values[name] is not None:
            values[name] = values[name][:n_kept]
    trace = {key: np.asarray(get("trace_" + key)) for key in meta["trace_keys"]}
    return SampleResult(values["W_mean"], values["H_mean"], values["W_samples"],
                        values["H_samples"], values["sample_iterations"], trace, meta["params"],
                        n_kept, meta.get("interrupted", False), meta.get("iterations"))
