#!/usr/bin/env python3
"""The PSGLD paper's piano experiment (section 4.2.2, Fig. 3): spectral dictionaries of a
short polyphonic piece learned by PSGLD and by LD.

Input: a WAV file (--wav), or by default a 5-second piano-like excerpt synthesised here at
16 kHz: notes and chords (C4, E4, G4, the C major chord, A3, F4, D4+F4, G3) made of 10
harmonic partials (amplitude 1/n, slight inharmonicity), each with a short attack and an
exponential decay. V is the magnitude STFT (Hann window of 1024 samples, hop 256), its
lowest 256 frequency bins, its time axis resampled to 256 frames, scaled to mean 1: a
256 x 256 non-negative matrix.

Model: TweedieNMF(K = 8, beta = 1, phi = 1, exponential priors). PSGLD with B = 8 and cyclic
parts, eps_t = (a/t)^0.51, and LD with a constant step, 10,000 iterations each, the first
5,000 discarded as burn-in (the posterior means average every 50th later state). The steps
are the largest of a ladder (x0.1 apart) that does not diverge. Output in --out: a PNG with
the spectrogram and the two dictionaries (columns normalised to a maximum of 1, sorted by
the frequency of their strongest peak), and a JSON with the run times, log-likelihoods and
each atom's peak frequency and estimated fundamental.
"""
import argparse
import json
import os
import time

import numpy as np

import pymf

RATE = 16_000
NOTES = {"G3": 196.00, "A3": 220.00, "C4": 261.63, "D4": 293.66, "E4": 329.63, "F4": 349.23,
         "G4": 392.00}
SCORE = [(0.0, ["C4"]), (0.6, ["E4"]), (1.2, ["G4"]), (1.8, ["C4", "E4", "G4"]), (2.6, ["A3"]),
         (3.2, ["F4"]), (3.8, ["D4", "F4"]), (4.4, ["G3"])]


def synthesise(seconds=5.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    signal = np.zeros_like(t)
    for start, chord in SCORE:
        for name in chord:
            f0 = NOTES[name]
            local = t - start
            on = local >= 0
            envelope = np.where(on, (1 - np.exp(-np.maximum(local, 0) / 0.01)) *
                                np.exp(-np.maximum(local, 0) / 0.7), 0.0)
            tone = np.zeros_like(t)
            for n in range(1, 11):
                freq = f0 * n * np.sqrt(1 + 1e-4 * n * n)  # a string's slight inharmonicity
                if freq < RATE / 2:
                    tone += np.sin(2 * np.pi * freq * local + rng.uniform(0, 2 * np.pi)) / n
            signal += envelope * tone
    return signal / np.abs(signal).max()


def spectrogram(signal, rate, bins=256, frames=256):
    from scipy.signal import stft
    freqs, _, X = stft(signal, fs=rate, window="hann", nperseg=1024, noverlap=768)
    mag = np.abs(X)[:bins]
    old = np.linspace(0, 1, mag.shape[1])
    new = np.linspace(0, 1, frames)
    V = np.stack([np.interp(new, old, row) for row in mag])
    return V / V.mean(), freqs[:bins]


def run(model, V, sampler, seed=0):
    started = time.perf_counter()
    res = pymf.sample(model, V, sampler, n_samples=5000, burnin=5000, thin=50, seed=seed,
                      trace_every=500, progress=False)
    return res, time.perf_counter() - started


def first_stable(model, V, make, ladder):
    for value in ladder:
        try:
            res, seconds = run(model, V, make(value))
            return value, res, seconds
        except pymf.DivergenceError:
            continue
    raise RuntimeError("every step size diverged")


def describe(W, freqs):
    """Per atom: peak frequency and a fundamental estimate (the lowest strong peak)."""
    atoms = []
    for k in range(W.shape[1]):
        column = W[:, k] / W[:, k].max()
        peak = float(freqs[int(np.argmax(column))])
        strong = np.flatnonzero((column > 0.3) & (np.r_[0, column[1:-1] > column[:-2], 0] > 0)
                                & (np.r_[0, column[1:-1] >= column[2:], 0] > 0))
        fundamental = float(freqs[strong[0]]) if strong.size else peak
        atoms.append({"peak_hz": round(peak, 1), "fundamental_hz": round(fundamental, 1)})
    return atoms


def sorted_dictionary(W, freqs):
    W = W / W.max(axis=0, keepdims=True)
    order = np.argsort([describe(W[:, [k]], freqs)[0]["fundamental_hz"] for k in range(W.shape[1])])
    return W[:, order]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wav", default=None)
    parser.add_argument("--out", default="results/audio")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.wav:
        from scipy.io import wavfile
        rate, signal = wavfile.read(args.wav)
        signal = signal.astype(np.float64)
        if signal.ndim > 1:
            signal = signal.mean(axis=1)
        signal /= np.abs(signal).max()
    else:
        rate, signal = RATE, synthesise()
    V, freqs = spectrogram(signal, rate)
    model = pymf.TweedieNMF(8, beta=1.0, phi=1.0, prior="exponential")
    a, psgld, psgld_s = first_stable(model, V, lambda a: pymf.PSGLD(blocks=8, step_size=pymf.PolynomialDecay(a, 0.51)),
                                     [1e-2, 1e-3, 1e-4, 1e-5])
    eps, ld, ld_s = first_stable(model, V, lambda e: pymf.LD(step_size=e), [1e-2, 1e-3, 1e-4, 1e-5])
    W_psgld = sorted_dictionary(psgld.W_mean, freqs)
    W_ld = sorted_dictionary(ld.W_mean, freqs)
    document = {"benchmark": "audio_dictionary", "input": args.wav or "synthesised piano-like excerpt",
                "shape": list(V.shape), "rank": 8, "cpu_count": os.cpu_count(),
                "psgld": {"step": f"PolynomialDecay(a={a}, b=0.51)", "blocks": 8, "seconds": round(psgld_s, 3),
                          "sampling_seconds": round(float(psgld.trace["time"][-1]), 3),
                          "final_loglik": float(psgld.trace["loglik"][-1]), "atoms": describe(W_psgld, freqs)},
                "ld": {"step": eps, "seconds": round(ld_s, 3),
                       "sampling_seconds": round(float(ld.trace["time"][-1]), 3),
                       "final_loglik": float(ld.trace["loglik"][-1]), "atoms": describe(W_ld, freqs)},
                "notes_hz": NOTES if not args.wav else None}
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 3, figsize=(15, 5))
        extent = [0, V.shape[1], freqs[0], freqs[-1]]
        axes[0].imshow(np.log1p(V), origin="lower", aspect="auto", extent=extent, cmap="magma")
        axes[0].set_title("magnitude spectrogram (log)")
        axes[0].set_xlabel("frame")
        axes[0].set_ylabel("frequency (Hz)")
        for ax, W, name, seconds in ((axes[1], W_psgld, "PSGLD", psgld_s), (axes[2], W_ld, "LD", ld_s)):
            ax.imshow(W, origin="lower", aspect="auto", extent=[0.5, 8.5, freqs[0], freqs[-1]],
                      cmap="magma", interpolation="nearest")
            ax.set_title(f"{name} posterior-mean dictionary ({seconds:.1f} s)")
            ax.set_xlabel("atom")
        fig.tight_layout()
        document["plot"] = os.path.join(args.out, "dictionaries.png")
        fig.savefig(document["plot"], dpi=90)
        plt.close(fig)
    except ImportError:
        document["plot"] = "matplotlib is not installed: no plot"
    with open(os.path.join(args.out, "audio_dictionary.json"), "w") as fh:
        json.dump(document, fh, indent=2)
    print(json.dumps(document, indent=2))
    print(f"\n{'method':>6} {'seconds':>8} {'loglik':>12}  atom fundamentals (Hz)")
    for name in ("psgld", "ld"):
        d = document[name]
        print(f"{name:>6} {d['seconds']:>8.2f} {d['final_loglik']:>12.6g}  "
              + " ".join(f"{a['fundamental_hz']:.0f}" for a in d["atoms"]))


if __name__ == "__main__":
    main()
