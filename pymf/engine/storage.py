"""Files: atomic .npz writes, checkpoints, and kept draws in memory or streamed to .npy.

Nothing here uses pickle. Every file is written under a temporary name of its own (two
processes saving to one path never write into each other's) and renamed, so a crash never
leaves half a result or half a checkpoint, and a user's earlier file stays whole until the
new one is complete. A directory result's meta.json is removed first and written last: a
save that fails part way leaves a folder that reads as damaged, never a mix of two results.
"""
import errno
import json
import os
import secrets
import shutil
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
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ValueError(f"the {what} path's directory {parent!r} is a file, not a directory")
    if not os.path.isdir(parent):
        raise ValueError(f"the {what} path's directory {parent!r} does not exist")
    return path


def npz_path(path, what="result"):
    """The .npz file a save or checkpoint writes (file_path)."""
    return file_path(path, ".npz", what)


def png_path(path, what="figure"):
    """The .png file a figure is written to (file_path)."""
    return file_path(path, ".png", what)


def _replace_with(target, suffix, write):
    """write(tmp) a file of a name no other process uses beside target, then rename it onto
    target; a write that fails (a full disk) removes its temporary file, which would
    otherwise keep the disk full, and leaves target as it was."""
    tmp = f"{target}.{os.getpid()}-{secrets.token_hex(4)}.tmp{suffix}"
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def save_npz(path, arrays, meta=None):
    """Write arrays (and a JSON meta record) to path, atomically; returns path."""
    payload = dict(arrays)
    if meta is not None:
        payload["meta"] = np.array(json.dumps(meta))
    _replace_with(path, ".npz", lambda tmp: np.savez(tmp, **payload))
    return path


def save_directory(path, arrays, meta):
    """A directory of .npy files plus meta.json, each written whole then renamed; arrays
    already streamed to their place (memory maps of that very file, still there) are only
    flushed. An earlier result's meta.json there is removed before any array is replaced
    and the new one written last, so that a save that fails part way (a full disk, Ctrl-C)
    leaves a folder load() refuses as damaged, not the old meta over new arrays."""
    if os.path.exists(path) and not os.path.isdir(path):
        # os.makedirs' bare "[Errno 17] File exists" said neither what nor why
        raise ValueError(f"the result path {path!r} is an existing file: a path without "
                         ".npz saves a directory there; give another path, or one ending in "
                         ".npz for a single file")
    os.makedirs(path, exist_ok=True)
    meta_file = os.path.join(path, "meta.json")
    if os.path.exists(meta_file):
        os.remove(meta_file)
    for name, value in arrays.items():
        target = os.path.join(path, name + ".npy")
        streamed = _memory_map_of(value)
        if streamed is not None and _is_mapped_file(streamed, target):
            streamed.flush()
            continue
        _replace_with(target, ".npy", lambda tmp: np.save(tmp, np.asarray(value)))

    def write_meta(tmp):
        with open(tmp, "w") as fh:
            fh.write(json.dumps(meta))
    _replace_with(meta_file, "", write_meta)
    return path


def remember_mapped_file(memmap):
    """Note which file (device, inode) a memory map pymf opened is of, so that a save into
    its place can tell whether that file is still there: the folder may have been removed,
    moved, or written over by another result since (a save that trusted the path alone
    skipped those arrays, and left a result of meta.json alone, or another run's arrays).
    Returns memmap."""
    info = os.stat(memmap.filename)
    memmap._pymf_file = (info.st_dev, info.st_ino)
    return memmap


def _is_mapped_file(memmap, target):
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return False
    return getattr(memmap, "_pymf_file", None) == (info.st_dev, info.st_ino)


def _memory_map_of(value):
    """The memory map pymf opened (remember_mapped_file) that value is a view of, or None.
    An empty view, such as the kept draws of a run stopped before its first one, shares no
    memory with its map and has no filename of its own, but its base chain still leads to
    the map."""
    base = value
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap) and hasattr(base, "_pymf_file"):
            return base
        base = base.base
    return None


def reserve_space(path, n_bytes, what):
    """Allocate a file's n_bytes on disk now: a memory map of a sparse file on a disk that
    fills up kills the process with SIGBUS (no message, nothing saved) at the first page
    written beyond the free space. A disk without the room is an OSError naming it."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, n_bytes)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                return  # a file system that cannot reserve: as before
            raise
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
        raise OSError(errno.ENOSPC, f"no room for {what} {path!r}: {n_bytes / 2**20:.1f} MiB "
                      f"with {free / 2**20:.1f} MiB free on its disk; free some space, keep "
                      "fewer draws (a larger thin) or give another sample_dir") from None
    finally:
        os.close(fd)


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
    (pymf.engine.driver.checkpoint_key) describes, naming what differs."""
    try:
        written = str(archive["fingerprint"])
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(f"the checkpoint {path!r} is damaged ({type(exc).__name__}: {exc}); "
                         "remove it or pass another path") from exc
    if written != key:
        raise ValueError(f"the checkpoint {path!r} was written by a different run "
                         f"({_differences(written, key)}); remove it or pass another path")


def _differences(written, key, shown=4):
    """What differs between two checkpoint keys (JSON), in words: the settings' paths with
    the checkpoint's value and this run's (the message used to list every setting that
    could differ, and not thin, trace_every, keep_samples or streaming)."""
    try:
        old, new = json.loads(written), json.loads(key)
    except ValueError:
        return "its settings cannot be read"
    found = []

    def walk(a, b, where):
        if isinstance(a, dict) and isinstance(b, dict):
            for name in sorted(set(a) | set(b)):
                walk(a.get(name), b.get(name), f"{where}.{name}" if where else name)
        elif a != b:
            found.append((where, a, b))
    walk(old, new, "")

    def short(value):
        text = json.dumps(value, default=str)
        return text if len(text) <= 40 else text[:37] + "..."
    names = {"seed": "seed", "streamed": "draws streamed to sample_dir", "keep": "keep_samples"}
    parts = []
    for where, a, b in found[:shown]:
        label = names.get(where, where.replace("run.", "").replace("plan.", ""))
        parts.append(f"{label}: the checkpoint's {short(a)}, this run's {short(b)}")
    if len(found) > shown:
        parts.append(f"and {len(found) - shown} more")
    if any(where == "seed" for where, _, _ in found) and isinstance(old.get("seed"), int):
        # seed=None draws fresh entropy each call, so the same call never resumed
        parts.append(f"to resume it, pass seed={old['seed']}")
    return "; ".join(parts) or "the settings are written differently"


def check_writable(directory, what):
    """Refuse (ValueError) a directory a run could not write its files to, before the run:
    the write used to fail a tenth of the run in (a checkpoint) or at its end (the CLI's
    --out), with the draws lost."""
    probe = os.path.join(directory, f".pymf-write-test-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise ValueError(f"the {what} directory {directory!r} cannot be written to "
                         f"({exc.strerror or exc})") from None


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
        check_writable(self.sample_dir, "sample_dir")
        open_memmap = np.lib.format.open_memmap
        created = []
        try:
            for name, shape in shapes.items():
                full = (n_draws,) + tuple(shape)
                path = os.path.join(self.sample_dir, f"{name}_samples.npy")
                if not resuming:
                    created.append(path)
                    mapped = open_memmap(path, mode="w+", dtype=np.float64, shape=full)
                else:
                    if not os.path.exists(path):
                        raise ValueError(f"resuming from a checkpoint, but the streamed samples "
                                         f"{path!r} are missing")
                    mapped = open_memmap(path, mode="r+")
                    if mapped.shape != full:
                        raise ValueError(f"the streamed samples {path!r} do not match this run")
                reserve_space(path, mapped.offset + mapped.nbytes, "the streamed samples")
                self.arrays[name] = remember_mapped_file(mapped)
        except OSError:
            # a new run's files that cannot be had whole are not left behind, half made
            self.arrays.clear()
            for path in created:
                try:
                    os.remove(path)
                except OSError:
                    pass
            raise

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
