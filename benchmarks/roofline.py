"""How close each end-to-end build runs to this CPU's floating-point peak: the ceiling on any speed-up.

Two measurements, side by side with ``benchmarks/results/e2e.json``:

* the CPU's fp32 FMA peak on 2 threads, timed by a small C program (12 independent vector FMA chains
  per thread, no memory traffic: the most any kernel can do), compiled with the machine's gcc;
* each network's arithmetic, counted from its layout graph: ``2 * N * O * OH * OW * C/groups * KH * KW``
  per conv2d and ``2 * M * N * K`` per dense, which is nearly all of the FLOPs of these networks.

``FLOPs / peak`` is a latency no build can beat, whatever its layouts; a speed-up target above
``latency / floor`` is beyond the hardware. Writes ``benchmarks/results/roofline.md``.

Usage::

    python -m benchmarks.roofline            # networks of e2e.json; needs the exported ONNX files
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

from benchmarks.networks import NETWORKS, load_network

RESULTS = Path(__file__).resolve().parent / "results"

_PEAK_C = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>
#ifdef __AVX512F__
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
static float sum(vec v) { return _mm512_reduce_add_ps(v); }
#else
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
static float sum(vec v) { float out[8]; _mm256_storeu_ps(out, v); return out[0] + out[7]; }
#endif
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(void) {
    const long iterations = 100000000; double best = 1e30; float sink = 0;
    for (int round = 0; round < 5; round++) {
        double start = now();
        #pragma omp parallel reduction(+:sink)
        {
            vec acc[12], x = SET1(1.0000001f), y = SET1(0.999999f);
            for (int i = 0; i < 12; i++) acc[i] = SET1((float)i);
            for (long k = 0; k < iterations; k++) {
                #pragma GCC unroll 12
                for (int i = 0; i < 12; i++) acc[i] = FMA(acc[i], x, y);  /* in registers */
            }
            for (int i = 0; i < 12; i++) sink += sum(acc[i]);
        }
        double seconds = now() - start; if (seconds < best) best = seconds;
    }
    printf("%.3f %g\n", omp_get_max_threads() * iterations * 12.0 * LANES * 2 / best / 1e9, sink);
    return 0;
}
"""

#: gcc flags for each vector ISA the peak is measured for
_ISA_FLAGS = {"AVX-512": ["-mavx512f", "-mfma"], "AVX2": ["-mavx2", "-mfma"]}


def fma_peak_gflops(threads: int = 2, isa: str | None = None) -> float:
    """fp32 GFLOP/s of back-to-back vector FMAs of ``isa`` (default: the host's widest, from
    :func:`layoutopt.machine.isa`) on ``threads`` threads, the best of 5 rounds. An AVX-512 host
    measures the AVX2 peak too: AVX2 code runs on it.

    Example::

        fma_peak_gflops(isa="AVX2")     # e.g. 115.0 on 2 cores
    """
    from layoutopt.machine import isa as host_isa

    isa = isa or host_isa()
    if isa not in _ISA_FLAGS:
        raise SystemExit(f"no FMA peak program for the {isa} ISA (known: {', '.join(_ISA_FLAGS)})")
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp) / "peak.c", Path(tmp) / "peak"
        source.write_text(_PEAK_C)
        compile_command = ["gcc", "-O2", *_ISA_FLAGS[isa], "-fopenmp", str(source), "-o", str(binary)]
        subprocess.run(compile_command, check=True)
        out = subprocess.run([str(binary)], env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                             capture_output=True, text=True, check=True).stdout
    return float(out.split()[0])


def workload_flops(workload: dict | None) -> float:
    """fp32 operations of one conv2d or dense workload (multiply and add counted apart), 0 for another op.

    Example:
        >>> workload_flops({"op": "dense", "data": [1, 2048], "weight": [1000, 2048]})
        4096000.0
    """
    from layoutopt.tvm.kernels import conv2d_output_shape

    workload = workload or {}
    if workload.get("op") == "conv2d":
        n, o, oh, ow = conv2d_output_shape(workload)
        _, per_group, kh, kw = workload["kernel"]
        return 2.0 * n * o * oh * ow * per_group * kh * kw
    if workload.get("op") == "dense":
        (m, k), (features, _) = workload["data"], workload["weight"]
        return 2.0 * m * features * k
    return 0.0


def network_flops(network: str) -> float:
    """fp32 operations of the network's conv2d and dense layers (multiply and add counted apart)."""
    from layoutopt.tvm import extract_layout_graph

    return sum(workload_flops(node.workload)
               for node in extract_layout_graph(load_network(network)).layout_nodes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--e2e", default=str(RESULTS / "e2e.json"), help="rows written by benchmarks.e2e")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    from layoutopt.machine import isa, stamp_line

    rows = [r for r in json.loads(Path(args.e2e).read_text()) if "error" not in r]
    threads = int(os.environ["TVM_NUM_THREADS"])
    peak = fma_peak_gflops(threads)
    columns = [("nchw16c", "(b) NCHW16c"), ("layoutopt", "(d) layoutopt"),
               ("onnxruntime", "(f) ONNX Runtime")]
    stamp = stamp_line()
    lines = [
        "# Roofline: end-to-end latency against this CPU's fp32 peak",
        "",
        f"*{stamp}*",
        "",
        f"fp32 FMA peak, {threads} threads ({isa()}, no memory traffic): **{peak:.1f} GFLOP/s**.",
        "GFLOP: conv2d and dense layers. Floor = GFLOP / peak: no build, whatever its layouts, runs faster.",
        "Each build's cell: latency in ms (share of peak it sustains over the whole network).",
        "",
        "| network | GFLOP | floor ms | " + " | ".join(label for _, label in columns)
        + " | largest possible speed-up over (b) |",
        "|---|---|---|" + "---|" * len(columns) + "---|",
    ]
    for row in sorted(rows, key=lambda r: list(NETWORKS).index(r["network"])):
        flops = network_flops(row["network"])
        floor = flops / (peak * 1e9)
        cells = []
        for key, _ in columns:
            seconds = row.get(key)
            cells.append("-" if not seconds else f"{seconds * 1e3:.1f} ({floor / seconds:.0%})")
        ceiling = f"{row['nchw16c'] / floor:.2f}x" if row.get("nchw16c") else "-"
        lines.append(f"| {row['network']} | {flops / 1e9:.2f} | {floor * 1e3:.1f} | " + " | ".join(cells)
                     + f" | {ceiling} |")
    out = Path(args.out) / "roofline.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
