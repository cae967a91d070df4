"""Which family runs which (model, sampler) pair, and which class reads which saved result.

Families register themselves when their package is imported (pymf/__init__.py imports
them); the engine imports none. pymf.sample, pymf.fit and pymf.load look the pair or the
saved kind up here:

    register("sample", TweedieNMF, PSGLD, sample_nmf)      # in the family's package
    register_result(NMFSamples)                            # its .kind names it in files
"""
_RUNNERS = {"sample": [], "fit": [], "mpi": []}
_LAUNCHERS = {}
_RESULTS = {}
_LEGACY = {}
_COMMANDS = []


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
        raise ValueError(f"unknown result kind {kind!r} (known: {sorted(_RESULTS)})")
    return _RESULTS[kind]


def legacy_class(kind):
    return _LEGACY.get(kind)


def _names(types):
    types = types if isinstance(types, tuple) else (types,)
    return [t.__name__ for t in types]


def runner(verb, model, sampler):
    for model_type, sampler_type, fn in _RUNNERS[verb]:
        if isinstance(model, model_type) and isinstance(sampler, sampler_type):
            return fn
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
    return [(m, s) for m, s, _ in _RUNNERS[verb]]


def register_launcher(name, main):
    """A subcommand of `python -m pymf.mpi NAME ...`: main(argv) gets argv with NAME first
    and returns the exit status."""
    _LAUNCHERS[name] = main


def launchers():
    return dict(_LAUNCHERS)


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
    """[(name, help, add_arguments, run)] in registration order."""
    return list(_COMMANDS)
