"""`import pymf` loads no family until one is used (pymf/__init__.py, registry.declare_families):
each check runs in a fresh interpreter, since this test process has imported every family
already. What must hold: the bare import loads no family and not scipy; a family's name
imports that family; pymf.load of a saved result and every registry listing import what they
need without the user importing anything first."""
import json
import os
import subprocess
import sys

import numpy as np

import pymf

FAMILIES = ("pymf.nmf", "pymf.bpmf", "pymf.hamcmc", "pymf.sibm", "pymf.ibp", "pymf.alphamf")


def fresh(code):
    """Run code in a new interpreter from a neutral folder (the tests' own: the repository
    root would import the source tree, which holds no compiled extensions); its last stdout
    line is JSON."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)), timeout=300,
                         env=dict(os.environ, CI="1"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_bare_import_loads_no_family_and_no_scipy():
    loaded = fresh("import json, sys, pymf; "
                   "print(json.dumps(sorted(m for m in sys.modules "
                   "if m.startswith(('pymf.', 'scipy')))))")
    assert not [m for m in loaded if m.split(".")[0] == "scipy"], loaded
    assert not [f for f in FAMILIES if f in loaded], loaded


def test_a_name_imports_its_family_only_when_asked():
    got = fresh("import json, sys, pymf; before = 'pymf.sibm' in sys.modules; "
                "cls = pymf.SIBM; "
                "print(json.dumps([before, 'pymf.sibm' in sys.modules, cls.__module__, "
                "'SIBM' in dir(pymf)]))")
    assert got == [False, True, "pymf.sibm.samplers", True]


def test_every_exported_name_resolves():
    missing = fresh("import json, pymf; "
                    "print(json.dumps([n for n in pymf.__all__ if not hasattr(pymf, n)]))")
    assert missing == []


def test_load_finds_a_family_nobody_imported(tmp_path):
    # a small SIBM fit saved here; read back in a process that only imported pymf
    X, _, _, _ = pymf.sibm.make_binary_mf(40, 30, 2, density=0.2, seed=0)
    res = pymf.fit(pymf.LogisticMF(2), X, pymf.SIBM(batch_size=200), n_updates=5, seed=0,
                   progress=False)
    path = str(tmp_path / "sibm_result")
    res.save(path)
    got = fresh("import json, pymf; r = pymf.load(%r); "
                "print(json.dumps([type(r).__name__, r.U_mean.tolist()]))" % path)
    assert got[0] == type(res).__name__
    assert np.array_equal(np.array(got[1]), res.U_mean)


LISTINGS = ("import json, pymf.engine.registry as r\n"
            "name = lambda t: '|'.join(x.__name__ for x in (t if isinstance(t, tuple) else (t,)))\n"
            "print(json.dumps([[c[0] for c in r.commands()], "
            "sorted(f'{name(m)}/{name(s)}' for m, s in r.pairs('sample'))]))")


def test_listings_name_every_family_in_a_fresh_process():
    # the registry's listings import the declared families: the CLI's commands and the
    # (model, sampler) pairs are the same as in a process that imported them all first
    everything = "import " + ", ".join(FAMILIES) + "\n"
    expected, pairs = fresh(everything + LISTINGS)
    got = fresh(LISTINGS)
    assert got == [expected, pairs]
    models = {pair.split("/")[0] for pair in pairs}
    assert {"TweedieNMF", "BPMF", "LinearGaussian", "IBPLinearGaussian",
            "AlphaStableNMF"} <= models and {"ibp", "sibm", "bpmf"} <= set(expected)
