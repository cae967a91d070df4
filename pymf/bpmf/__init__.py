"""The BPMF family: Bayesian PMF sampled by distributed SGLD (Ahn et al., KDD 2015), in
shared memory and over MPI (pymf.bpmf.mpi), with BPMF Gibbs (Salakhutdinov & Mnih 2008) as
the exact baseline and (D)SGD through pymf.fit.

    model   = pymf.BPMF(rank=10, tau=2.0)
    sampler = pymf.DSGLD(split="square", blocks=2, batch_size=1000,
                         step_size=pymf.AnnealedStep(2e-4, kappa=100))
    res = pymf.sample(model, train, sampler, n_samples=500, burnin=200, thin=5, seed=0,
                      test=test)
    mean, std = res.predict(users, items, return_std=True)
    res.trace["test_rmse"], res.trace["time"], res.diagnostics()
"""
from pymf.bpmf import cli as _cli
from pymf.bpmf import mpi as _mpi
from pymf.bpmf.models import BPMF
from pymf.bpmf.result import BPMFFit, BPMFResult
from pymf.bpmf.samplers import DSGLD, BPMFGibbs
from pymf.bpmf.sampling import fit_bpmf, sample_bpmf
from pymf.engine.registry import register, register_command, register_launcher, register_result
from pymf.langevin import DSGD, SGD, SGLD

register("sample", BPMF, (DSGLD, BPMFGibbs, SGLD), sample_bpmf)
register("fit", BPMF, (SGD, DSGD), fit_bpmf)
register_result(BPMFResult, legacy_kinds=("bpmf",))
register_result(BPMFFit)
register("mpi", BPMF, DSGLD, _mpi.sample)
register_launcher("dsgld", lambda argv: _mpi.main(argv[1:]))
register_command("bpmf", _cli.BPMF_HELP, _cli.bpmf_command_arguments, _cli.cmd_bpmf)
