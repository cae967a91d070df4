"""The NMF family: Tweedie matrix factorisation (the PSGLD paper's model) sampled by LD,
SGLD, PSGLD (CPU threads, GPU, MPI ring) and the Poisson-NMF Gibbs sampler, and
optimised by SGD / DSGD."""
from pymf.engine.registry import register, register_command, register_launcher, register_result
from pymf.langevin import DSGD, LD, SGD, SGLD
from pymf.nmf import cli as _cli
from pymf.nmf import mpi as _mpi
from pymf.nmf.models import TweedieNMF
from pymf.nmf.result import FitResult, SampleResult
from pymf.nmf.samplers import PSGLD, Gibbs
from pymf.nmf.sampling import fit_nmf, sample_nmf

register("sample", TweedieNMF, (LD, SGLD, PSGLD, Gibbs), sample_nmf)
register("fit", TweedieNMF, (SGD, DSGD), fit_nmf)
register_result(SampleResult, legacy_kinds=(None,))
register_result(FitResult, legacy_kinds=("fit",))
register("mpi", TweedieNMF, PSGLD, _mpi.sample_ring)
register_launcher("psgld", _mpi.main)
register_launcher("write-shards", _mpi.main)
register_command("sample", _cli.SAMPLE_HELP, _cli.sample_arguments, _cli.cmd_sample)
register_command("fit", _cli.FIT_HELP, _cli.fit_arguments, _cli.cmd_fit)
