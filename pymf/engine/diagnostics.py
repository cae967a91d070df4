"""Convergence diagnostics and ArviZ export, both delegated to the ArviZ packages.

* ``diagnostics(draws)``: rank-normalised split R-hat, bulk ESS and tail ESS of Vehtari,
  Gelman, Simpson, Carpenter and Buerkner (2021), "Rank-normalization, folding, and
  localization: an improved R-hat for assessing convergence of MCMC", Bayesian Analysis
  16(2). Computed by arviz-stats' NumPy array layer (``arviz_stats.base.array_stats``),
  which needs only NumPy and SciPy: no xarray object is built.
* ``to_datatree(posterior, ...)``: an ArviZ ``xarray.DataTree`` (groups ``posterior`` and
  ``sample_stats``, dims ``chain, draw, ...``) built by ``arviz_base.from_dict``, so the
  rest of ArviZ (``arviz_stats.summary``, ``arviz_plots``, ...) reads pymf results.

arviz-stats is a core dependency of pymf (on Python >= 3.11, which arviz-stats requires);
arviz-base and xarray come with the ``arviz`` extra. ``require`` names the install command
when one is missing.
"""
import importlib
import importlib.metadata
import json
import numbers
import sys
from collections.abc import Mapping

import numpy as np

# install command per importable module: arviz-stats is a core dependency (a missing one is
# a broken install), arviz-base and xarray come with the extra
ARVIZ_EXTRA = 'pip install "pymf[arviz]"'
_INSTALL = {
    "arviz_stats": 'pip install "arviz-stats>=0.8"',
    "arviz_base": ARVIZ_EXTRA,
    "xarray": ARVIZ_EXTRA,
}
_MIN_PYTHON = (3, 11)  # arviz-stats >= 0.8 and arviz-base >= 0.8 require it

# Tail ESS is the smaller of the ESS of the 5% and 95% quantile indicators (Vehtari et al.
# 2021; posterior::ess_tail and ArviZ 0.x). arviz-stats' own DataTree summary
# uses rcParams["stats.ci_prob"] (0.89: the 11% and 89% quantiles) instead, so the array
# call below passes the paper's quantiles explicitly.
TAIL_PROBS = (0.05, 0.95)
MIN_DRAWS = 4  # arviz-stats returns NaN below 4 draws per chain; refused here instead


def require(package):
    """Import an optional package by its module name (``"arviz_base"``) and return it.

    Raises ImportError naming the exact pip command that installs it (and the Python it
    needs, on an older one)."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        top = package.split(".")[0]
        command = _INSTALL.get(top, f"pip install {top.replace('_', '-')}")
        msg = f"{package} is needed here but could not be imported ({exc}); install it " \
              f"with: {command}"
        if top in _INSTALL and sys.version_info < _MIN_PYTHON:
            msg += " (it needs Python >= %d.%d; this is %d.%d)" % (
                _MIN_PYTHON + sys.version_info[:2])
        raise ImportError(msg, name=package) from exc


def _array_stats():
    base = require("arviz_stats.base")
    stats = getattr(base, "array_stats", None)
    if stats is None:  # arviz-stats < 0.8 had another array layer
        raise ImportError("arviz-stats is too old (no arviz_stats.base.array_stats); "
                          f"install a current one with: {_INSTALL['arviz_stats']}",
                          name="arviz_stats")
    return stats


def _check_name(name, what):
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} names must be non-empty strings, got {name!r}")


def _as_array(name, value, what):
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise ValueError(f"{what}[{name!r}] is not a rectangular array: {exc}") from None


def _check_draws(name, value, what="draws"):
    """(chain, draw, *rest) array of finite reals with at least MIN_DRAWS draws."""
    _check_name(name, what)
    arr = _as_array(name, value, what)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number)
                                   or arr.dtype == np.bool_) \
            or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{what}[{name!r}] must be an array of real numbers, "
                         f"got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"{what}[{name!r}] must have shape (chain, draw, ...), "
                         f"got shape {arr.shape}")
    if arr.shape[0] < 1:
        raise ValueError(f"{what}[{name!r}] has no chains (shape {arr.shape})")
    if arr.shape[1] < MIN_DRAWS:
        raise ValueError(f"{what}[{name!r}] needs at least {MIN_DRAWS} draws per chain, "
                         f"got {arr.shape[1]} (shape {arr.shape})")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{what}[{name!r}] has {bad} non-finite value(s) (NaN or inf)")
    return arr


def _scalar_or_array(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def diagnostics(draws):
    """R-hat, bulk ESS and tail ESS of each quantity, computed by arviz-stats.

    draws: mapping name -> array of shape (chain, draw, *rest), real and finite, at least
    4 draws per chain. Returns {name: {"rhat": r, "ess_bulk": b, "ess_tail": t}}: floats
    for a scalar quantity (rest == ()), arrays of shape rest otherwise.

    R-hat is the rank-normalised split R-hat (the larger of the bulk and the folded-tail
    R-hat); ESS bulk is the ESS of the rank-normalised split chains, ESS tail the smaller
    ESS of the 5% and 95% quantile indicators (TAIL_PROBS). One chain is accepted: its
    ESS is that of its two halves, but arviz-stats gives no R-hat below 2 chains (NaN).
    A quantity constant across all draws has R-hat NaN and ESS chain*draw.
    """
    if not isinstance(draws, Mapping):
        raise TypeError(f"draws must be a mapping name -> (chain, draw, ...) array, "
                        f"got {type(draws).__name__}")
    checked = {name: _check_draws(name, value) for name, value in draws.items()}
    stats = _array_stats()
    out = {}
    # a constant quantity divides 0 by 0 inside arviz-stats' R-hat: NaN, without the warning
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, arr in checked.items():
            kw = {"chain_axis": 0, "draw_axis": 1}
            out[name] = {
                "rhat": _scalar_or_array(stats.rhat(arr, method="rank", **kw)),
                "ess_bulk": _scalar_or_array(stats.ess(arr, method="bulk", **kw)),
                "ess_tail": _scalar_or_array(stats.ess(arr, method="tail", prob=TAIL_PROBS,
                                                       **kw)),
            }
    return out


# --- ArviZ DataTree -------------------------------------------------------------------

def _plain(value, where):
    """numpy scalars/arrays -> Python values, recursively; refuses what JSON cannot hold."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"attrs{where} has a non-string key {k!r}: attrs must be "
                                 "JSON-like")
            out[k] = _plain(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise ValueError(f"attrs{where} is a {type(value).__name__}: attrs must be JSON-like "
                     "(str, numbers, bool, None, lists, dicts)")


def _flat_ok(value):
    """Stored as is by every xarray backend (netCDF included): a string, a non-bool number,
    or a non-empty flat list of only strings or only non-bool numbers."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if isinstance(value, str) or number(value):
        return True
    if isinstance(value, list) and value:
        return all(isinstance(v, str) for v in value) or all(number(v) for v in value)
    return False


def _json_attrs(attrs):
    """attrs made storable: JSON-like values; whatever netCDF cannot hold as an attribute
    (nested dicts, None, bools, mixed or nested lists) becomes its JSON text."""
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise ValueError(f"attrs must be a mapping, got {type(attrs).__name__}")
    out = {}
    for key, value in _plain(dict(attrs), "").items():
        out[key] = value if _flat_ok(value) else json.dumps(value, sort_keys=True)
    return out


def _check_group(group, what, dims, coords, sizes, shape0=None):
    """Checked arrays of one group; sizes (dim -> length) is shared across groups."""
    if not isinstance(group, Mapping):
        raise TypeError(f"{what} must be a mapping name -> (chain, draw, ...) array, "
                        f"got {type(group).__name__}")
    if not group:
        raise ValueError(f"{what} is empty")
    out = {}
    for name, value in group.items():
        _check_name(name, what)
        arr = _as_array(name, value, what)
        if arr.dtype == object:
            raise ValueError(f"{what}[{name!r}] must be a numeric array, got dtype object")
        if arr.ndim < 2:
            raise ValueError(f"{what}[{name!r}] must have shape (chain, draw, ...), "
                             f"got shape {arr.shape}")
        if shape0 is None:
            shape0 = arr.shape[:2]
        elif arr.shape[:2] != shape0:
            raise ValueError(f"{what}[{name!r}] has (chain, draw) = {arr.shape[:2]}, "
                             f"but the posterior has {shape0}")
        names = list(dims.get(name, [f"{name}_dim_{i}" for i in range(arr.ndim - 2)]))
        if len(names) != arr.ndim - 2:
            raise ValueError(f"dims[{name!r}] names {len(names)} axes ({names}) but "
                             f"{what}[{name!r}] has {arr.ndim - 2} beyond (chain, draw) "
                             f"(shape {arr.shape})")
        if len(set(names)) != len(names) or {"chain", "draw"} & set(names):
            raise ValueError(f"dims[{name!r}] = {names}: names must be distinct and not "
                             "'chain' or 'draw'")
        for dim, n in zip(names, arr.shape[2:]):
            if dim in coords and len(coords[dim]) != n:
                raise ValueError(f"coords[{dim!r}] has {len(coords[dim])} values but "
                                 f"{what}[{name!r}] has {n} along {dim!r}")
            if sizes.setdefault(dim, n) != n:
                raise ValueError(f"dimension {dim!r} has length {sizes[dim]} in one "
                                 f"variable and {n} in {what}[{name!r}]")
        out[name] = arr
    return out, shape0


def to_datatree(posterior, sample_stats=None, dims=None, coords=None, attrs=None):
    """An ArviZ DataTree of draws, built by arviz_base.from_dict.

    posterior: mapping name -> array (chain, draw, *rest); sample_stats: optional mapping
    name -> array (chain, draw, ...) with the posterior's chain and draw counts (e.g. the
    log density or the step size of every draw). dims: name -> names of its rest axes
    (``{"W": ["row", "factor"]}``; unnamed axes become ``W_dim_0``...); coords: dim ->
    coordinate values (integers from 0 otherwise). attrs: JSON-like metadata put on the
    root and on the posterior group, beside ``inference_library="pymf"``; values netCDF
    cannot store as attributes (nested dicts, None, bools, mixed lists) are stored as their
    JSON text, so the tree can be written with ``to_netcdf``/``to_zarr``.

    Needs arviz-base and xarray: ImportError naming ``pip install "pymf[arviz]"``
    otherwise.
    """
    dims = {} if dims is None else dims
    coords = {} if coords is None else coords
    if not isinstance(dims, Mapping) or not isinstance(coords, Mapping):
        raise TypeError("dims and coords must be mappings")
    for name, names in dims.items():
        if not isinstance(names, (list, tuple)) or not all(isinstance(d, str) for d in names):
            raise ValueError(f"dims[{name!r}] must be a list of dimension names, "
                             f"got {names!r}")
    coords = {dim: np.asarray(values) for dim, values in coords.items()}
    for dim, values in coords.items():
        if values.ndim != 1:
            raise ValueError(f"coords[{dim!r}] must be one-dimensional, got shape "
                             f"{values.shape}")

    sizes = {}
    post, shape0 = _check_group(posterior, "posterior", dims, coords, sizes)
    data = {"posterior": post}
    if sample_stats is not None:
        data["sample_stats"], _ = _check_group(sample_stats, "sample_stats", dims, coords,
                                               sizes, shape0)
    stray = sorted(set(dims) - set(post) - set(data.get("sample_stats", {})), key=str)
    if stray:
        raise ValueError(f"dims names variables that are not given: {stray}")
    meta = {"inference_library": "pymf"}
    try:
        meta["inference_library_version"] = importlib.metadata.version("pymf")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path
        pass
    meta.update(_json_attrs(attrs))

    require("xarray")
    azb = require("arviz_base")
    return azb.from_dict(
        data, dims={k: list(v) for k, v in dims.items()}, coords=coords,
        sample_dims=["chain", "draw"], index_origin=0,
        attrs={"/": dict(meta), "posterior": dict(meta)})
