"""The result base of every family: kept draws with named leading axes (chain, draw, ...),
per-draw statistics, traces, parameters, the seed actually used; atomic save/load (.npz or
a directory of .npy files, plus JSON; never pickle); diagnostics by arviz-stats and an
ArviZ DataTree.

A family's result subclasses Result, names itself with a unique `kind`, says the names of
its variables' trailing axes in `dims`, and adds its own summaries (posterior means,
predictions) through _family_arrays / _family_meta / _load_family.
"""
import json
import os
import zipfile

import numpy as np

from pymf.engine import registry
from pymf.engine.storage import (npz_path, png_path, remember_mapped_file, save_directory,
                                 save_npz)

FORMAT = 2  # format 1: the files of pymf 0.1 before the engine (read by legacy loaders)


class Result:
    kind = None
    dims = {}  # variable -> names of its axes after (chain, draw)

    def _set_common(self, *, params, seed, trace, draws=None, draw_units=None, draw_stats=None,
                    n_kept=0, interrupted=False, iterations=0):
        self.params = params
        self.seed = seed
        self.trace = trace
        self._draws = draws  # {variable: (draw, chain, ...)} or None
        self.draw_units = np.zeros(0, dtype=np.int64) if draw_units is None else draw_units
        self.draw_stats = draw_stats or {}  # {name: (draw, chain)}
        self.n_kept = int(n_kept)
        self.interrupted = bool(interrupted)
        self.iterations = int(iterations)

    def _set_record(self, record, params):
        """The common part from the engine's run record."""
        self._set_common(params=params, seed=record.seed, trace=record.trace, draws=record.draws,
                         draw_units=record.draw_units, draw_stats=record.draw_stats,
                         n_kept=record.n_kept, interrupted=record.interrupted,
                         iterations=record.units)

    # ---- the draws, ArviZ's way round ----
    @property
    def posterior(self):
        """{variable: array (chain, draw, ...)} of the kept draws (views), or {} if none
        were kept."""
        if not self._draws:
            return {}
        return {name: np.moveaxis(value, 0, 1) for name, value in self._draws.items()}

    @property
    def sample_stats(self):
        """{name: array (chain, draw)}: scalars recorded with every kept draw."""
        return {name: np.asarray(value).T for name, value in self.draw_stats.items()}

    def predict(self, rows, cols, return_std=False):
        """Posterior mean (and sd, return_std=True) of the model's expected value of the
        entries (rows[i], cols[i])."""
        raise NotImplementedError

    # ---- calibration of the posterior predictive (pymf.engine.calibration) ----
    def predictive_draws(self, rows, cols, rng, max_draws):
        """Family hook: (S, n) draws of new values of the entries from the posterior
        predictive (noise included), at most max_draws of them, or None without kept draws."""
        return None

    def predictive_moments(self, rows, cols):
        """Family hook: (mean, sd) of the posterior predictive of the entries, noise
        included, for a result without kept draws."""
        raise ValueError(f"{type(self).__name__} has no posterior predictive distribution "
                         "(a point estimate, or a run that kept no draws)")

    def coverage(self, test, levels=(0.5, 0.8, 0.9, 0.95), seed=0):
        """{level: fraction of the held-out values of `test` inside their central posterior
        predictive interval of that level}, noise included. A calibrated posterior gives
        about the level itself (within sqrt(l (1 - l) / n_test) plus the dependence between
        entries). The intervals are quantiles of up to 500 predictive draws (kept draws plus
        simulated noise, with a generator seeded by `seed`), or mean +- z sd without draws."""
        from pymf.engine import calibration
        return calibration.coverage(self, test, levels, seed)

    def calibration(self, test, levels=(0.5, 0.8, 0.9, 0.95), n_bins=10, seed=0):
        """coverage() at every level, and the held-out RMSE against the predicted sd in
        n_bins bins of equal counts (dict of lists); kept for plot_calibration."""
        from pymf.engine import calibration
        self._calibration = calibration.calibration(self, test, levels, n_bins, seed)
        return self._calibration

    def plot_calibration(self, path, test=None, levels=(0.5, 0.8, 0.9, 0.95), n_bins=10,
                         seed=0):
        """Write a PNG: nominal against observed coverage, and RMSE against predicted sd in
        bins. test=None plots the last calibration() (or the held-out set it was given).
        Returns the file written (path, with .png added unless it ends so)."""
        from pymf.engine import calibration
        path = png_path(path, "calibration plot")
        if test is not None:
            self.calibration(test, levels, n_bins, seed)
        table = getattr(self, "_calibration", None)
        if table is None:
            raise ValueError("plot_calibration needs held-out data: pass test= (or call "
                             "calibration(test) first)")
        return calibration.plot_calibration(table, path)

    def diagnostics(self, variables=None):
        """Rank-normalised split R-hat and bulk / tail ESS (Vehtari et al. 2021, computed by
        arviz-stats) of the per-draw statistics and of `variables` (names of posterior
        variables; each entry gets its own value). Needs at least 4 kept draws; R-hat needs
        at least 2 chains (arviz-stats gives NaN for one: compare chains of several seeds by
        stacking their posterior arrays). A result without per-draw statistics (IBP,
        linear-Gaussian) diagnoses its posterior variables when none are named."""
        from pymf.engine.diagnostics import diagnostics
        self._refuse_a_fit("diagnose")
        draws = dict(self.sample_stats)
        posterior = self.posterior
        if variables is None and not draws:
            # the IBP's K, sigma_x, ... and the linear model's theta: they said "no kept
            # draws" and advised keep_samples=True, which was in effect
            variables = sorted(posterior)
        for name in variables or ():
            if name not in posterior:
                raise ValueError(f"no posterior variable {name!r} (have {sorted(posterior)})")
            draws[name] = posterior[name]
        if not draws:
            raise ValueError("this result kept no draws to diagnose (keep_samples=False, or a "
                             "run stopped before its first kept draw)")
        return diagnostics(draws)

    def _refuse_a_fit(self, what):
        """A result of pymf.fit (kind '..._fit') is one point estimate or variational fit:
        no chain of draws (its messages advised keep_samples=, which pymf.fit refuses)."""
        if self.kind.endswith("_fit"):
            raise ValueError(f"a {type(self).__name__} (pymf.fit: a point estimate or a "
                             f"variational fit) has no chain of draws to {what}; pymf.sample "
                             "draws from the posterior")

    def to_arviz(self):
        """An ArviZ DataTree: the posterior group (chain, draw, ...) of the kept draws and a
        sample_stats group of the per-draw statistics. Needs pip install "pymf[arviz]"."""
        from pymf.engine.diagnostics import to_datatree
        self._refuse_a_fit("convert")
        if not self._draws:
            raise ValueError("this result kept no draws (keep_samples=False): nothing to convert")
        attrs = {"pymf_kind": self.kind, "seed": json.dumps(self.seed),
                 "params": json.dumps(self.params, default=str)}
        return to_datatree(self.posterior, self.sample_stats or None,
                           dims={k: v for k, v in self.dims.items() if k in self._draws},
                           attrs=attrs)

    # ---- persistence ----
    def _family_arrays(self):
        return {}

    def _family_meta(self):
        return {}

    def _load_family(self, get, meta):
        pass

    def save(self, path):
        """Save to `path`: one .npz file if it ends in .npz, else a directory of .npy files
        and meta.json (kept draws streamed there by sample_dir= are only flushed). Written
        whole then renamed; returns the path written. pymf.load reads it back."""
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise ValueError(f"the result path must be a non-empty file name, got {path!r}")
        path = os.fspath(path)
        arrays = dict(self._family_arrays())
        for name, value in (self._draws or {}).items():
            arrays[name + "_samples"] = value[: self.n_kept]
        for name, value in self.draw_stats.items():
            arrays["stat_" + name] = np.asarray(value)
        for name, value in self.trace.items():
            arrays["trace_" + name] = np.asarray(value)
        arrays["draw_units"] = np.asarray(self.draw_units)
        meta = {"kind": self.kind, "format": FORMAT, "params": self.params, "seed": self.seed,
                "n_kept": self.n_kept, "interrupted": self.interrupted,
                "iterations": self.iterations, "draws": sorted(self._draws or {}),
                "stats": sorted(self.draw_stats), "trace_keys": sorted(self.trace),
                # what load reads: a directory may still hold an earlier result's files
                "arrays": sorted(arrays), **self._family_meta()}
        if path.endswith(".npz"):
            return save_npz(npz_path(path), {k: np.asarray(v) for k, v in arrays.items()}, meta)
        return save_directory(path, arrays, meta)

    @classmethod
    def _from_saved(cls, get, meta):
        self = cls.__new__(cls)
        n = meta["n_kept"]
        draws = {name: get(name + "_samples")[:n] for name in meta["draws"]} or None
        self._set_common(params=meta["params"], seed=meta.get("seed"),
                         trace={k: np.asarray(get("trace_" + k)) for k in meta["trace_keys"]},
                         draws=draws, draw_units=get("draw_units"),
                         draw_stats={k: get("stat_" + k) for k in meta["stats"]},
                         n_kept=n, interrupted=meta["interrupted"], iterations=meta["iterations"])
        self._load_family(get, meta)
        return self


def load(path, mmap=False):
    """Load a result saved by any family's save() (a .npz file, or a directory: among
    others the sample_dir= a run's draws streamed to, once the result is saved there); a
    file that is no pymf result is a ValueError saying so. mmap=True maps a directory's
    arrays."""
    path = os.fspath(path)
    if not isinstance(mmap, (bool, np.bool_)):
        raise ValueError(f"mmap must be True or False, got {mmap!r}")
    if os.path.exists(path) and not (os.path.isdir(path) or os.path.isfile(path)):
        raise ValueError(f"{path!r} is not a regular file or a directory")
    if os.path.isfile(path):
        _check_result_file(path)
    try:
        return _load(path, mmap)
    except FileNotFoundError:
        raise
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, AttributeError,
            TypeError, IndexError) as exc:
        raise ValueError(f"{path!r} is not a result saved by pymf (or it is damaged): "
                         f"{type(exc).__name__}: {exc}") from exc


RESULT_FILE = ("a result file is the .npz archive that a result's save() writes (or the "
               "directory it writes, such as a sample_dir= the result was saved into), "
               "holding 'meta' (the kind of result and its settings, as JSON) and the "
               "result's arrays")


def _check_result_file(path):
    """A file that is no .npz archive, or one without the 'meta' that save() writes, is a
    ValueError saying only that (numpy's np.load called a file that is not a zip archive
    'pickled (object) data' and suggested allow_pickle=, which would not have helped)."""
    from pymf.cliutil import npz_problem  # here: cliutil imports pymf.datasets

    problem = npz_problem(path)
    what = {"empty": "it is empty",
            "npy": "it is a NumPy .npy file (one array), not a .npz archive",
            "not zip": "it is not a zip archive, as numpy.savez writes"}.get(problem)
    if what is None:
        try:
            with zipfile.ZipFile(path) as archive:
                held = sorted(name[:-4] if name.endswith(".npy") else name
                              for name in archive.namelist())
        except (zipfile.BadZipFile, OSError, EOFError):
            return  # damaged: _load's error says how
        if "meta" in held:
            return
        what = (f"it is a .npz archive without 'meta'; it holds "
                f"{', '.join(held) or 'nothing'}")
    raise ValueError(f"{path!r} is not a result saved by pymf: {what}; {RESULT_FILE}")


def _load(path, mmap):
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "meta.json")):
            # not a FileNotFoundError: the path the caller gave does exist
            raise ValueError("a directory without the meta.json that save() writes")
        with open(os.path.join(path, "meta.json")) as fh:
            meta = json.load(fh)

        # the arrays save() wrote (saves before it listed them: every .npy file there); a
        # file of an earlier result saved into the same directory is not this result's
        listed = meta.get("arrays")
        missing = [name + ".npy" for name in listed or ()
                   if not os.path.isfile(os.path.join(path, name + ".npy"))]
        if missing:
            # it loaded, and failed later (a trace of None, an AttributeError in predict)
            raise ValueError(f"{', '.join(missing)}, listed in its meta.json, "
                             f"{'is' if len(missing) == 1 else 'are'} missing")

        def get(name):
            if name == "__files__":
                files = [f[:-4] for f in os.listdir(path) if f.endswith(".npy")]
                return files if listed is None else [f for f in files if f in listed]
            file = os.path.join(path, name + ".npy")
            if (listed is not None and name not in listed) or not os.path.exists(file):
                return None
            if not mmap:
                return np.load(file, allow_pickle=False)
            return remember_mapped_file(np.load(file, mmap_mode="r", allow_pickle=False))
    else:
        archive = np.load(path, allow_pickle=False)
        if not hasattr(archive, "files"):
            raise ValueError("a single array, not a result archive")
        meta = json.loads(str(archive["meta"]))

        def get(name):
            if name == "__files__":
                return list(archive.files)
            return archive[name] if name in archive.files else None
    if meta.get("format") == FORMAT:
        return registry.result_class(meta["kind"])._from_saved(get, meta)
    # files written before the engine: each family reads its own
    legacy = registry.legacy_class(meta.get("kind"))
    if legacy is None:
        raise ValueError(f"unknown result kind {meta.get('kind')!r}")
    return legacy.from_legacy(get, meta)
