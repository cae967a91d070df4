#!/usr/bin/env python3
"""The PSGLD paper's piano experiment (section 4.2.2, Fig. 3): spectral dictionaries of a
short polyphonic piece learned by PSGLD and by LD.

Input: a WAV file (--wav: read with scipy.io.wavfile, mixed to mono, float, peak 1), or by
default a 5-second piano-like excerpt synthesised here at 16 kHz: single notes C4, E4, G4,
the chord C4+E4+G4, single notes A3, F4, D4, B3, G3, the chord G3+B3+D4 (onsets 0.45 to 0.6 s
apart, so each note still rings when the next starts). A note is 10 partials at
f_n = n f0 sqrt(1 + 1e-4 n^2) (a string's slight inharmonicity) with amplitudes 1/n and
random phases (numpy seed 0), a 10 ms attack and an exponential decay (time constant
0.35 s). Eight distinct pitches, so K = 8 can give one atom per note.

V: the magnitude STFT (scipy.signal.stft, Hann window of 1024 samples, hop 256), its lowest
256 frequency bins (0 to 3984 Hz at 16 kHz, 15.6 Hz apart), its time axis linearly
resampled to 256 frames, then divided by its mean, so mean(V) = 1 (the divisor is in the
JSON as scale.divided_by): a 256 x 256 non-negative matrix, frequency x time.

Model: TweedieNMF(K = 8, beta = 1 (KL / Poisson-like: defined for any non-negative data, not
only counts), phi = 1, exponential priors, lam_w = lam_h = 1). Each sampler runs 10,000
iterations from the same seed-0 start; the first 5,000 are burn-in and the posterior means
average every 50th later state (100 samples):

    PSGLD(blocks=8, step_size=PolynomialDecay(a=5e-4, b=0.51), part_order="cyclic")
    LD(step_size=2e-4)

The step sizes were chosen by hand on the synthesised excerpt (seed 0, then checked on
seeds 1-7):
  * PSGLD a = 1 and 0.1 raise pymf.DivergenceError; a = 1e-2 survives but passes through a
    log-likelihood of -4e138; a = 2e-3 and 1e-3 end at lower log-likelihoods (about -10,000,
    with two notes merged in one atom, and -6,300: more discretisation noise); a = 5e-4
    gives eight note atoms. Its log-likelihood is still rising at the end of burn-in (about
    -6,900 at 5,000, -5,300 at 10,000, -4,400 after 40,000 iterations): per iteration PSGLD
    mixes more slowly than LD here, per second it is about 5-6x faster.
  * LD eps = 0.1, 0.03 and 0.01 diverge; eps = 3e-3 and 2e-3 hover at -18,500 / -12,200
    (discretisation noise); eps = 1e-3, 5e-4 and 2e-4 give eight note atoms, 2e-4 the best
    log-likelihood (about -4,500, reached within 2,000 iterations).
  * Local modes: over seeds 0-7, PSGLD a = 5e-4 gives eight clean note atoms for seeds 0, 1,
    3, 7 and LD 2e-4 for seeds 0, 1, 3, 4; the other chains end with an atom holding two
    notes (C4+E4, or G3 with B3/D4) next to a duplicate or weak atom, at a clearly lower
    log-likelihood (about -6,000 to -9,500). Every step tried from 1e-4 to 1e-3 gives 2 to 5
    clean chains of 8, for both samplers: the posterior is multimodal and the random start
    decides, not the step. Even the same excerpt written to a 16-bit WAV and read back
    sends PSGLD (seed 0) into such a mode.
--psgld-a, --ld-step and --seed change these; a WAV of another scale or length may need
other steps (a DivergenceError ends the script with that advice).

Timing: both samplers are timed around pymf.sample (wall seconds; the sampling time alone
is res.trace["time"][-1]). The chains are bit-identical for any thread count, but on a
machine where other processes hold the cores, OpenMP threads that wait for each other can
run 10x slower or worse: --threads 1 (or OMP_WAIT_POLICY=passive) gives stable times there.
The JSON records the load average before each run.

Output in --out (default results/audio): dictionaries.png, three panels: V on a log colour
scale, and the PSGLD and LD posterior-mean dictionaries W_mean (256 x 8), each column
normalised to a maximum of 1 and the columns sorted by the frequency of their strongest
peak (square-root colour scale, so that the weaker upper partials show), with the run
times in the titles; and audio_dictionary.json: run times, final log-likelihoods and the
log-likelihood trace (every 500 iterations), step sizes, and per atom the frequency of its
strongest peak (the bin, and refined by a parabola through the log magnitudes), the lowest
peak above 0.3 (a fundamental estimate) and, for the synthesised excerpt, the note whose
harmonics (+-2 bins) hold the largest share of the atom's mass (an isolated synthesised
note scores 0.98; mass outside the note's harmonics comes from other notes that ring at the
same time and from the posterior mean's positive floor). Prints the JSON, then a table.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit  # noqa: E402

import pymf  # noqa: E402

RATE = 16_000
NOTES = {"G3": 196.00, "A3": 220.00, "B3": 246.94, "C4": 261.63, "D4": 293.66,
         "E4": 329.63, "F4": 349.23, "G4": 392.00}
# (onset in seconds, the notes struck together)
SCORE = [(0.00, ["C4"]), (0.45, ["E4"]), (0.90, ["G4"]), (1.35, ["C4", "E4", "G4"]),
         (1.95, ["A3"]), (2.40, ["F4"]), (2.85, ["D4"]), (3.30, ["B3"]), (3.75, ["G3"]),
         (4.25, ["G3", "B3", "D4"])]
PARTIALS = 10
INHARMONICITY = 1e-4
DECAY = 0.35  # seconds: the exponential decay's time constant


def partial(f0, n):
    return f0 * n * np.sqrt(1 + INHARMONICITY * n * n)


def synthesise(seconds=5.0, seed=0):
    """The default excerpt: a sum of decaying harmonic notes, scaled to a peak of 1."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    signal = np.zeros_like(t)
    for start, chord in SCORE:
        for name in chord:
            local = np.maximum(t - start, 0.0)
            envelope = (1 - np.exp(-local / 0.01)) * np.exp(-local / DECAY)  # 0 before the onset
            tone = np.zeros_like(t)
            for n in range(1, PARTIALS + 1):
                freq = partial(NOTES[name], n)
                if freq < RATE / 2:
                    tone += np.sin(2 * np.pi * freq * local + rng.uniform(0, 2 * np.pi)) / n
            signal += envelope * tone
    return signal / np.abs(signal).max()


def read_wav(path):
    from scipy.io import wavfile
    rate, signal = wavfile.read(path)
    if signal.dtype == np.uint8:  # 8-bit WAV is unsigned, centred on 128
        signal = signal.astype(np.float64) - 128.0
    signal = np.asarray(signal, dtype=np.float64)
    if signal.ndim > 1:
        signal = signal.mean(axis=1)
    peak = np.abs(signal).max()
    if peak > 0:
        signal /= peak
    return rate, signal


def spectrogram(signal, rate, bins=256, frames=256):
    """(V, freqs, scale): |STFT| (Hann, 1024, hop 256), the lowest `bins` bins, `frames`
    frames (linear interpolation in time), divided by `scale` so that its mean is 1."""
    from scipy.signal import stft
    freqs, _, X = stft(signal, fs=rate, window="hann", nperseg=1024, noverlap=768)
    mag = np.abs(X)[:bins]
    old = np.linspace(0.0, 1.0, mag.shape[1])
    new = np.linspace(0.0, 1.0, frames)
    V = np.stack([np.interp(new, old, row) for row in mag])
    scale = float(V.mean())
    return V / scale, freqs[:bins], scale


def run(model, V, sampler, seed=0):
    started = time.perf_counter()
    res = pymf.sample(model, V, sampler, n_samples=5000, burnin=5000, thin=50, seed=seed,
                      trace_every=500, progress=False)
    return res, time.perf_counter() - started


def normalised_sorted(W, freqs):
    """Columns scaled to a maximum of 1, sorted by the frequency of their strongest peak."""
    W = W / W.max(axis=0, keepdims=True)
    return W[:, np.argsort(np.argmax(W, axis=0), kind="stable")]


def note_share(column, freqs, f0):
    """The share of the atom's mass within +-2 bins of the harmonics of f0 (below the top bin)."""
    df = freqs[1] - freqs[0]
    mask = np.zeros(column.shape, bool)
    for n in range(1, 100):
        f = partial(f0, n)
        if f > freqs[-1] + 2 * df:
            break
        b = int(round(f / df))
        mask[max(b - 2, 0):b + 3] = True
    return float(column[mask].sum() / column.sum())


def describe(W, freqs, notes=None):
    """Per atom (W already normalised and sorted): strongest peak, lowest strong peak (a
    fundamental estimate: the lowest local maximum above 0.3) and, when the notes are known,
    the note whose harmonics hold the largest share of the atom."""
    df = freqs[1] - freqs[0]
    atoms = []
    for k in range(W.shape[1]):
        column = W[:, k]
        i = int(np.argmax(column))
        offset = 0.0
        if 0 < i < len(column) - 1 and column[i - 1] > 0 and column[i + 1] > 0:
            # a parabola through the log magnitudes of the peak bin and its neighbours
            a, b, c = np.log(column[i - 1:i + 2])
            if a - 2 * b + c < 0:
                offset = 0.5 * (a - c) / (a - 2 * b + c)
        is_max = np.r_[False, (column[1:-1] > column[:-2]) & (column[1:-1] >= column[2:]), False]
        strong = np.flatnonzero(is_max & (column > 0.3))
        atom = {"peak_hz": round(float(freqs[i]), 1),
                "peak_hz_interpolated": round(float(freqs[i] + offset * df), 1),
                "lowest_strong_peak_hz": round(float(freqs[strong[0] if strong.size else i]), 1)}
        if notes:
            # candidates: notes with a visible fundamental (an octave's harmonics are a
            # subset of the lower note's, so G4's atom would otherwise match G3 as well)
            bins = {name: int(round(f0 / df)) for name, f0 in notes.items()}
            present = [name for name, b in bins.items() if column[max(b - 2, 0):b + 3].max() >= 0.2]
            shares = {name: note_share(column, freqs, notes[name]) for name in present or notes}
            best = max(shares, key=shares.get)
            atom["best_note"] = best
            atom["best_note_share"] = round(shares[best], 3)
        atoms.append(atom)
    return atoms


def plot(path, V, freqs, panels):
    """panels: (title, W normalised and sorted, describe(W)) for each sampler."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm, PowerNorm
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.5), gridspec_kw={"width_ratios": [2, 1, 1]})
    top = freqs[-1] + (freqs[1] - freqs[0]) / 2
    image = axes[0].imshow(V, origin="lower", aspect="auto", cmap="magma",
                           norm=LogNorm(vmin=V.max() * 1e-3, vmax=V.max()),
                           extent=[-0.5, V.shape[1] - 0.5, -(freqs[1] - freqs[0]) / 2, top])
    fig.colorbar(image, ax=axes[0], fraction=0.04)
    axes[0].set_title("V: magnitude spectrogram (log colour)")
    axes[0].set_xlabel("frame")
    axes[0].set_ylabel("frequency (Hz)")
    for ax, (title, W, atoms) in zip(axes[1:], panels):
        image = ax.imshow(W, origin="lower", aspect="auto", cmap="magma", interpolation="nearest",
                          norm=PowerNorm(0.5, vmin=0, vmax=1),
                          extent=[0.5, W.shape[1] + 0.5, -(freqs[1] - freqs[0]) / 2, top])
        ax.set_title(title)
        known = "best_note" in atoms[0]
        ax.set_xlabel("atom: peak Hz (interpolated)" + (", best note" if known else ""))
        ax.set_xticks(range(1, W.shape[1] + 1))
        labels = [f"{a['peak_hz_interpolated']:.0f}" + (f"\n{a['best_note']}" if known else "")
                  for a in atoms]
        ax.set_xticklabels(labels, fontsize=8)
    fig.colorbar(image, ax=axes[2], fraction=0.08, label="atom / its maximum (square-root colour)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--wav", default=None, help="a WAV file (default: the synthesised excerpt)")
    parser.add_argument("--out", default="results/audio",
                        help="folder of audio_dictionary.json and dictionaries.png")
    parser.add_argument("--psgld-a", type=float, default=5e-4, help="PSGLD eps_t = (a/t)^0.51")
    parser.add_argument("--ld-step", type=float, default=2e-4, help="LD's constant step")
    parser.add_argument("--seed", type=int, default=0, help="the chains' seed (pymf.sample)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OpenMP threads of both samplers (default: OpenMP's choice)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    if args.wav:
        rate, signal = read_wav(args.wav)
    else:
        rate, signal = RATE, synthesise()
    V, freqs, scale = spectrogram(signal, rate)
    notes = None if args.wav else NOTES
    model = pymf.TweedieNMF(8, beta=1.0, phi=1.0, prior="exponential")
    samplers = {
        "psgld": pymf.PSGLD(blocks=8, step_size=pymf.PolynomialDecay(args.psgld_a, 0.51),
                            part_order="cyclic", n_threads=args.threads),
        "ld": pymf.LD(step_size=args.ld_step, n_threads=args.threads),
    }
    document = {"benchmark": "audio_dictionary",
                "input": args.wav or "synthesised piano-like excerpt (5 s, 16 kHz, seed 0)",
                "sample_rate": int(rate), "shape": list(V.shape),
                "stft": {"window": "hann", "nperseg": 1024, "hop": 256, "bins": 256,
                         "max_hz": float(freqs[-1])},
                "scale": {"divided_by": scale, "mean_after": float(V.mean()),
                          "note": "V = |STFT| / mean|STFT| (after cropping and resampling)"},
                "model": model.params(), "iterations": 10_000, "burnin": 5_000, "thin": 50,
                "seed": args.seed,
                "cpu_count": os.cpu_count(), "pymf": pymf.__version__}
    if notes:
        document["score"] = [f"{onset:.2f} s: {'+'.join(chord)}" for onset, chord in SCORE]
        document["notes_hz"] = NOTES
    panels = []
    for name, sampler in samplers.items():
        load = os.getloadavg()[0]
        try:
            res, seconds = run(model, V, sampler, args.seed)
        except pymf.DivergenceError as exc:
            raise SystemExit(f"{name} with {sampler!r} diverged ({exc}); pass a smaller "
                             f"--{'psgld-a' if name == 'psgld' else 'ld-step'}")
        W = normalised_sorted(res.W_mean, freqs)
        atoms = describe(W, freqs, notes)
        document[name] = {"sampler": repr(sampler), "step_size": sampler.step_size.params(),
                          "threads": args.threads or "OpenMP default",
                          "load_average_before": round(load, 2),
                          "wall_seconds": round(seconds, 3),
                          "sampling_seconds": round(float(res.trace["time"][-1]), 3),
                          "final_loglik": float(res.trace["loglik"][-1]),
                          "loglik_trace": [round(float(x), 1) for x in res.trace["loglik"]],
                          "atoms": atoms}
        panels.append((f"{name.upper()} posterior-mean dictionary, {seconds:.1f} s", W, atoms))
    document["plot"] = plot(os.path.join(args.out, "dictionaries.png"), V, freqs, panels)
    emit(document, os.path.join(args.out, "audio_dictionary.json"))

    print(f"\n{'method':>6} {'step':>28} {'wall s':>7} {'loglik':>10}  "
          "atom peaks (Hz, interpolated)")
    for name in samplers:
        d = document[name]
        step = d["step_size"]
        step = (f"(a={step['a']:g}/t)^{step['b']:g}" if step["kind"] == "polynomial"
                else f"{step['value']:g}")
        print(f"{name:>6} {step:>28} {d['wall_seconds']:>7.2f} {d['final_loglik']:>10.1f}  "
              + " ".join(f"{a['peak_hz_interpolated']:>8.1f}" for a in d["atoms"]))
        if notes:
            print(f"{'':>6} {'best note (share)':>28} {'':>7} {'':>10}  " + " ".join(
                f"{a['best_note']:>3}({a['best_note_share']:.2f})" for a in d["atoms"]))


if __name__ == "__main__":
    main()
