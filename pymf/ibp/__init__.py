"""The IBP family: linear-Gaussian latent features under an Indian Buffet Process prior,
sampled by collapsed Gibbs (Griffiths & Ghahramani) and by the hybrid parallel sampler of
Zhang, Dubey & Williamson, on OpenMP threads or MPI ranks (pymf.ibp.mpi).

    X, Z_true, A_true = pymf.datasets.make_cambridge(n=1000, sigma_x=0.5, seed=0)
    mask = pymf.ibp.checkerboard_mask(*X.shape, fraction=0.1)
    model = pymf.IBPLinearGaussian(alpha=1.0, sigma_x=1.0, sigma_a=1.0)
    res = pymf.sample(model, X, pymf.HybridIBP(processes=2), n_samples=200, seed=0,
                      test_mask=mask)
    res.trace["K"], res.trace["sigma_x"], res.trace["heldout_loglik"], res.Z_samples

The maths (rank-one updates, singletons, the hybrid's tail and master step, the
hyper-priors, held-out cells as latent variables) is in core/include/pymf/ibp.h.
"""
from pymf.engine.registry import register, register_command, register_launcher, register_result
from pymf.ibp import cli as _cli
from pymf.ibp import mpi as _mpi
from pymf.ibp.data import cambridge_features, checkerboard_mask, make_cambridge
from pymf.ibp.models import IBPLinearGaussian
from pymf.ibp.result import IBPResult
from pymf.ibp.samplers import CollapsedIBP, HybridIBP
from pymf.ibp.sampling import sample_ibp

__all__ = ["IBPLinearGaussian", "CollapsedIBP", "HybridIBP", "IBPResult", "make_cambridge",
           "checkerboard_mask", "cambridge_features"]

register("sample", IBPLinearGaussian, (CollapsedIBP, HybridIBP), sample_ibp)
register_result(IBPResult)
register("mpi", IBPLinearGaussian, HybridIBP, _mpi.sample)
register_launcher("ibp", lambda argv: _mpi.main(argv[1:]))
register_command("ibp", _cli.IBP_HELP, _cli.ibp_arguments, _cli.cmd_ibp)
