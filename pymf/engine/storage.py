"""Files: atomic .npz writes, checkpoints, and kept draws in memory or streamed to .npy.

Nothing here uses pickle. Every file is written under a temporary name and renamed, so a
crash never leaves half a result or half a checkpoint, and a user's earlier file stays
whole until the new one is complete.
"""
import json
import os
import zipfile

import numpy as np


def file_path(path, suffix, what):
    """The file a save writes: a non-empty path (str or os.PathLike) that names a file (not
    ".", ".." or "dir/": "." became a file "..npz" in the working directory), with suffix
    added unless it ends so, that is no directory, in a directory that exists;
    checked before any work, so that a wrong path costs nothing and the path returned is
    the file written."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"the {what} path must be a non-empty file name, got {path!r}")
    path = os.fspath(path)
    if os.path.basename(path) in ("", ".", ".."):
        raise ValueError(f"the {what} path {path!r} is a directory, not a file name")
    if not path.endswith(suffix):
        path += suffix
    if os.path.isdir(path):
        raise ValueError(f"the {what} path {path!r} is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"the {what} path's directory {parent!r} does not exist")
    return path


def npz_path(path, what="result"):
    """The .npz file a save or checkpoint writes (file_path)."""
    return file_path(path, ".npz", what)


def png_path(path, what="figure"):
    """The .png file a figure is written to (file_path)."""
    return file_path(path, ".png", what)


def save_npz(path, arrays, meta=None):
    """Write arrays (and a JSON meta record) to path, atomically; returns path."""
    payload = dict(arrays)
    if meta is not None:
        payload["meta"] = np.array(json.dumps(meta))
    tmp = path[:-4] + ".tmp.npz" if path.endswith(".npz") else path + ".tmp.npz"
    np.savez(tmp, **payload)
    os.replace(tmp, path)
    return path


def save_directory(path, arrays, meta):
    """A directory of .npy files plus meta.json, each written whole then renamed; arrays
    already streamed to their place (memory maps of that very file) are only flushed."""
    if os.path.exists(path) and not os.path.isdir(path):
        # os.makedirs' bare "[Errno 17] File exists" said neither what nor why
        raise ValueError(f"the result path {path!r} is an existing file: a path without "
                         ".npz saves a directory there; give another path, or one ending in "
                         ".npz for a single file")
    os.makedirs(path, exist_ok=True)
    for name, value in arrays.items():
        target = os.path.join(path, name + ".npy")
        streamed = _memory_map_of(value)
        if streamed is not None and os.path.abspath(streamed.filename) == os.path.abspath(target):
            streamed.flush()
            continue
        tmp = target + ".tmp.npy"
        np.save(tmp, np.asarray(value))
        os.replace(tmp, target)
    tmp = os.path.join(path, "meta.json.tmp")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(meta))
    os.replace(tmp, os.path.join(path, "meta.json"))
    return path


def _memory_map_of(value):
    """The memory map (of a file) that value is a view of, or None. An empty view, such as
    the kept draws of a run stopped before its first one, shares no memory with its map
    and has no filename of its own, but its base chain still leads to the map."""
    base = value
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap) and base.filename is not None:
            return base
        base = base.base
    return None


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


def check_key(archive, path, key):
    """Refuse (ValueError) an open checkpoint written by a run other than the one `key`
    (pymf.engine.driver.checkpoint_key) describes."""
    if str(archive["fingerprint"]) != key:
        raise ValueError(
            f"the checkpoint {path!r} was written by a different run (model, sampler, "
            "seed, data, init or run length differ); remove it or pass another path")


def check_checkpoint(path, key):
    """Raise ValueError unless `path` is a readable checkpoint of the run `key` describes
    (a process that must know before the run loop reads it: the MPI ring's rank 0)."""
    with open_checkpoint(path) as archive:
        check_key(archive, path, key)


class DrawStore:
    """The kept draws of a run: for every variable an array (draw, chain, ...), in memory
    or as .npy memory maps in sample_dir ({name}_samples.npy) written as the run goes. A
    resumed run reopens the streamed files (never truncates them); a new run refuses a
    folder that already holds them (an earlier run's draws, or a saved result's: writing
    over them lost that result, and changed the draws of an earlier result still open,
    which are memory maps of those very files)."""

    def __init__(self, shapes, n_draws, sample_dir=None, resuming=False):
        self.sample_dir = None if sample_dir is None else os.fspath(sample_dir)
        self.arrays = {}
        if self.sample_dir is None:
            for name, shape in shapes.items():
                self.arrays[name] = np.zeros((n_draws,) + tuple(shape))
            return
        if not resuming:
            held = [f"{name}_samples.npy" for name in shapes
                    if os.path.exists(os.path.join(self.sample_dir, f"{name}_samples.npy"))]
            if held:
                raise ValueError(f"sample_dir {self.sample_dir!r} already holds "
                                 f"{', '.join(held)} (an earlier run's draws or a saved "
                                 "result); give a new or empty folder, or remove them (a run "
                                 "resumed from its checkpoint= reopens its own)")
        os.makedirs(self.sample_dir, exist_ok=True)
        open_memmap = np.lib.format.open_memmap
        for name, shape in shapes.items():
            full = (n_draws,) + tuple(shape)
            path = os.path.join(self.sample_dir, f"{name}_samples.npy")
            if not resuming:
                self.arrays[name] = open_memmap(path, mode="w+", dtype=np.float64, shape=full)
                continue
            if not os.path.exists(path):
                raise ValueError(f"resuming from a checkpoint, but the streamed samples {path!r} "
                                 "are missing")
            self.arrays[name] = open_memmap(path, mode="r+")
            if self.arrays[name].shape != full:
                raise ValueError(f"the streamed samples {path!r} do not match this run")

    @property
    def streamed(self):
        return self.sample_dir is not None

    def put(self, index, draw):
        for name, value in draw.items():
            self.arrays[name][index] = value

    def flush(self):
        for value in self.arrays.values():
            if isinstance(value, np.memmap):
                value.flush()

    def head(self, n):
        """The first n draws of every variable (views)."""
        return {name: value[:n] for name, value in self.arrays.items()}

    def snapshot(self, n):
        """What a checkpoint holds of the kept draws: the in-memory ones (streamed ones are
        flushed to their files before the checkpoint that counts them is written)."""
        if self.streamed:
            self.flush()
            return {}
        return {"kept_" + name: value[:n] for name, value in self.arrays.items()}

    def restore(self, archive, n):
        if self.streamed:
            return
        for name, value in self.arrays.items():
            value[:n] = archive["kept_" + name]
