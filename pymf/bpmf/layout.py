"""How a BPMF run lays its data and state out: seeds, the permuted block grid, the
starting state.

Seeding: the run's SeedSequence spawns 3 + 2 C streams: the permutation of users and items,
the initial state, the Gibbs seed, and for every chain c its Philox key (minibatches and
Langevin noise) and the GSL seed of its precision draws. Results are a pure function of
(seed, data, settings): the same for any number of threads, and for the MPI parameter server
(pymf.bpmf.mpi) with the same settings.
"""
import numpy as np

from pymf.bpmf import _bpmf
from pymf.data import real_array, stable_order
from pymf.engine.seeds import seed_sequence


def bpmf_seeds(seed, n_chains):
    children = seed_sequence(seed).spawn(3 + 2 * n_chains)
    permute_rng = np.random.default_rng(children[0])
    init_rng = np.random.default_rng(children[1])
    gibbs = children[2].generate_state(2, np.uint64)
    noise = np.array([c.generate_state(1, np.uint64)[0] for c in children[3::2]], dtype=np.uint64)
    hyper = np.array([c.generate_state(1, np.uint64)[0] for c in children[4::2]], dtype=np.uint64)
    return permute_rng, init_rng, gibbs, noise, hyper


class Layout:
    """Users and items permuted into grid order and cut into P x Q blocks.

    user_of[g] is the original user at grid position g; user_pos is its inverse."""

    def __init__(self, ratings, grid, permute, rng):
        L, M = ratings.shape
        P, Q = grid
        if P > L or Q > M:
            raise ValueError(f"a {P} x {Q} block split needs at least {P} users and {Q} items "
                             f"(the data have {L} x {M}): too many blocks")
        self.user_of = rng.permutation(L) if permute else np.arange(L)
        self.item_of = rng.permutation(M) if permute else np.arange(M)
        self.user_pos = np.empty(L, dtype=np.int64)
        self.user_pos[self.user_of] = np.arange(L)
        self.item_pos = np.empty(M, dtype=np.int64)
        self.item_pos[self.item_of] = np.arange(M)
        row_start = np.linspace(0, L, P + 1).round().astype(np.int64)
        col_start = np.linspace(0, M, Q + 1).round().astype(np.int64)
        users = self.user_pos[ratings.rows]
        items = self.item_pos[ratings.cols]
        block = (np.searchsorted(row_start, users, side="right") - 1) * Q + \
            (np.searchsorted(col_start, items, side="right") - 1)
        order = stable_order((block, users, items), (P * Q, L, M))
        block_ptr = np.zeros(P * Q + 1, dtype=np.int64)
        np.cumsum(np.bincount(block, minlength=P * Q), out=block_ptr[1:])
        self.c = _bpmf.BlockLayout(L, M, row_start, col_start, block_ptr, users[order],
                                   items[order], ratings.values[order])
        self.shape = (L, M)

    def users_items(self, users, items):
        """Original (user, item) ids -> grid positions (validated)."""
        users = np.asarray(users)
        items = np.asarray(items)
        if users.shape != items.shape or users.ndim != 1:
            raise ValueError("users and items must be 1-D arrays of the same length")
        for name, ids, n in (("user", users, self.shape[0]), ("item", items, self.shape[1])):
            if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= n):
                raise ValueError(f"{name} ids must be integers in [0, {n})")
        return (self.user_pos[users.astype(np.int64)].astype(np.int32),
                self.item_pos[items.astype(np.int64)].astype(np.int32))

    def to_original(self, U, V, a, b):
        return U[self.user_pos], V[self.item_pos], a[self.user_pos], b[self.item_pos]

    def to_grid(self, U, V, a, b):
        return U[self.user_of], V[self.item_of], a[self.user_of], b[self.item_of]


def _initial_params(model, shape, rng):
    L, M = shape
    D = model.rank
    precisions = np.full(2 * D + 3, model.init_precision)
    precisions[-1] = model.initial_tau  # lam_u[D], lam_v[D], lam_a, lam_b, tau
    return (rng.normal(0.0, model.init_scale, (L, D)), rng.normal(0.0, model.init_scale, (M, D)),
            np.zeros(L), np.zeros(M), precisions)


def check_init(init, model, shape, n_chains):
    """The init= of a BPMF run, validated: a dict U, V, a, b of arrays (n_chains, ...) in the
    original order, or None."""
    if init is None:
        return None
    if not isinstance(init, dict) or "U" not in init or "V" not in init:
        raise ValueError("init must be a dict with U (users x rank) and V (items x rank), "
                         "optionally a and b (e.g. a previous result's last_state)")
    unknown = set(init) - set("UVab")
    if unknown:
        raise ValueError(f"init has unknown entries {sorted(unknown)}: use U, V, a and b")
    L, M = shape
    D = model.rank
    out = {}
    for key, single in (("U", (L, D)), ("V", (M, D)), ("a", (L,)), ("b", (M,))):
        if key not in init:
            out[key] = np.zeros((n_chains,) + single)
            continue
        value = real_array(init[key], f"init[{key!r}]")
        if value.shape == single:
            value = np.broadcast_to(value, (n_chains,) + single)
        if value.shape != (n_chains,) + single:
            raise ValueError(f"init[{key!r}] has shape {value.shape}: expected {single} or, one "
                             f"per chain, {(n_chains,) + single}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"init[{key!r}] contains NaN or inf")
        out[key] = np.ascontiguousarray(value)
    return out
