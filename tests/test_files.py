"""Nothing a user saved is lost: saves into a result's own folder, saves that fail part way,
two writers of one path, a sample_dir on a full disk, checkpoints that cannot be written
or read, and what a refused checkpoint says. Each case is one a user's-eye review met
(2026-11-28) and fails on the code before it."""
import errno
import os
import shutil

import numpy as np
import pytest

import pymf
from pymf.engine import storage


@pytest.fixture(scope="module")
def data():
    V, _, _ = pymf.datasets.make_tweedie_nmf(30, 20, 3, beta=1.0, seed=0)
    return V


def run(data, seed=0, n_samples=20, **options):
    return pymf.sample(pymf.TweedieNMF(3), data, pymf.PSGLD(blocks=2, step_size=1e-3),
                       n_samples=n_samples, seed=seed, progress=False, **options)


def assert_same_result(a, b):
    for name in ("W_samples", "H_samples", "W_mean", "H_mean"):
        assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name
    assert a.seed == b.seed


@pytest.mark.parametrize("what_happened", ["removed", "moved", "replaced"])
def test_a_result_saved_back_into_its_folder_is_written_whole(data, tmp_path, what_happened):
    """A result whose arrays are memory maps of DIR's files skipped them when saved to DIR
    again, trusting the path: after DIR was removed that left meta.json alone, after it was
    moved the same, and after another result was saved there, one run's meta over another
    run's arrays, loaded without a word."""
    folder = str(tmp_path / "result")
    first = run(data, seed=0)
    first.save(folder)
    opened = pymf.load(folder, mmap=True)
    if what_happened == "removed":
        shutil.rmtree(folder)
    elif what_happened == "moved":
        os.rename(folder, str(tmp_path / "elsewhere"))
    else:
        run(data, seed=7).save(folder)
    opened.save(folder)
    assert_same_result(pymf.load(folder), first)


def test_a_streamed_run_saved_into_its_removed_sample_dir_is_written_whole(data, tmp_path):
    folder = str(tmp_path / "draws")
    streamed = run(data, sample_dir=folder)
    kept = np.array(streamed.W_samples)
    shutil.rmtree(folder)
    streamed.save(folder)
    assert np.array_equal(pymf.load(folder).W_samples, kept)


def test_a_directory_save_that_fails_part_way_leaves_no_mix_of_two_results(data, tmp_path,
                                                                              monkeypatch):
    """A save over an earlier result that stopped part way (a full disk) left the old
    meta.json over some new arrays, which loaded as the old run; its temporary file stayed
    behind, keeping the disk full."""
    folder = str(tmp_path / "result")
    run(data, seed=0).save(folder)
    new = run(data, seed=7)
    real_save, calls = np.save, []

    def fails_on_the_third(path, value):
        calls.append(path)
        if len(calls) == 3:
            with open(path, "wb") as fh:
                fh.write(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(path, value)
    monkeypatch.setattr(np, "save", fails_on_the_third)
    with pytest.raises(OSError, match="No space left"):
        new.save(folder)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="without the meta.json"):
        pymf.load(folder)
    assert not [f for f in os.listdir(folder) if ".tmp" in f]
    new.save(folder)  # and the next save succeeds
    assert_same_result(pymf.load(folder), new)


def test_a_file_save_that_fails_keeps_the_earlier_file_and_leaves_nothing(data, tmp_path,
                                                                          monkeypatch):
    path = str(tmp_path / "result.npz")
    old = run(data, seed=0)
    old.save(path)

    def full_disk(file, **arrays):
        with open(file, "wb") as fh:
            fh.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run(data, seed=7).save(path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["result.npz"]
    assert_same_result(pymf.load(path), old)


def test_two_writers_of_one_path_do_not_write_into_each_others_file(tmp_path, monkeypatch):
    """The temporary name was fixed (PATH.tmp.npz): a second process saving to the same path
    (a job array reusing a checkpoint path) truncated and renamed the first one's file, and
    the first failed (FileNotFoundError). A save made while another is under way stands in
    for the second process."""
    path = str(tmp_path / "shared.npz")
    real_savez, inner = np.savez, []

    def savez_interleaved(file, **arrays):
        real_savez(file, **arrays)
        if not inner:
            inner.append(True)
            storage.save_npz(path, {"x": np.array([2.0])})
    monkeypatch.setattr(np, "savez", savez_interleaved)
    storage.save_npz(path, {"x": np.array([1.0])})
    monkeypatch.undo()
    with np.load(path) as archive:
        assert archive["x"][0] == 1.0  # the last rename wins, whole
    assert os.listdir(tmp_path) == ["shared.npz"]


def test_streamed_draws_have_their_disk_space_from_the_start(data, tmp_path):
    """The streamed .npy files were sparse: on a disk that filled up, the first page written
    beyond the free space killed the process with SIGBUS (no message, nothing saved). Their
    blocks are allocated before the first draw is written."""
    folder = tmp_path / "draws"
    allocated = {}

    def look_at_the_files(info):
        if not allocated:  # the first trace point: no draw or 10 of 2,000 written
            for name in ("W_samples.npy", "H_samples.npy"):
                stat = os.stat(folder / name)
                allocated[name] = (stat.st_blocks * 512, stat.st_size)
    res = run(data, n_samples=2000, trace_every=10,
              sample_dir=str(folder), callback=look_at_the_files)
    for name, (on_disk, size) in allocated.items():
        assert size > 100_000 and on_disk >= size, name
    assert res.n_kept == 2000


def test_a_sample_dir_without_room_is_refused_before_the_run(data, tmp_path, monkeypatch):
    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", no_room)
    folder = tmp_path / "draws"
    with pytest.raises(OSError, match=r"no room for the streamed samples .*W_samples.npy.*"
                                      r"MiB free on its disk"):
        run(data, n_samples=200, sample_dir=str(folder))
    assert os.listdir(folder) == []  # no half-made files


def test_a_checkpoint_directory_that_cannot_be_written_is_refused_before_the_run(data,
                                                                                tmp_path):
    """The first checkpoint, a tenth of the run in, failed with a bare OSError and every
    draw was lost."""
    with pytest.raises(ValueError, match="the checkpoint directory '/proc' cannot be written"):
        run(data, checkpoint="/proc/run.npz")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match="directory .*a_file' is a file, not a directory"):
        run(data, checkpoint=str(tmp_path / "a_file" / "run.npz"))


def test_a_checkpoint_that_cannot_be_written_mid_run_loses_nothing(data, tmp_path):
    """Its folder removed during the run (or a full disk, a folder gone read-only): the run
    ended with the OSError and lost every draw. It warns and goes on."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()

    def remove_the_folder(info):
        if info["iteration"] >= 40 and folder.exists():
            shutil.rmtree(folder)
    with pytest.warns(RuntimeWarning, match=r"the checkpoint .* could not be written at "
                                            r"iteration \d+ .*the run goes on"):
        res = run(data, n_samples=200, checkpoint=str(folder / "run.npz"), checkpoint_every=20,
                  trace_every=10, callback=remove_the_folder)
    assert res.n_kept == 200 and not res.interrupted
    assert_same_result(res, run(data, n_samples=200, trace_every=10))


def test_a_result_folder_missing_a_listed_array_is_refused_at_load(data, tmp_path):
    """It loaded, with a trace of None and an AttributeError in predict later."""
    folder = tmp_path / "result"
    run(data).save(str(folder))
    os.remove(folder / "W_mean.npy")
    with pytest.raises(ValueError, match=r"W_mean.npy, listed in its meta.json, is missing"):
        pymf.load(str(folder))


def test_a_checkpoint_damaged_inside_is_named_damaged(data, tmp_path):
    """Bytes damaged in the middle (not a truncation) gave a bare zipfile.BadZipFile."""
    checkpoint = tmp_path / "run.npz"
    run(data, n_samples=40, checkpoint=str(checkpoint))
    raw = bytearray(checkpoint.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 64] = bytes(64)
    checkpoint.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"the checkpoint .* (is damaged|cannot be read)"):
        run(data, n_samples=40, checkpoint=str(checkpoint))


def test_a_refused_checkpoint_says_what_differs(data, tmp_path):
    """The refusal listed what could differ (and not thin or streaming); with seed=None, the
    default, running the same call again never resumed and nothing said why. A checkpoint
    of a run kept in memory resumed with sample_dir= added was refused as "the streamed
    samples are missing"."""
    checkpoint = str(tmp_path / "run.npz")
    first = run(data, seed=None, n_samples=40, checkpoint=checkpoint)
    with pytest.raises(ValueError, match=rf"seed: the checkpoint's {first.seed}, this run's "
                                         rf"\d+; to resume it, pass seed={first.seed}"):
        run(data, seed=None, n_samples=40, checkpoint=checkpoint)
    with pytest.raises(ValueError, match=r"thin: the checkpoint's 1, this run's 2"):
        run(data, seed=first.seed, n_samples=40, thin=2, checkpoint=checkpoint)
    with pytest.raises(ValueError, match=r"draws streamed to sample_dir: the checkpoint's "
                                         r"false, this run's true"):
        run(data, seed=first.seed, n_samples=40, checkpoint=checkpoint,
            sample_dir=str(tmp_path / "draws"))
    again = run(data, seed=first.seed, n_samples=40, checkpoint=checkpoint)
    assert_same_result(again, first)
