"""The command line: pymf sample / predict / info, run as a user would (a subprocess)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import pymf


def pymf_cli(*args):
    """`python -m pymf ...` from a neutral folder: run from the repository root, `-m` would
    import the source tree (which holds no compiled extensions) instead of the install."""
    env = dict(os.environ, CI="1")
    return subprocess.run([sys.executable, "-m", "pymf", *args], capture_output=True, text=True,
                          env=env, cwd=os.path.dirname(os.path.abspath(__file__)), timeout=300)


def test_info_reports_build_facts():
    out = pymf_cli("info", "--json")
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["pymf"] == pymf.__version__
    assert facts["gsl"].count(".") >= 1
    assert isinstance(facts["openmp"], bool)
    assert facts["cuda"].startswith(("usable", "unusable: "))
    assert facts["mpi"].startswith(("usable", "unusable: "))


def test_sample_demo_writes_results(tmp_path):
    out_dir = tmp_path / "demo"
    out = pymf_cli("sample", "--model", "tweedie", "--beta", "1", "--rank", "4", "--sampler",
                   "psgld", "--blocks", "4", "--data", "demo", "--demo-size", "32", "--samples",
                   "200", "--thin", "20", "--step-size", "1e-3", "--out", str(out_dir))
    assert out.returncode == 0, out.stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["iterations"] == 200 and summary["kept_samples"] == 10
    assert np.isfinite(summary["final_loglik"])
    assert "samples/s" in out.stdout
    result = pymf.load(str(out_dir))
    assert result.W_samples.shape == (10, 32, 4)
    pred = pymf_cli("predict", "--result", str(out_dir), "--rows", "0", "1", "--cols", "2", "3")
    assert pred.returncode == 0, pred.stderr
    lines = pred.stdout.strip().splitlines()
    assert len(lines) == 2
    np.testing.assert_allclose(float(lines[0].split()[2]), result.predict([0], [2])[0], rtol=1e-5)


@pytest.mark.parametrize("sampler", ["ld", "sgld", "gibbs"])
def test_sample_other_samplers_from_npy(tmp_path, sampler):
    V, _, _ = pymf.datasets.make_tweedie_nmf(20, 16, 3, seed=1)
    np.save(tmp_path / "V.npy", V)
    out = pymf_cli("sample", "--rank", "3", "--sampler", sampler, "--data", str(tmp_path / "V.npy"),
                   "--samples", "50", "--thin", "10", "--step-size", "1e-4", "--out",
                   str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("optimizer", ["dsgd", "sgd"])
def test_fit_baselines_from_the_command_line(tmp_path, optimizer):
    out = pymf_cli("fit", "--optimizer", optimizer, "--rank", "4", "--blocks", "4", "--data", "demo",
                   "--demo-size", "32", "--epochs", "5", "--test-fraction", "0.2", "--out",
                   str(tmp_path / "f"))
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert summary["epochs"] == 5 and np.isfinite(summary["final_test_rmse"])


def test_bad_cli_input_is_a_clear_error(tmp_path):
    out = pymf_cli("sample", "--rank", "0", "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "rank must be a positive integer" in out.stderr
    out = pymf_cli("sample", "--data", str(tmp_path / "missing.npy"), "--out", str(tmp_path / "o"))
    assert out.returncode != 0 and "no such file" in out.stderr


def test_sigint_keeps_samples_and_checkpoint(tmp_path):
    """A real Ctrl-C (SIGINT) during `pymf sample`: the run stops cleanly after the current
    chunk and writes what it kept, its summary and a checkpoint to resume from."""
    import signal
    import time
    out_dir = tmp_path / "run"
    env = dict(os.environ, CI="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymf", "sample", "--rank", "8", "--blocks", "4", "--data", "demo",
         "--demo-size", "128", "--samples", "5000000", "--thin", "50", "--step-size", "1e-4",
         "--checkpoint", "--checkpoint-every", "1000", "--out", str(out_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path))
    deadline = time.time() + 120
    while not (out_dir / "checkpoint.npz").exists() and time.time() < deadline:
        time.sleep(0.05)  # the first checkpoint: 1,000 iterations, so 20 kept samples, are done
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "interrupted" in stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["kept_samples"] > 0
    result = pymf.load(str(out_dir))
    assert result.n_kept == summary["kept_samples"] and np.all(np.isfinite(result.W_samples))
    with np.load(out_dir / "checkpoint.npz") as ck:
        assert int(ck["kernel_t"]) == summary["iterations"]


def test_command_line_errors_are_one_line_not_tracebacks(tmp_path, capsys):
    from pymf import cli
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for argv, message in (
            (["predict", "--result", str(tmp_path / "missing.npz"), "--rows", "0", "--cols", "0"],
             "No such file"),
            (["bpmf", "--data", "demo", "--blocks", "abc", "--out", str(tmp_path / "o")],
             "--blocks must be an integer"),
            (["sample", "--data", "demo", "--test-fraction", "-0.5", "--out", str(tmp_path / "o")],
             "--test-fraction must be in"),
            (["sample", "--data", "demo", "--samples", "5", "--out", str(a_file), "--no-progress"],
             "File exists")):
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
