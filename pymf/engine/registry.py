"""Which family runs which (model, sampler) pair, and which class reads which saved result.

Families register themselves when their package is imported; the engine imports none by
name. pymf/__init__.py declares the families' packages here (declare_families) and imports
each one when first used (pymf.sibm, pymf.SIBM, ...), so that `import pymf` does not load
every family's extension module. pymf.sample, pymf.fit and pymf.load look the pair or the
saved kind up here:

    register("sample", TweedieNMF, PSGLD, sample_nmf)      # in the family's package
    register_result(NMFSamples)                            # its .kind names it in files

A lookup that finds nothing, and every listing (pairs, launchers, commands), first imports
the declared families not yet imported: a model or sampler of a family means that family
is imported (each registered pair holds a class of its own family), so a found runner is
the one an import of every family would find.
"""
import functools
import inspect
import importlib

from pymf.engine import forks
from pymf.engine.blas import one_blas_thread

_FAMILIES = []  # the families' packages, in the order the listings follow
_RUNNERS = {"sample": [], "fit": [], "mpi": []}
_LAUNCHERS = {}
_RESULTS = {}
_LEGACY = {}
_COMMANDS = []


def declare_families(packages):
    """The families' packages (e.g. "pymf.sibm"), imported on demand by load_families; their
    order is the listings' (the CLI's commands, the runners' search)."""
    for package in packages:
        if package not in _FAMILIES:
            _FAMILIES.append(package)


def load_families():
    """Import every declared family (each registers itself on import); idempotent."""
    for package in _FAMILIES:
        importlib.import_module(package)


def _family_rank(fn):
    """The declared position of the family that defines fn (after every family when none
    does: a test's or a plug-in's), so that listings keep the declared order whatever order
    the families were imported in."""
    module = getattr(fn, "__module__", None) or ""
    for rank, package in enumerate(_FAMILIES):
        if module == package or module.startswith(package + "."):
            return rank
    return len(_FAMILIES)


def register(verb, model_type, sampler_type, runner):
    """runner(model, data, sampler, **options) runs `verb` for that pair."""
    _RUNNERS[verb].append((model_type, sampler_type, runner))


def register_result(cls, legacy_kinds=()):
    """A result class, found again by cls.kind in a saved file's meta record (and by the
    older files' kinds listed in legacy_kinds, read by cls.from_legacy)."""
    if cls.kind in _RESULTS and _RESULTS[cls.kind] is not cls:
        raise ValueError(f"two result classes claim the kind {cls.kind!r}")
    _RESULTS[cls.kind] = cls
    for kind in legacy_kinds:
        _LEGACY[kind] = cls
    return cls


def result_class(kind):
    if kind not in _RESULTS:
        load_families()
    if kind not in _RESULTS:
        raise ValueError(f"unknown result kind {kind!r} (known: {sorted(_RESULTS)})")
    return _RESULTS[kind]


def legacy_class(kind):
    if kind not in _LEGACY:
        load_families()
    return _LEGACY.get(kind)


def _names(types):
    types = types if isinstance(types, tuple) else (types,)
    return [t.__name__ for t in types]


def _find(verb, model, sampler):
    entries = sorted(_RUNNERS[verb], key=lambda entry: _family_rank(entry[2]))
    for model_type, sampler_type, fn in entries:
        if isinstance(model, model_type) and isinstance(sampler, sampler_type):
            return fn
    return None


def runner(verb, model, sampler):
    fn = _find(verb, model, sampler)
    if fn is None:
        load_families()  # the message lists every family's pairs
        fn = _find(verb, model, sampler)
    if fn is not None:
        return _with_one_blas_thread(_with_known_options(fn, verb, model, sampler))
    fits = sorted({n for m, s, _ in _RUNNERS[verb] if isinstance(model, m) for n in _names(s)})
    models = sorted({n for m, s, _ in _RUNNERS[verb] if isinstance(sampler, s) for n in _names(m)})
    what = "optimizer" if verb == "fit" else "sampler"
    entry, action = {"sample": ("pymf.sample", "sample"), "fit": ("pymf.fit", "fit"),
                     "mpi": ("pymf.mpi.sample", "sample over MPI")}[verb]
    if not fits and not models:
        raise TypeError(f"{entry} cannot run {type(sampler).__name__} on "
                        f"{type(model).__name__}: neither is known to {entry}")
    hint = (f"; a {type(model).__name__} model takes {', '.join(fits)}" if fits else
            f"; {type(sampler).__name__} runs on {', '.join(models)}")
    raise TypeError(f"the {what} {type(sampler).__name__} cannot {action} a "
                    f"{type(model).__name__} model{hint}")


def pairs(verb):
    """[(model class, sampler class)] registered for verb (docs, the CLI, the tests)."""
    load_families()
    entries = sorted(_RUNNERS[verb], key=lambda entry: _family_rank(entry[2]))
    return [(m, s) for m, s, _ in entries]


def register_launcher(name, main):
    """A subcommand of `python -m pymf.mpi NAME ...`: main(argv) gets argv with NAME first
    and returns the exit status."""
    _LAUNCHERS[name] = main


def launchers():
    load_families()
    return dict(sorted(_LAUNCHERS.items(), key=lambda item: _family_rank(item[1])))


def register_command(name, help, add_arguments, run):
    """A subcommand of the `pymf` command line, `pymf NAME ...`: add_arguments(parser) adds
    its options (each with a help line), run(args) runs it and returns the exit status.
    pymf.cli adds the registered commands in registration order; a family registers its
    commands in its package's __init__.py."""
    for entry in _COMMANDS:
        if entry[0] == name:
            if entry[2:] == (add_arguments, run):
                return
            raise ValueError(f"two commands claim the name {name!r}")
    _COMMANDS.append((name, help, add_arguments, run))


def unregister_command(name):
    """Remove the command `name` (a test's or a plug-in's); unknown names are ignored."""
    _COMMANDS[:] = [entry for entry in _COMMANDS if entry[0] != name]


def commands():
    """[(name, help, add_arguments, run)]: by family in the declared order, then in
    registration order."""
    load_families()
    return sorted(_COMMANDS, key=lambda entry: _family_rank(entry[3]))


# a family's runner's hooks for the families built on it (HAMCMC and alpha-stable MF run
# through the NMF runner): accepted, never offered to a user as options
INTERNAL_OPTIONS = ("chain_factory", "kernel_class", "result_class")


def _with_known_options(fn, verb, model, sampler):
    """fn, refusing an option it does not take with a TypeError that names the public entry
    and the pair, and lists the options the pair takes: Python's own message names the
    family's runner (sample_ibp() got an unexpected keyword argument 'init')."""
    parameters = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return fn
    # the first four (model, data, sampler, n_samples) or three (fit) are positional
    positional = 3 if verb == "fit" else 4
    options = [p.name for p in parameters
               if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                             inspect.Parameter.KEYWORD_ONLY)][positional:]
    entry = {"sample": "pymf.sample", "fit": "pymf.fit", "mpi": "pymf.mpi.sample"}[verb]

    @functools.wraps(fn)
    def run(*args, **kwargs):
        unknown = sorted(set(kwargs) - set(options))
        if unknown:
            raise TypeError(f"{entry} of {type(model).__name__} with {type(sampler).__name__} "
                            f"takes no option {', '.join(map(repr, unknown))}; it takes "
                            f"{', '.join(o for o in options if o not in INTERNAL_OPTIONS)}")
        return fn(*args, **kwargs)
    return run


def _with_one_blas_thread(fn):
    """fn running with BLAS held to one thread (pymf.engine.blas: OpenBLAS's spinning
    workers otherwise slow the C core's OpenMP threads)."""
    @functools.wraps(fn)
    def run(model, data, sampler, *args, **kwargs):
        # in a process forked after a pymf run, one OpenMP thread (pymf.engine.forks)
        sampler = forks.one_thread_here(sampler)
        forks.note_run()
        with one_blas_thread():
            return fn(model, data, sampler, *args, **kwargs)
    return run
