"""Defaults that work without tuning: DSGLD's benchmarked settings and its minibatch rule
for small data, step_size="auto" as every Langevin sampler's default (the model's
tau="sample" is tests/test_noise_precision.py's; the rule itself tests/test_autostep.py's)."""
import numpy as np
import pytest
from support import synthetic_ratings as synthetic

import pymf
from pymf.bpmf.samplers import batch_rule


def test_dsgld_defaults_are_the_benchmarked_settings():
    s = pymf.DSGLD()
    assert (s.round_length, s.hyper_every, s.grid, s.n_chains) == (10, 10, (2, 2), 2)
    assert s.step_size.params() == {"kind": "auto"}  # annealed with kappa 1000 once chosen
    assert pymf.BPMF(10).tau == "sample"
    for word in ("bench/bpmf_movielens.py", "batch_rule", "default"):
        assert word in pymf.DSGLD.__doc__
    assert "bench/defaults.py" in pymf.BPMF.__doc__


def test_every_langevin_sampler_chooses_its_step_by_default():
    samplers = [pymf.LD(), pymf.SGLD(), pymf.PSGLD(blocks=2), pymf.DSGLD(), pymf.HAMCMC(),
                pymf.PreconditionedSGLD(), pymf.SGRLD()]
    for sampler in samplers:
        assert sampler.step_size.params() == {"kind": "auto"}, sampler
        assert "Where the default" in (type(sampler).__doc__ or "") + \
            (type(sampler).__mro__[1].__doc__ or ""), sampler
    # an explicit step is kept as given
    assert pymf.LD(step_size=1e-3).step_size.params() == {"kind": "constant", "value": 1e-3}


def test_batch_rule():
    assert batch_rule(80000, 2, 2) == 1000  # MovieLens-100K's training ratings
    assert batch_rule(10000, 2, 2) == 250
    assert batch_rule(300, 2, 2) == 7
    assert batch_rule(5, 3, 3) == 1
    assert batch_rule(400_000, 2, 2) == 1000  # blocks of 100,000: still 1000
    assert batch_rule(9_000_000, 4, 2) == 11_250  # bench/dsgld_large.py: a hundredth of a block
    s = pymf.DSGLD().for_data(300)
    assert s.batch_size == 7 and pymf.DSGLD().batch_size is None
    assert pymf.DSGLD(batch_size=50).for_data(300).batch_size == 50
    with pytest.raises(ValueError, match="larger than the 300"):
        pymf.DSGLD(batch_size=500).for_data(300)


def test_dsgld_with_every_default_works_on_a_small_matrix():
    """Fewer than 1000 ratings (pymf <= 0.2: batch_size=1000 was an error there): the
    defaults sample, and beat the mean rating's RMSE on held-out ratings."""
    R = synthetic(L=30, M=25, D=2, density=0.8, seed=3)
    train, test = R.split(0.2, seed=0)
    assert train.nnz < 1000
    res = pymf.sample(pymf.BPMF(2), train, pymf.DSGLD(n_threads=1), n_samples=600, burnin=300,
                      seed=1, test=test)
    assert res.params["sampler"]["batch_size"] == batch_rule(train.nnz, 2, 2)
    baseline = np.sqrt(np.mean((test.values - train.values.mean()) ** 2))
    assert res.trace["test_rmse"][-1] < 0.8 * baseline


def test_every_cli_option_says_what_it_does_and_shows_its_default():
    """pymf --help of every subcommand: each optional argument has a help text, and the
    help formatter appends its default (a required one has none)."""
    import argparse

    from pymf.cli import build_parser
    parser = build_parser()
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
    for name, sub in subparsers.choices.items():
        text = sub.format_help()
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (name, action.option_strings)
            if not action.required and action.option_strings:
                assert "(default:" in sub.formatter_class(name)._get_help_string(action), \
                    (name, action.option_strings)
        if name == "sample":
            assert "--step" in text and "default: auto" in text


def test_the_command_line_prints_coverage_with_a_test_set(tmp_path, capsys):
    import json

    from pymf.cli import main
    R = synthetic(L=30, M=25, D=2, density=0.8, seed=3)
    np.savez(tmp_path / "r.npz", rows=R.rows, cols=R.cols, values=R.values, shape=R.shape)
    assert main(["bpmf", "--data", str(tmp_path / "r.npz"), "--rank", "2", "--samples", "60",
                 "--burnin", "20", "--threads", "1", "--no-progress",
                 "--out", str(tmp_path / "bpmf")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(summary["coverage"]) == {"0.5", "0.8", "0.9", "0.95"}
    assert summary["model"]["tau"] == "sample"
    saved = pymf.load(summary["result"]).params
    assert saved["sampler"]["batch_size"] == batch_rule(saved["nnz"], 2, 2)
    assert summary["sampler"] == saved["sampler"]
