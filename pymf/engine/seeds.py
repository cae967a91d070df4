"""Seeds: what a run is a pure function of.

seed=None (the default everywhere) draws fresh entropy from the operating system, so two
runs are two independent chains unless the user asks otherwise. Whatever was given, the
result records the seed actually used (`result.seed`), and passing it back reproduces the
run bit for bit. A seed is a non-negative integer, a numpy.random.SeedSequence, or the
recorded form of one that was spawned ({"entropy": int, "spawn_key": [ints]}).

A family spawns its independent streams (noise keys, minibatch schedules, permutations,
the starting state) from `seed_sequence(seed)`; every call returns a fresh SeedSequence
(spawn() counts its children, so one object spawned twice would give other streams).
"""
import numbers

import numpy as np


def _from_record(seed):
    if isinstance(seed, np.random.SeedSequence):
        return seed.entropy, tuple(seed.spawn_key)
    if isinstance(seed, dict) and set(seed) == {"entropy", "spawn_key"}:
        entropy, key = seed["entropy"], seed["spawn_key"]
        if isinstance(entropy, numbers.Integral) and not isinstance(entropy, bool) and entropy >= 0 \
                and all(isinstance(k, numbers.Integral) and k >= 0 for k in key):
            return int(entropy), tuple(int(k) for k in key)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError("seed must be None, a non-negative integer or a "
                         f"numpy.random.SeedSequence, got {seed!r}")
    return int(seed), ()


def check_seed(seed, name="seed"):
    """A seed that was given (None refused): returns the recorded form."""
    if seed is None:
        raise ValueError(f"{name} must be a non-negative integer, got None")
    try:
        return record(seed)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative integer, got {seed!r}") from None


def resolve_seed(seed):
    """The recorded form of the seed a run uses: fresh entropy for None."""
    if seed is None:
        return int(np.random.SeedSequence().entropy)
    return record(seed)


def record(seed):
    """JSON-friendly form of a seed: an int, or {"entropy", "spawn_key"} for a spawned one."""
    entropy, key = _from_record(seed)
    if isinstance(seed, np.random.SeedSequence) and seed.entropy is None:
        raise ValueError("a SeedSequence without entropy cannot be recorded")
    return entropy if not key else {"entropy": entropy, "spawn_key": list(key)}


def seed_sequence(seed):
    """A fresh numpy.random.SeedSequence for a recorded (or given) seed."""
    entropy, key = _from_record(seed)
    return np.random.SeedSequence(entropy, spawn_key=key)
