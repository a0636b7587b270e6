"""Do in-network profiles and interleaved timings reproduce themselves? A diagnostic for the
calibration's "predicted within 5 % of the in-network profile" target.

Tunes ResNet-50 (the ONNX file ``benchmarks/e2e.py`` exports; its cost cache warm) without
calibration, then, for the tuned build and the baselines:

1. profiles all builds together in interleaved rounds (as calibration and the final profile do),
   three times back to back, and sums each build's calls;
2. profiles each build alone;
3. times all builds in interleaved rounds (as the guard does), the composite ``winograd_fixed``
   included: it *is* one of its members, so the two lines time the same executable.

Writes ``benchmarks/results/profile_repro.md``, stamped.

Usage::

    python -m benchmarks.profile_repro --model ~/.cache/layoutopt/models/resnet50_v1.onnx \\
        --cache ~/.cache/layoutopt/e2e.jsonl
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    import numpy as np

    from layoutopt.machine import stamp
    from layoutopt.tvm import load_model, tune_and_build
    from layoutopt.tvm.evaluate.profile import profile_builds
    from layoutopt.tvm.evaluate.timing import random_inputs, time_builds

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(Path.home() / ".cache/layoutopt/models/resnet50_v1.onnx"))
    parser.add_argument("--cache", default=str(Path.home() / ".cache/layoutopt/e2e.jsonl"))
    parser.add_argument("--blocks", default="8,16,32")
    parser.add_argument("--repeat", type=int, default=30, help="interleaved timing rounds")
    args = parser.parse_args()

    mod = load_model(args.model, input_shape=[1, 3, 224, 224])
    blocks = [int(b) for b in args.blocks.split(",")]
    result = tune_and_build(mod, cache=args.cache, candidates={"blocks": blocks}, baselines=("greedy",),
                            calibrate=0, profile=False, repeat=args.repeat)
    builds = {v.name: v.executable for v in result.variants()
              if v.executable is not None and v.name != "best_fixed"}
    inputs = random_inputs(result.module)
    names = list(builds)

    def total_ms(calls) -> float:
        return sum(call.seconds for call in calls) * 1e3

    rows = []
    for attempt in range(3):
        together = profile_builds(builds, inputs)
        rows.append((f"profiled together, #{attempt + 1}", [total_ms(together[n]) for n in names]))
    rows.append(("profiled alone", [total_ms(profile_builds({n: builds[n]}, inputs)[n]) for n in names]))
    samples = time_builds(builds, inputs, args.repeat)
    rows.append((f"latency, {args.repeat} interleaved rounds (median)",
                 [float(np.median(samples[n])) * 1e3 for n in names]))
    info = stamp()
    member = result.baselines["winograd_fixed"].description.rsplit(": ", 1)[-1]
    lines = [
        "# Do profiles and timings reproduce themselves? (`benchmarks/profile_repro.py`)",
        "",
        f"*{info['date']}; {info['machine']}; {info['threads']}; {info['versions']}*",
        "",
        f"ResNet-50 ({args.model}), kernels from `{args.cache}`, blocks {args.blocks}, every algorithm. Each",
        "cell: the sum of a build's calls timed in the network (profile rows), or its latency (ms).",
        f"`winograd_fixed` is the same executable as `{member}`: the two columns measure one build twice.",
        "",
        "| what | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
        *[f"| {label} | " + " | ".join(f"{v:.1f}" for v in values) + " |" for label, values in rows],
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "profile_repro.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
