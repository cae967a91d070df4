"""The SIBM family: logistic matrix factorisation of big binary matrices by stochastic
variational inference (Hernández-Lobato, Houlsby & Ghahramani), with batch VB as the
baseline.

    X = scipy.sparse.csr_matrix(...)               # the ones; every other entry is 0
    X = pymf.sibm.BinaryMatrix(row_ptr, col_idx, shape)   # or its CSR arrays (no scipy)
    model = pymf.LogisticMF(rank=10)
    res = pymf.fit(model, X, pymf.SIBM(sampling="biased", batch_size="auto"),
                   n_updates=2000, seed=0, test=(rows, cols, labels))
    res.predict_proba(rows, cols, return_std=True)
    res.U_mean, res.U_var, res.V_mean, res.V_var, res.z_mean, res.z_var
    res.trace["elbo"], res.trace["test_loglik"], res.trace["test_auc"], res.trace["batch_size"]
    pymf.fit(model, X, pymf.BatchVB(), n_updates=50)       # sweeps over every entry

The maths (Jaakkola-Jordan bound, natural-gradient steps, sampling strategies and their
weights, the automatic minibatch size) is in core/include/pymf/sibm.h; the C core runs
every update. pymf.sibm.make_binary_mf draws matrices from the model and
pymf.sibm.holdout splits off held-out ones and zeros.
"""
from pymf.engine.registry import register, register_command, register_result
from pymf.sibm import cli as _cli
from pymf.sibm.binary import BinaryMatrix, binarize, holdout, make_binary_mf
from pymf.sibm.fitting import fit_sibm
from pymf.sibm.models import LogisticMF
from pymf.sibm.result import SIBMResult
from pymf.sibm.samplers import SIBM, BatchVB

__all__ = ["LogisticMF", "SIBM", "BatchVB", "SIBMResult", "BinaryMatrix", "make_binary_mf",
           "holdout", "binarize"]

register("fit", LogisticMF, (SIBM, BatchVB), fit_sibm)
register_result(SIBMResult)
register_command("sibm", _cli.SIBM_HELP, _cli.sibm_arguments, _cli.cmd_sibm)
