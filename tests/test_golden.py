"""Golden results: every sampler's chains, recorded bit for bit before the engine refactor.

Each case of tests/golden_cases.py runs a small problem through the public API with a fixed
seed (NMF: PSGLD dense / sparse / random parts with permutation, LD, SGLD, Gaussian and
compound-Poisson likelihoods, Gibbs, SGD and DSGD; BPMF: DSGLD square / hybrid / column
splits, SGLD, BPMF Gibbs with Wishart and Gamma hyperpriors, SGD and DSGD; HAMCMC, pSGLD,
SGRLD and SGLD on the linear-Gaussian model; resumed runs; PSGLD and DSGLD under MPI) and
returns sha256 digests of its outputs. tests/golden_results.json holds the digests that the
code gave when they were recorded, one set per numerics class of machine
(golden_cases.numerics_class: an AVX-512 machine, where NumPy's float64 ufuncs use SVML and
OpenBLAS its AVX-512 kernels, gives other last bits than an AVX2 one; "meta" names each
class's commit). This test reruns every case and compares with this machine's class, key by
key:

* "chain:" keys (kept samples, final states, fitted factors, sample iterations) must NEVER
  change. The chains are a pure function of (seed, data, settings), the same for any thread
  count, after a resume and under MPI; a refactor that moves one bit of them changed the
  sampler. Cases that must reproduce another case's recording (another thread or worker
  count, a run stopped by Ctrl-C and resumed from its checkpoint, the MPI programs) are
  listed in golden_cases.SAME_AS and compared with that recording.
* "summary:" keys (posterior means, Welford predictions, predict(), traces without their
  "time" keys) are derived from the chains by running sums; a change of summation order
  may legitimately move their last bit. They may change only in a commit that says why,
  after checking that the chain: keys did not change. Re-record with

      .venv/bin/python tests/golden_cases.py --write CASE [CASE ...]

  (or --write alone for every case; it refuses to write if a SAME_AS case disagrees) and
  commit tests/golden_results.json with that explanation.
* "diag:" values (sums of the first and last samples, last trace values, a digest of the
  input data) are never compared: a failure shows them, recorded against now, to tell a
  changed chain (different sums) from a changed data generator (different diag:data) or a
  last-bit change (equal sums).

A case whose input data differ because another NumPy release runs than the one its class
was recorded with (meta: "numpy") is skipped, naming both: its chain cannot be compared.

MPI cases are skipped, naming the reason, where mpi4py or an MPI library is not usable. A
commit that moves a chain on purpose can record it only for its own machine's class, and
drops the other classes' recordings of that case (golden_cases.py --write says which) until
a session on such a machine records them. On a machine whose class has no recording of a
case, the case itself is skipped, naming the class, and the cases that must reproduce it
(SAME_AS) are compared with it run there.
"""
import os
import sys

import numpy
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import golden_cases  # noqa: E402
from pymf import mpi  # noqa: E402

MPI_STATE = True if mpi.is_available() else mpi.why_unavailable()
NUMERICS = golden_cases.numerics_class()
RECORDED = golden_cases.load_results(numerics=NUMERICS)
META = golden_cases.load_meta()


def _failure_message(name, target, got, expected, differing):
    lines = [f"golden case {name!r} (recorded as {target!r}) differs from its recording:"]
    for key in differing:
        kind = ("a CHAIN digest: the sampler's output moved; this must never change"
                if key.startswith("chain:") else
                "a summary digest: may change only in a commit that says why (re-record with "
                f"python tests/golden_cases.py --write {target})")
        lines.append(f"  {key}: {kind}")
        lines.append(f"      recorded {expected.get(key)}")
        lines.append(f"      now      {got.get(key)}")
    recorded_numpy = META.get(NUMERICS, {}).get("numpy")
    if recorded_numpy not in (None, numpy.__version__):
        lines.append(f"  (recorded with NumPy {recorded_numpy}; this run has NumPy "
                     f"{numpy.__version__}, whose OpenBLAS and ufuncs may give other last bits "
                     "where a chain passes through them)")
    diag = sorted(k for k in set(got) | set(expected) if k.startswith("diag:"))
    if diag:
        lines.append("  diagnostics (recorded -> now):")
        for key in diag:
            lines.append(f"      {key}: {expected.get(key)!r} -> {got.get(key)!r}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", list(golden_cases.CASES))
def test_golden(name, request):
    if name in golden_cases.MPI_CASES:
        if MPI_STATE is not True:
            pytest.skip(f"MPI is not usable: {MPI_STATE}")
        request.getfixturevalue("mpiexec")  # skips where there is none
    target = golden_cases.recorded_name(name)
    if target in RECORDED:
        expected = RECORDED[target]
    elif target != name:
        # no recording for this class: a case that must reproduce another (threads, resume,
        # MPI) is still held to that case, run here
        expected = golden_cases.CASES[target]()
    else:
        pytest.skip(f"golden case {target!r} has no recording for this machine's numerics "
                    f"class {NUMERICS!r} (recorded for: "
                    f"{sorted(c for c, r in golden_cases.load_all().items() if target in r)}); "
                    f"record it here with python tests/golden_cases.py --write {target}")
    got = golden_cases.CASES[name]()
    other_numpy = golden_cases.numpy_moved_the_input(got, expected, NUMERICS, META)
    if other_numpy:
        pytest.skip(other_numpy)
    differing = golden_cases.compare(name, got, expected)
    assert not differing, _failure_message(name, target, got, expected, differing)


def test_recordings_and_cases_agree():
    """Every case that is not a SAME_AS is recorded for some numerics class, every recording
    belongs to a case, and every case compares at least one chain digest."""
    recorded_cases = {n for n in golden_cases.CASES if n not in golden_cases.SAME_AS}
    classes = golden_cases.load_all()
    assert set().union(*map(set, classes.values())) == recorded_cases
    assert set(golden_cases.SAME_AS.values()) <= recorded_cases
    for recorded in classes.values():
        for name, digests in recorded.items():
            assert any(key.startswith("chain:") for key in digests), name


def test_input_data_from_another_numpy_release_skips_only_with_that_release():
    """The skip for another NumPy's input data needs both: another NumPy version than the
    recording's, and other input data. Otherwise the case is compared (and may fail)."""
    meta = {"x86-64-v4": {"numpy": "2.4.6"}}
    recorded = {"diag:data": "3cc831c260a455cf", "chain:samples": "a"}
    moved = {"diag:data": "5c594f81477e7890", "chain:samples": "b"}
    same_data = {"diag:data": "3cc831c260a455cf", "chain:samples": "b"}
    reason = golden_cases.numpy_moved_the_input(moved, recorded, "x86-64-v4", meta, "2.5.2")
    assert "NumPy 2.5.2" in reason and "NumPy 2.4.6" in reason and "5c594f81477e7890" in reason
    # the recorded NumPy: other data is a failure to report, not a skip
    assert golden_cases.numpy_moved_the_input(moved, recorded, "x86-64-v4", meta, "2.4.6") is None
    # the same data: the chain is compared whatever the NumPy
    assert golden_cases.numpy_moved_the_input(same_data, recorded, "x86-64-v4", meta,
                                              "2.5.2") is None
    # a class with no NumPy noted: compared
    assert golden_cases.numpy_moved_the_input(moved, recorded, "x86-64-v3", meta, "2.5.2") is None
