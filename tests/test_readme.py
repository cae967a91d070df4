"""The README's Python examples run as written, against the installed package.

Each ```python block is run in order in one namespace per section, in a temporary folder.
Only the run lengths and sizes are scaled down (the substitutions below, each of which must
match, so that an edited README cannot silently escape the test); every name, argument and
attribute the README shows is used as shown. The MovieLens block reads the data from the
shared data folder and is skipped where it is absent."""
import os
import re

import numpy as np
import pytest

README = os.path.join(os.path.dirname(__file__), "..", "README.md")
MOVIELENS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "ml-100k.data")

# (pattern, replacement): smaller problems and shorter runs, nothing else
SCALE_DOWN = [
    (r"make_tweedie_nmf\(512, 512, 32,", "make_tweedie_nmf(48, 40, 32,"),
    (r"PSGLD\(blocks=16,", "PSGLD(blocks=4,"),
    (r"n_samples=5000, burnin=1000, thin=50", "n_samples=40, burnin=10, thin=5"),
    (r"pymf\.Gibbs\(\), n_samples=500\)", "pymf.Gibbs(), n_samples=20)"),
    (r"DSGD\(blocks=8,", "DSGD(blocks=4,"),
    (r"n_epochs=20,", "n_epochs=3,"),
    (r'load_movielens\("ml-100k/u.data"\)', "load_movielens(MOVIELENS)"),
    (r"n_samples=2000, burnin=200, thin=5", "n_samples=40, burnin=10, thin=5"),
    (r"pymf\.BPMFGibbs\(\), n_samples=600,", "pymf.BPMFGibbs(), n_samples=5,"),
    (r"n_epochs=1000,", "n_epochs=2,"),
    (r"make_linear_gaussian\(1000, 10,", "make_linear_gaussian(200, 5,"),
    (r"n_samples=20_000, burnin=10_000", "n_samples=200, burnin=100"),
    (r"make_binary_mf\(2000, 2000, 10,", "make_binary_mf(200, 150, 10,"),
    (r"n_updates=2000,", "n_updates=30,"),
    (r"n_updates=20,", "n_updates=2,"),
]


# each Python block of the README, by the heading of its section (the test fails on a new
# block until it is named here)
SECTIONS = {"python": "Python", "baselines": "Baselines",
            "bpmf": "Bayesian PMF with distributed SGLD",
            "hamcmc": "HAMCMC: stochastic quasi-Newton Langevin",
            "hamcmc_mf": "HAMCMC for matrix factorisation", "sibm": "SIBM:", "ibp": "IBP:",
            "alphamf": "Alpha-stable MF",
            "tuning": "Works without tuning", "scale": "Large data",
            "speed": "Speed:"}


def _blocks():
    text = open(README, encoding="utf-8").read()
    found = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = section.splitlines()[0]
        for code in re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M):
            names = [n for n, prefix in SECTIONS.items() if heading.startswith(prefix)]
            assert len(names) == 1 and names[0] not in found, \
                f"a Python block under '## {heading}' that this test does not know"
            found[names[0]] = code
    return found


def _scaled(code, used):
    for i, (pattern, replacement) in enumerate(SCALE_DOWN):
        code, n = re.subn(pattern, replacement, code)
        used[i] += n
    return code


@pytest.fixture(scope="module")
def blocks():
    found = _blocks()
    assert set(found) == set(SECTIONS), f"README Python blocks: {sorted(found)}"
    return found


def _run(codes, tmp_path, monkeypatch, namespace=None):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "1")  # no progress bars
    namespace = {} if namespace is None else namespace
    used = [0] * len(SCALE_DOWN)
    for code in codes:
        exec(compile(_scaled(code, used), "README.md", "exec"), namespace)
    return namespace, used


def test_nmf_and_baselines(blocks, tmp_path, monkeypatch):
    ns, used = _run([blocks["python"], blocks["baselines"]], tmp_path, monkeypatch)
    assert ns["res"].kind == "nmf_samples" and ns["fit"].kind == "nmf_fit"
    assert (tmp_path / "run.npz").exists() and (tmp_path / "result_dir").is_dir()
    assert all(used[:6]), [p for (p, _), n in zip(SCALE_DOWN[:6], used[:6]) if not n]


@pytest.mark.skipif(not os.path.exists(MOVIELENS), reason="MovieLens-100K is not in ../shared/data")
def test_bpmf(blocks, tmp_path, monkeypatch):
    ns, used = _run(["import pymf\n", blocks["bpmf"]], tmp_path, monkeypatch, {"MOVIELENS": MOVIELENS})
    assert ns["res"].kind == "bpmf_samples" and ns["fit"].kind == "bpmf_fit"
    assert all(used[6:10]), [p for (p, _), n in zip(SCALE_DOWN[6:10], used[6:10]) if not n]


def test_hamcmc(blocks, tmp_path, monkeypatch):
    ns, used = _run(["import pymf\n", blocks["hamcmc"]], tmp_path, monkeypatch)
    assert ns["res"].samples.shape[-1] == 5
    assert all(used[10:12]), [p for (p, _), n in zip(SCALE_DOWN[10:12], used[10:12]) if not n]


def test_hamcmc_mf(blocks, tmp_path, monkeypatch):
    ns, _ = _run([blocks["hamcmc_mf"]], tmp_path, monkeypatch)
    assert ns["res"].kind == "nmf_samples" and ns["res"].params["sampler"]["sampler"] == "hamcmc"
    assert ns["res"].n_kept == 100 and ns["res"].trace["test_rmse"][-1] < 1.5


def test_alphamf(blocks, tmp_path, monkeypatch):
    ns, _ = _run([blocks["alphamf"]], tmp_path, monkeypatch)
    assert ns["res"].kind == "alphamf_samples" and ns["res"].n_kept == 100
    # the posterior mean of v = W H is within a factor e^0.6 of the truth in RMS (0.43
    # measured; a single entry's posterior spread on 64 x 64 data is of that order)
    assert np.sqrt(np.mean(np.log(ns["v_hat"] / (ns["W"] @ ns["H"])) ** 2)) < 0.6
    assert 0.2 < ns["res"].trace["phi_acceptance"][-1] < 0.95


def test_sibm(blocks, tmp_path, monkeypatch):
    ns, used = _run(["import pymf\n", blocks["sibm"]], tmp_path, monkeypatch)
    assert ns["res"].kind == "sibm_fit" and ns["vb"].iterations == 2
    assert ns["p"].shape == ns["sd"].shape == ns["test"][0].shape
    assert all(used[12:]), [p for (p, _), n in zip(SCALE_DOWN[12:], used[12:]) if not n]


def test_ibp(blocks, tmp_path, monkeypatch):
    ns, _ = _run(["import pymf\n", blocks["ibp"]], tmp_path, monkeypatch)
    assert ns["res"].kind == ns["gibbs"].kind == "ibp_samples"
    assert len(ns["res"].Z_samples) == 100 and (tmp_path / "features.png").exists()


def test_without_tuning(blocks, tmp_path, monkeypatch):
    ns, _ = _run(["import pymf\n", blocks["tuning"]], tmp_path, monkeypatch)
    assert ns["res"].params["auto_step"]["eps"] > 0
    assert set(ns["res"].coverage(ns["test"])) == {0.5, 0.8, 0.9, 0.95}
    assert (tmp_path / "calibration.png").exists() and ns["bpmf"].sample_stats["tau"].size
    assert abs(ns["gauss"].noise_variance() - 0.25) < 0.05  # the data's noise sd is 0.5
    assert ns["gauss"].sample_stats["phi"].shape == (1, 300)


# the command-line block: the same options, smaller problems and shorter runs
CLI_SCALE_DOWN = [
    (r"--blocks 32", "--blocks 4"),
    (r"--demo-size 1024", "--demo-size 48"),
    (r"--rank 32", "--rank 4"),
    (r"--samples 10000", "--samples 40"),
    (r"--samples 500", "--samples 20"),
    (r"--epochs 20", "--epochs 3"),
    (r"--blocks 8", "--blocks 4"),
    (r"\[(--[a-z-]+)\]", r"\1"),  # optional flags shown in brackets: given
]


def _cli_lines():
    text = open(README, encoding="utf-8").read()
    section = text[text.index("## Command line"):]
    block = re.search(r"^```sh\n(.*?)^```", section, flags=re.S | re.M).group(1)
    lines, current = [], ""
    for raw in block.splitlines():
        line = raw.split("#")[0].rstrip()
        current = f"{current} {line.strip()}".strip() if current else line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        if current:
            lines.append(current)
        current = ""
    return lines


def test_command_line(tmp_path, monkeypatch):
    """Every `pymf ...` line of the README's command-line block runs and exits 0 (DIR is a
    folder of this test; ratings.csv a small MovieLens-style file)."""
    import subprocess
    import sys

    import numpy as np

    rng = np.random.default_rng(0)
    rows, cols = np.nonzero(rng.random((100, 80)) < 0.4)
    with open(tmp_path / "ratings.csv", "w") as out:
        out.write("userId,movieId,rating,timestamp\n")
        for r, c in zip(rows, cols):
            out.write(f"{r + 1},{c + 1},{rng.integers(1, 6)},0\n")
    lines = _cli_lines()
    assert len(lines) == 8, lines
    env = dict(os.environ, CI="1")
    used = [0] * len(CLI_SCALE_DOWN)
    out_dirs = iter(["sampled", "gibbs", "fitted", "bpmf"])
    last_out = None
    for line in lines:
        assert line.startswith("pymf "), line
        for i, (pattern, replacement) in enumerate(CLI_SCALE_DOWN):
            line, n = re.subn(pattern, replacement, line)
            used[i] += n
        if "--out DIR" in line:
            last_out = next(out_dirs)
            line = line.replace("--out DIR", f"--out {last_out}")
        # --by-id: the MovieLens-style file's own ids, from the folder pymf bpmf wrote
        line = line.replace("--result DIR", "--result " + ("bpmf" if "--by-id" in line
                                                          else "sampled"))
        done = subprocess.run([sys.executable, "-m", "pymf", *line.split()[1:]], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    assert all(used), [p for (p, _), n in zip(CLI_SCALE_DOWN, used) if not n]
    assert last_out == "bpmf"


def test_scale(blocks, tmp_path, monkeypatch):
    ns, _ = _run([blocks["scale"]], tmp_path, monkeypatch)
    assert np.shares_memory(ns["ratings"].rows, ns["rows"])
    assert ns["bigger"].shape == (600, 400) and ns["bigger"].nnz == 4 * ns["ratings"].nnz
    assert np.isfinite(ns["res"].trace["loglik"][-1])


def test_speed(blocks, tmp_path, monkeypatch):
    ns, _ = _run([blocks["speed"]], tmp_path, monkeypatch)
    assert len(ns["runs"]) == 2 and ns["runs"][0].n_kept == 100
