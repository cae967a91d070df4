#!/usr/bin/env python3
"""The constants of the noise's Box-Muller (core/include/pymf/philox.h): the log's interval
tables, near-minimax polynomial fits, and their errors.

The log: u = m 2^e, m in [1, 2) lies in one of 16 intervals [1 + i/16, 1 + (i+1)/16) with
point c_i (1 for i = 0, 2 for i = 15, the middle otherwise); the tables hold 1/c_i rounded
to double (PYMF_LOG_INVERSE_C) and -2 log of that rounded value (PYMF_LOG_MINUS_2_LOG_C;
its last entry is -2 log 2 exactly as philox.h's multiplier of e, so that e = -1 cancels it
exactly near u = 1). r = m / c_i - 1 lies in [-1/32, 1/16].

Each polynomial is a weighted least-squares fit on 4,000 Chebyshev nodes (--nodes),
reweighted 30 times (--rounds) towards the largest errors (Lawson's iteration, close to
minimax), against long double targets:

* -2 log1p(r) = -2 r + r^2 + r^3 P(r), P of degree 5, relative error;
* sin(pi t / 2) = t S(t^2), S of degree 5 (to t^11), on |t| <= 1/2, absolute error;
* cos(pi t / 2) = 1 + t^2 C(t^2), C of degree 4 (to t^10), on |t| <= 1/2, absolute error.

Prints the tables and coefficients (highest power first, as philox.h has them) and each
fit's largest error on a grid of 200,001 points (--grid-points). Another BLAS may change
the last bits of a coefficient; any fit with the printed error serves (the chain's bits
follow philox.h's constants).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter  # noqa: E402

LONG = np.longdouble
PI = LONG("3.14159265358979323846264338327950288")
LOG2 = 0.6931471805599453  # philox.h's log 2 (times -2: -1.3862943611198906)


def near_minimax(target, lo, hi, powers, weight, nodes=4000, rounds=30):
    t = np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    x = ((lo + hi) / 2 + (hi - lo) / 2 * t).astype(LONG)
    y = target(x)
    basis = np.stack([x ** p for p in powers], 1)
    w = weight(x)
    emphasis = np.ones(nodes)
    for _ in range(rounds):
        # the weighted system in long double, solved in double
        coef, *_ = np.linalg.lstsq((basis * (w * emphasis)[:, None]).astype(float),
                                   (y * (w * emphasis)).astype(float), rcond=None)
        error = np.abs((basis.astype(float) @ coef - y.astype(float)) * w.astype(float))
        emphasis = emphasis * (error / error.max()) ** 0.3 + 1e-3
    return coef


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--nodes", type=int, default=4000, help="Chebyshev nodes of each fit")
    p.add_argument("--rounds", type=int, default=30,
                   help="reweightings towards the largest errors (Lawson's iteration)")
    p.add_argument("--grid-points", type=int, default=200_001,
                   help="points of the grid on which each fit's largest error is measured")
    args = p.parse_args(argv)
    fit = lambda *a: near_minimax(*a, nodes=args.nodes, rounds=args.rounds)  # noqa: E731
    inverse = [1.0] + [float(1 / (1 + (LONG(i) + LONG(0.5)) / 16)) for i in range(1, 15)] + [0.5]
    minus_2_log = [2 * float(np.log(LONG(v))) for v in inverse]
    minus_2_log[15] = -2 * LOG2
    print("PYMF_LOG_INVERSE_C:", [repr(v) for v in inverse])
    print("PYMF_LOG_MINUS_2_LOG_C:", [repr(v) for v in minus_2_log])
    lo = min(float(LONG(1 + i / 16) * LONG(inverse[i]) - 1) for i in range(16))
    hi = max(float(LONG(1 + (i + 1) / 16) * LONG(inverse[i]) - 1) for i in range(16))
    print(f"r in [{lo}, {hi}]")
    P = fit(lambda r: (np.log1p(r) - r + r * r / 2) / r ** 3, lo, hi, range(6),
            lambda r: np.abs(r ** 3 / np.log1p(r)))
    r = np.linspace(lo, hi, args.grid_points)
    r = r[r != 0]
    got = r - r * r / 2 + r ** 3 * np.polynomial.polynomial.polyval(r, P)
    exact = np.log1p(r.astype(LONG))
    print("-2 log1p P (r^5 .. r^0):", [repr(-2 * float(c)) for c in P[::-1]])
    print("  relative error", float(np.max(np.abs((got - exact) / exact))))

    S = fit(lambda t: np.sin(PI * t / 2) / t, 1e-6, 0.5, [0, 2, 4, 6, 8, 10],
            lambda t: np.ones_like(t))
    C = fit(lambda t: (np.cos(PI * t / 2) - 1) / (t * t), 1e-6, 0.5, [0, 2, 4, 6, 8],
            lambda t: t * t)
    t = np.linspace(-0.5, 0.5, args.grid_points)
    sin = t * np.polynomial.polynomial.polyval(t * t, S)
    cos = 1 + t * t * np.polynomial.polynomial.polyval(t * t, C)
    print("sin S (t^10 .. t^0 in t^2):", [repr(float(c)) for c in S[::-1]])
    print("  absolute error", float(np.max(np.abs(sin - np.sin(PI * t.astype(LONG) / 2)))))
    print("cos C (t^8 .. t^0 in t^2):", [repr(float(c)) for c in C[::-1]])
    print("  absolute error", float(np.max(np.abs(cos - np.cos(PI * t.astype(LONG) / 2)))))


if __name__ == "__main__":
    main()
