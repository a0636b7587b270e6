"""A 1x1 conv with transcendental epilogues (exact and tanh GELU, SiLU, Mish) against the same conv with
its bias alone, and against TOPI's libm functions (what the build ran before schedule version 13).

The conv is the PP-OCR detector's ``1x1 48->96 @160x160`` (issue 46: 14.4 ms with its exact-GELU
epilogue against 1.12 ms without, on Zen 4). Each epilogue is written as TVM's ONNX frontend imports
what exporters write (``kernels.epilogue``'s steps). Every kernel is built, checked against numpy and
timed cold, as the measurer times it (weights and output flushed; a round: the median of 10 runs), in
interleaved rounds; the ratio to the bias-only kernel of the same layouts is the median of the
per-round ratios, with its 95 % interval (``timing.Ratio``). Writes ``benchmarks/results/epilogues.md``.

Usage::

    python -m benchmarks.epilogues               # --rounds 15
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from unittest import mock

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np

from benchmarks.kernel_timing import cold_rounds, compiled_kernel, produced_by

RESULTS = Path(__file__).resolve().parent / "results"

#: the detector's layer: data and weight shapes
LAYER = {"op": "conv2d", "data": [1, 48, 160, 160], "kernel": [96, 48, 1, 1], "strides": [1, 1],
         "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "dtype": "float32"}

#: epilogues as the frontends import them, each after the conv's bias ("@1")
EPILOGUES = {
    "bias": ["bias"],
    "GELU (erf, as exported)": ["bias", ["divide", math.sqrt(2.0)], "erf", ["add", 1.0], ["multiply", "@1"],
                                ["multiply", 0.5]],
    "GELU (tanh, as exported)": ["bias", ["power", 3.0], ["multiply", 0.044715], ["add", "@1"],
                                 ["multiply", math.sqrt(2.0 / math.pi)], "tanh", ["add", 1.0],
                                 ["multiply", "@1"], ["multiply", 0.5]],
    "SiLU": ["bias", "sigmoid", ["multiply", "@1"]],
    "Mish": ["bias", "exp", ["add", 1.0], "log", "tanh", ["multiply", "@1"]],
}

#: the layouts and algorithm of the kernels: the detector's (16c in, 32c out, the 1x1 GEMM) first
CANDIDATES = [{"in": "NCHW16c", "out": "NCHW32c", "algorithm": "gemm"},
              {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "gemm"},
              {"in": "NCHW16c", "out": "NCHW32c"}]


def label(candidate: dict) -> str:
    return f"{candidate['in']}->{candidate['out']} {candidate.get('algorithm', 'direct')}"


def libm_unary(tvm, name, x):
    """TOPI's function of ``name`` (one libm call per element): what the build computed before."""
    return getattr(tvm.topi, name)(x)


def build(candidates: list[dict], target, with_libm: bool) -> dict:
    """``(layouts, epilogue, "now" | "libm") -> (module, name, args)``, each checked against numpy."""
    from layoutopt.tvm.kernels import transcendental

    kernels = {}
    for candidate in candidates:
        for name, steps in EPILOGUES.items():
            workload = {**LAYER, "epilogue": steps}
            kernels[label(candidate), name, "now"] = compiled_kernel(workload, candidate, target)
            if with_libm and name.startswith("GELU (erf"):
                with mock.patch.object(transcendental, "unary_te", libm_unary):
                    kernels[label(candidate), name, "libm"] = compiled_kernel(workload, candidate, target)
            print(f"built {label(candidate)} {name}", file=sys.stderr, flush=True)
    return kernels


def write_table(samples: dict, out: Path, stamp: str, loads: tuple[float, float], rounds: int) -> None:
    from layoutopt.tvm.evaluate.timing import Ratio

    lines = [
        "# Transcendental epilogues of a 1x1 conv: vectorised, against the bias alone", "",
        f"*{stamp}*", "",
        produced_by("python -m benchmarks.epilogues", rounds, loads)
        + " The PP-OCR detector's 1x1 48->96 conv at 160x160 with each epilogue as TVM imports the "
        "exporters' graphs; `libm`: the same kernel with TOPI's `erf` (one `erff` call per element, "
        "the build before schedule version 13). Times: each kernel's median round (a round: the median "
        "of 10 cold runs, weights and output flushed), in ms. Ratio: to the bias-only kernel of the "
        "same layouts, the median of the per-round ratios [95 % interval].", "",
        "| layouts, algorithm | epilogue | ms | ratio to bias |",
        "|---|---|---|---|",
    ]
    for (layouts, name, kind), times in samples.items():
        reference = samples[layouts, "bias", "now"]
        ratio = Ratio.of(times, reference)
        shown = name + (" (libm erf, before)" if kind == "libm" else "")
        lines.append(f"| {layouts} | {shown} | {np.median(times) * 1e3:.3f} | "
                     f"{'1' if name == 'bias' else ratio.text} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default=str(RESULTS / "epilogues.md"))
    parser.add_argument("--no-libm", action="store_true", help="skip the libm kernels (slow to time)")
    args = parser.parse_args(argv)
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target

    target = resolve_target(None)
    kernels = build(CANDIDATES, target, with_libm=not args.no_libm)
    start = os.getloadavg()[0]
    samples = cold_rounds(kernels, args.rounds)
    write_table(samples, Path(args.out), stamp_line(), (start, os.getloadavg()[0]), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
