"""The command line: pymf sample / fit / bpmf / predict / info, run as a user would (a
subprocess), its help (every option explained, with its default) and registered commands."""
import argparse
import json
import os
import re
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
    # text a pipe reads as text: Open MPI's version ended in a NUL byte ("binary file matches")
    assert "\x00" not in pymf_cli("info").stdout + out.stdout


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


def test_sample_hamcmc_from_the_command_line(tmp_path):
    """--sampler hamcmc with its options reaches pymf.HAMCMC (random parts by default: with
    cyclic ones and gcd(M, B) > 1 a sub-chain would starve), and runs the chain pymf.sample
    runs with the same settings."""
    V, _, _ = pymf.datasets.make_tweedie_nmf(20, 16, 3, seed=1)
    np.save(tmp_path / "V.npy", V)
    out = pymf_cli("sample", "--rank", "3", "--sampler", "hamcmc", "--memory", "3",
                   "--gamma", "0.5", "--scaled-gamma", "--lam", "1", "--blocks", "2",
                   "--data", str(tmp_path / "V.npy"), "--samples", "40", "--thin", "10",
                   "--step-size", "1e-4", "--seed", "3", "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["sampler"]["sampler"] == "hamcmc"
    assert {key: summary["sampler"][key] for key in
            ("memory", "gamma", "scaled_gamma", "lam", "blocks", "part_order")} == \
        {"memory": 3, "gamma": 0.5, "scaled_gamma": True, "lam": 1.0, "blocks": 2,
         "part_order": "random"}
    result = pymf.load(str(tmp_path / "o"))
    direct = pymf.sample(pymf.TweedieNMF(3), V,
                         pymf.HAMCMC(memory=3, gamma=0.5, scaled_gamma=True, lam=1.0,
                                     step_size=1e-4, blocks=2),
                         n_samples=40, thin=10, seed=3)
    assert np.array_equal(result.W_samples, direct.W_samples)
    refused = pymf_cli("sample", "--rank", "3", "--sampler", "hamcmc", "--memory", "1",
                       "--data", str(tmp_path / "V.npy"), "--samples", "5",
                       "--step-size", "1e-4", "--out", str(tmp_path / "o2"))
    assert refused.returncode == 2 and "memory must be an integer in [2, 64]" in refused.stderr


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


def test_a_diverging_bpmf_run_is_an_error_line_not_a_traceback(tmp_path):
    np.save(tmp_path / "V.npy", np.abs(np.random.default_rng(0).normal(size=(12, 10))) + 0.1)
    out = pymf_cli("bpmf", "--data", str(tmp_path / "V.npy"), "--rank", "2", "--eps0", "10",
                   "--samples", "5", "--burnin", "0", "--thin", "1", "--no-progress",
                   "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("pymf: error: round 1 of chain 0: DSGLD diverged")
    # what the run kept before it is saved, as `pymf sample` does (it was lost)
    assert f"(the draws kept before it are in {tmp_path / 'o' / 'result.npz'})" in out.stderr
    assert pymf.load(str(tmp_path / "o" / "result.npz")).interrupted


def interrupted_run(argv, cwd, first_file):
    """Run `python -m pymf ARGV`, send it SIGINT once first_file exists (the run has got
    that far); returns (returncode, stdout, stderr)."""
    import signal
    import time
    env = dict(os.environ, CI="1")
    # a test runner started in the background by a shell without job control inherits
    # SIGINT ignored, and so would the run (Python then installs no Ctrl-C handler at all):
    # the run gets the terminal's default, as under an interactive Ctrl-C
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymf", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, cwd=str(cwd),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not first_file.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # never leave a run of millions of samples behind a failed test
            proc.kill()
            proc.communicate()
    return proc.returncode, stdout, stderr


def test_sigint_keeps_samples_and_checkpoint(tmp_path):
    """A real Ctrl-C (SIGINT) during `pymf sample`: the run stops cleanly after the current
    chunk and writes what it kept, its summary and a checkpoint to resume from."""
    out_dir = tmp_path / "run"
    # the first checkpoint: 1,000 iterations, so 20 kept samples, are done
    returncode, stdout, stderr = interrupted_run(
        ["sample", "--rank", "8", "--blocks", "4", "--data", "demo", "--demo-size", "128",
         "--samples", "5000000", "--thin", "50", "--step-size", "1e-4", "--checkpoint",
         "--checkpoint-every", "1000", "--out", str(out_dir)], tmp_path,
        out_dir / "checkpoint.npz")
    assert returncode == 0, stderr
    assert "interrupted" in stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["kept_samples"] > 0
    result = pymf.load(str(out_dir))
    assert result.n_kept == summary["kept_samples"] and np.all(np.isfinite(result.W_samples))
    with np.load(out_dir / "checkpoint.npz") as ck:
        assert int(ck["kernel_t"]) == summary["iterations"]


@pytest.mark.parametrize("command", ["sample", "bpmf"])
def test_sigint_before_the_first_trace_point_gives_a_summary(tmp_path, command):
    """Ctrl-C before a run's first trace point after the start: `pymf bpmf` saved the result,
    then failed on its summary (KeyError: 'test_rmse', a traceback); `pymf sample` said
    "N iterations in 0.00 s" from the trace point at iteration 0. Both summaries now say
    what was traced (null where nothing was) and that the run was interrupted."""
    out_dir = tmp_path / "run"
    common = ["--data", "demo", "--samples", "5000000", "--thin", "1000000", "--checkpoint",
              "--checkpoint-every", "20", "--no-progress", "--out", str(out_dir)]
    extra = (["--rank", "4", "--blocks", "2", "--demo-size", "64", "--trace-every", "1000000"]
             if command == "sample" else ["--rank", "3"])
    returncode, stdout, stderr = interrupted_run([command, *common, *extra], tmp_path,
                                                 out_dir / "checkpoint.npz")
    assert returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["interrupted"] is True
    result = pymf.load(str(out_dir / "result.npz") if command == "bpmf" else str(out_dir))
    assert result.interrupted
    if command == "bpmf":
        assert summary["final_train_rmse"] is None and summary["final_test_rmse"] is None
    else:
        assert summary["samples_per_second"] is None  # traced at iteration 0 alone
        assert f"interrupted after {summary['iterations']} iterations" in stdout


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
             "File exists"),
            # a folder that cannot be written to failed after the whole run, every draw lost
            (["sample", "--data", "demo", "--samples", "5", "--out", "/proc/self",
              "--no-progress"], "the --out directory '/proc/self' cannot be written to"),
            (["bpmf", "--data", "demo", "--samples", "5", "--out", "/proc/self",
              "--no-progress"], "the --out directory '/proc/self' cannot be written to")):
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err


def _subparsers(parser):
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def _commands():
    from pymf import cli
    return list(_subparsers(cli.build_parser()))


def test_help_lists_every_subcommand():
    out = pymf_cli("--help")
    assert out.returncode == 0, out.stderr
    for name in ("sample", "fit", "bpmf", "predict", "info"):
        assert f"    {name} " in out.stdout, name


def test_the_parser_has_every_subcommand():
    from pymf import cli
    assert {"sample", "fit", "bpmf", "predict", "info"} <= set(_commands())
    assert all(action.help for action in cli.build_parser()._actions)


@pytest.mark.parametrize("command", _commands())
def test_every_option_has_a_help_line_and_shows_its_default(command, capsys, monkeypatch):
    from pymf import cli
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at hyphens too: no wrapping here
    sub = _subparsers(cli.build_parser())[command]
    for action in sub._actions:
        if action.dest != "help":
            assert action.help, f"pymf {command} {'/'.join(action.option_strings)} has no help"
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for action in sub._actions:
        if action.dest != "help" and not action.required:
            assert f"(default: {action.default})" in text, (command, action.option_strings)


def test_help_shows_defaults_as_written(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # the subprocess's help, unwrapped
    out = pymf_cli("sample", "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "--rank RANK rank K of W (I x K) and H (K x J); also the rank of --data demo " \
           "(default: 32)" in text
    assert "(default: pymf-out)" in text and "(default: psgld)" in text
    bpmf = " ".join(pymf_cli("bpmf", "--help").stdout.split())
    assert "(default: 0.2)" in bpmf and "(default: pymf-bpmf)" in bpmf
    # required options show no default; the one flag, --by-id, its False
    assert pymf_cli("predict", "--help").stdout.count("(default:") == 1


@pytest.fixture
def hello_command():
    from pymf.engine import registry
    calls = []

    def add_arguments(parser):
        parser.add_argument("--name", default="world", help="whom to greet")

    def run(args):
        calls.append(args.name)
        return 7

    registry.register_command("hello", "greet someone (a test's command)", add_arguments, run)
    yield calls
    registry.unregister_command("hello")
    assert "hello" not in [c[0] for c in registry.commands()]


def test_a_registered_command_joins_the_parser(hello_command, capsys):
    from pymf import cli
    from pymf.engine import registry
    names = list(_subparsers(cli.build_parser()))
    assert names[:2] == ["predict", "info"]
    assert names[2:] == [c[0] for c in registry.commands()] and names[-1] == "hello"
    assert {"sample", "fit", "bpmf"} <= set(names)
    assert cli.main(["hello", "--name", "pymf"]) == 7 and hello_command == ["pymf"]
    with pytest.raises(SystemExit):
        cli.main(["hello", "--help"])
    assert "whom to greet (default: world)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="two commands claim the name 'hello'"):
        registry.register_command("hello", "another", lambda parser: None, lambda args: 0)


def test_predict_takes_any_commands_out_folder_and_refuses_what_has_no_cells(tmp_path, capsys):
    """`pymf bpmf --out DIR` writes DIR/result.npz: `pymf predict --result DIR` reads it (it
    said the folder held no meta.json). A result whose predict takes design rows (HAMCMC on
    the linear-Gaussian model) is a one-line error, not a TypeError's traceback."""
    from pymf import cli
    V = np.abs(np.random.default_rng(0).normal(size=(12, 10))) + 1.0
    np.save(tmp_path / "V.npy", V)
    out = tmp_path / "o"
    assert cli.main(["bpmf", "--data", str(tmp_path / "V.npy"), "--rank", "2", "--samples", "20",
                     "--burnin", "10", "--thin", "2", "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["predict", "--result", str(out), "--rows", "0", "1", "--cols", "2", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    mean = pymf.load(str(out / "result.npz")).predict([0, 1], [2, 3])
    np.testing.assert_allclose([float(line.split()[2]) for line in lines], mean, rtol=1e-5)
    A, x, _ = pymf.datasets.make_linear_gaussian(50, 3, seed=0)
    linear = pymf.sample(pymf.LinearGaussian(), (A, x), pymf.HAMCMC(gamma=0.1), n_samples=20,
                         seed=0, progress=False).save(str(tmp_path / "lg.npz"))
    with pytest.raises(SystemExit, match="holds a LinearResult, whose predict takes new design "
                                         "rows, not \\(row, column\\) cells"):
        cli.main(["predict", "--result", linear, "--rows", "0", "--cols", "1"])


def test_ibp_data_of_the_wrong_shape_is_a_one_line_error(tmp_path, capsys):
    """The held-out checkerboard was built before X's shape was checked: a 1-D or 3-D .npy
    ended in a TypeError's traceback, and one column made every even row wholly held out."""
    from pymf import cli
    from pymf.ibp.data import checkerboard_mask
    for name, shape, message in (("x1", (36,), r"needs a 2-D array \(rows x columns\), got "
                                                r"shape \(36,\)"),
                                 ("x3", (2, 3, 4), r"got shape \(2, 3, 4\)"),
                                 ("col", (10, 1), "would hold out whole rows of a one-column "
                                                  "matrix; give --test-fraction 0")):
        np.save(tmp_path / f"{name}.npy", np.zeros(shape))
        assert cli.main(["ibp", "--data", str(tmp_path / f"{name}.npy"), "--samples", "2",
                         "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pymf: error: --data") or "--test-fraction" in err
        assert re.search(message, err), err
    for args, message in (((-1, 4), "n_rows must be an integer >= 1, got -1"),
                          ((3.5, 4), "n_rows must be an integer >= 1, got 3.5")):
        with pytest.raises(ValueError, match=message):
            checkerboard_mask(*args)


def test_backend_cuda_without_a_gpu_is_one_line_naming_what_to_install(tmp_path, capsys):
    """--backend cuda where the GPU path cannot run ended in a RuntimeError's traceback."""
    from pymf import cli, gpu
    if gpu.is_available():
        pytest.skip("a GPU is usable here: --backend cuda runs")
    assert cli.main(["sample", "--data", "demo", "--demo-size", "32", "--rank", "2",
                     "--samples", "20", "--thin", "2", "--backend", "cuda", "--no-progress",
                     "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pymf: error: backend='cuda' was requested but the GPU path is "
                          "unusable") and 'pip install "pymf[gpu]"' in err


def test_an_option_the_sampler_does_not_read_is_refused(tmp_path, capsys):
    """--backend, --dtype (PSGLD), --batch-size (SGLD) and the HAMCMC options given to
    another sampler were ignored without a word (--backend cuda with --sampler hamcmc ran
    on the CPU); a fractional count of entries was truncated."""
    from pymf import cli
    base = ["sample", "--data", "demo", "--demo-size", "32", "--rank", "2", "--samples", "20",
            "--thin", "2", "--step", "1e-3", "--no-progress", "--out", str(tmp_path / "o")]
    for extra, message in ((["--sampler", "hamcmc", "--backend", "cuda"],
                            "--backend is an option of --sampler psgld; --sampler hamcmc "
                            "does not take it"),
                           (["--sampler", "hamcmc", "--batch-size", "5"],
                            "--batch-size is an option of --sampler sgld"),
                           (["--sampler", "psgld", "--memory", "3"],
                            "--memory is an option of --sampler hamcmc; --sampler psgld"),
                           (["--sampler", "sgld", "--batch-size", "2.5"],
                            "--batch-size above 1 is a count of entries and must be whole, "
                            "got 2.5")):
        assert cli.main(base + extra) == 2
        assert message in capsys.readouterr().err


def test_predict_by_the_data_files_own_ids(tmp_path, capsys):
    """pymf bpmf numbers a MovieLens file's users and items 0, 1, ... in the order of their
    ids, and the saved result kept nothing to map them back: --by-id reads the ids.npz it now
    writes beside the result."""
    from pymf import cli
    rng = np.random.default_rng(0)
    users, items = rng.choice(np.arange(100, 1000, 7), 40), rng.choice(np.arange(5, 500, 11), 40)
    pairs = sorted(set(zip(users.tolist(), items.tolist())))
    lines = [f"{u}\t{i}\t{rng.integers(1, 6)}\t0" for u, i in pairs]
    (tmp_path / "u.data").write_text("\n".join(lines) + "\n")
    out = tmp_path / "o"
    assert cli.main(["bpmf", "--data", str(tmp_path / "u.data"), "--rank", "2", "--samples",
                     "20", "--burnin", "10", "--thin", "2", "--test-fraction", "0",
                     "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    user_ids, item_ids = np.unique([p[0] for p in pairs]), np.unique([p[1] for p in pairs])
    u, i = pairs[3]
    row, col = int(np.searchsorted(user_ids, u)), int(np.searchsorted(item_ids, i))
    assert cli.main(["predict", "--result", str(out), "--by-id", "--rows", str(u), "--cols",
                     str(i)]) == 0
    by_id = capsys.readouterr().out.split()
    assert cli.main(["predict", "--result", str(out), "--rows", str(row), "--cols",
                     str(col)]) == 0
    by_index = capsys.readouterr().out.split()
    assert by_id[:2] == [str(u), str(i)] and by_id[2:] == by_index[2:]
    assert cli.main(["predict", "--result", str(out), "--by-id", "--rows", "3", "--cols",
                     str(i)]) == 2
    assert "--by-id: user id 3 is not in the data" in capsys.readouterr().err
