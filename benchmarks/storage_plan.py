"""One solution built with each storage plan, whole runs rotated, split by the host's mode.

Relax's memory plan lets a tensor take the storage of one of another shape, which the two threads wrote
split otherwise; a storage per shape (``build(..., storage="by_shape")``,
:mod:`layoutopt.tvm.building.storage`)
keeps each storage's lines on the thread that writes them, at the price of a larger footprint. Which
pays depends on what taking over the other core's lines costs, and on this project's VMs that changes
from second to second (the host's fast and slow modes: ``real_models-notes.md``). So the builds run
one run each in turn, the order rotated, many times; each rotation is classed by the Relax-planned
build's run (fast: within 1.25x of its 10th percentile; slow: the rest), and each build's time over
the planned one's is paired rotation by rotation within each class, with its 95 % interval. A third
build, with no static plan and no early frees (each tensor its own storage for the whole run, from the
VM's allocator), bounds what keeping lines on their writer can give. A fourth, ``concats_copied``, has
Relax's plan with every concat a copying kernel (``build(..., in_place_concat=False)``): what the
concats done in place (their producers writing into the output) save. A fifth has Relax's plan and every
conv kernel that takes it in the other parallel loop order than the solution's (``rows_first``, or
``oc_first`` for a solution built rows first: ``tune_and_build(..., loop_order=)``).

Usage::

    python -m benchmarks.storage_plan MODEL.onnx --solution M.solution.json --input-shape 1,3,224,224
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import append_section

os.environ.setdefault("TVM_NUM_THREADS", "2")
RESULTS = Path(__file__).parent / "results"
#: a rotation is in the host's slow mode when the planned build's run took this much over its 10th percentile
SLOW = 1.25


def _flipped_loop_order(solution: Path) -> tuple[str, dict]:
    """The other loop order than the solution's convs have (rows first if none has it), and the
    solution's document with every conv that takes it in that order (``with_loop_order``)."""
    from layoutopt.tvm import load_solution
    from layoutopt.tvm.kernels import LOOP_ORDERS, with_loop_order

    document = load_solution(solution).to_json()
    targets = [layer for layer in document["layers"] if layer["kind"] == "target"]
    rows_first = any(layer["candidate"].get("order") == "rows" for layer in targets)
    flipped = LOOP_ORDERS[0] if rows_first else "rows"
    for layer in targets:
        layer["candidate"] = with_loop_order(layer["workload"], layer["candidate"], flipped)
    return flipped, document


def _builds(model: Path, solution: Path, shape: list[int]) -> dict[str, object]:
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline

    from layoutopt.tvm import build_from_solution, load_model

    mod = load_model(model, shape)
    executables = {plan: build_from_solution(mod, solution, storage=plan)[0]
                   for plan in ("relax", "by_shape")}
    executables["concats_copied"] = build_from_solution(mod, solution, storage="relax",
                                                        in_place_concat=False)[0]
    flipped, document = _flipped_loop_order(solution)
    executables[f"{flipped}_first"] = build_from_solution(mod, document, storage="relax")[0]
    original = pipeline.finalize_passes

    def unplanned(target):  # no static plan and no early frees: a storage per tensor for the run
        dropped = ("StaticPlanBlockMemory", "KillAfterLastUse")
        return [p for p in original(target) if p.info.name not in dropped]

    pipeline.finalize_passes = unplanned
    try:
        executables["per_tensor"] = build_from_solution(mod, solution)[0]
    finally:
        pipeline.finalize_passes = original
    return {name: tvm.relax.VirtualMachine(executable, tvm.cpu()) for name, executable in executables.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="the ONNX model the solution was tuned on")
    parser.add_argument("--solution", type=Path, required=True)
    parser.add_argument("--input-shape", default="1,3,224,224")
    parser.add_argument("--rotations", type=int, default=3000)
    parser.add_argument("--out", default=str(RESULTS / "storage_plan.md"),
                        help="append the section to this markdown file ('' : print only)")
    args = parser.parse_args(argv)
    import tvm

    from layoutopt.machine import stamp_line
    from layoutopt.tvm.evaluate.timing import Ratio

    shape = [int(d) for d in args.input_shape.split(",")]
    vms = _builds(args.model, args.solution, shape)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(shape).astype("float32"))
    reference = vms["relax"]["main"](x).numpy()
    for name, vm in vms.items():
        if not np.array_equal(vm["main"](x).numpy(), reference):
            raise SystemExit(f"the {name} build computes other numbers than the relax-planned one")
        for _ in range(20):  # warm up
            vm["main"](x)
    names = list(vms)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    load = os.getloadavg()[0]
    for i in range(args.rotations):
        for name in names[i % len(names):] + names[:i % len(names)]:
            started = time.perf_counter()
            vms[name]["main"](x)
            seconds[name].append(time.perf_counter() - started)
    planned = np.array(seconds["relax"])
    slow = planned > SLOW * np.percentile(planned, 10)
    lines = [f"## {args.model.stem}: storage plans in the host's two modes", "",
             f"*{stamp_line()}; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after*", "",
             f"`python -m benchmarks.storage_plan {args.model.name} --solution {args.solution.name} "
             f"--rotations {args.rotations}`: {args.rotations} rotations of one run of each build; slow "
             f"rotations: the relax-planned run over {SLOW}x its 10th percentile ({slow.mean():.0%} of "
             "them). "
             "Ratios: the relax-planned build's time over this build's, paired by rotation (above 1: this "
             "build is faster).", "",
             "| build | all: ms | relax / this | fast: ms | relax / this | slow: ms | relax / this |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        times = np.array(seconds[name])
        cells = []
        for mask in (np.ones_like(slow), ~slow, slow):
            if not mask.any():
                cells += ["-", "-"]
                continue
            ratio = Ratio.of(list(planned[mask]), list(times[mask]))
            cells += [f"{np.median(times[mask]) * 1e3:.2f}", ratio.text]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    append_section(lines, args.out or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
