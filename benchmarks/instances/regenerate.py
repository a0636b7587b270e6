"""Regenerate the real instances: the seed's five networks' layout problems, measured on this machine.

For each network (:mod:`benchmarks.networks`): the ONNX file (exported once, reused after) ->
:func:`layoutopt.tvm.load_model` -> :func:`layoutopt.tvm.build_problem` (default candidates: channel
blocks 4, 8, 16, 32, 64, plus C when C < 8; every kernel and layout transform built, checked against
numpy and timed once, through a resumable cost cache) -> :func:`layoutopt.io.write_json` as
``benchmarks/instances/<network>.json``. Costs are in seconds; ``"inf"`` marks a forbidden pair (a
block that does not divide the channels) or a kernel that failed; labels are the layout names.

The default cache is the one ``benchmarks/e2e.py`` fills, so kernels it measured are not measured
again. A network that fails is reported and the others go on; the exit status is 1 if any failed.

Usage::

    python -m benchmarks.instances.regenerate                          # all five networks
    python benchmarks/instances/regenerate.py --networks resnet50_v1,vgg19_bn --cache costs.jsonl
    python -m benchmarks.instances.regenerate --torch-python /work/benchvenv/bin/python   # export with torch
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")  # as benchmarks/e2e.py measures: 2 threads

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.networks import MODELS, NETWORKS, input_shape, load_network

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path.home() / ".cache" / "layoutopt" / "e2e.jsonl"
#: measured first: cheapest (probably cached by e2e.py) to most expensive from scratch
ORDER = ("resnet50_v1", "vgg19_bn", "ssd_resnet50_512", "inception_v3", "densenet201")
#: node attributes kept in the problem file (the rest, e.g. kernel candidate dicts, is TVM plumbing)
KEPT_ATTRS = ("kind", "op", "workload")


def round_costs(costs, digits: int):
    """``costs`` with every finite entry rounded to ``digits`` significant digits (``inf`` stays).

    Timings on this shared machine vary by several percent between runs, so digits beyond the
    fourth are noise; dropping them makes the files about 2.5x smaller. ``digits=0`` keeps them.
    """
    import numpy as np

    from layoutopt import Costs

    if not digits:
        return costs

    def rounded(values) -> np.ndarray:
        array = np.asarray(values, dtype=float)
        return np.array([float(f"{x:.{digits}g}") for x in array.ravel()]).reshape(array.shape)

    return Costs({node: rounded(vector) for node, vector in costs.nodes.items()},
                 {edge: rounded(matrix) for edge, matrix in costs.edges.items()})


def regenerate(network: str, args: argparse.Namespace) -> dict:
    """Measure one network and write its problem file; returns a summary row."""
    import networkx as nx

    import layoutopt
    from layoutopt import Problem
    from layoutopt.io import write_json
    from layoutopt.machine import stamp
    from layoutopt.tvm import build_problem

    started = time.perf_counter()
    mod = load_network(network, args.models, args.torch_python)
    loaded = time.perf_counter()
    graph, costs, meta = build_problem(mod, target=args.target, candidates=args.blocks, cache=args.cache,
                                       timeout=args.timeout, progress=True)
    costs = round_costs(costs, args.digits)
    problem = Problem.from_graph(graph, costs)
    light = nx.DiGraph()
    light.add_nodes_from((node.name, {k: getattr(node, k) for k in KEPT_ATTRS} | {"choices": node.labels})
                         for node in graph.layout_nodes())
    light.add_edges_from(graph.edges)
    env = stamp()
    metadata = {
        "network": network,
        "model": f"{network}.onnx (benchmarks/networks.py: seeded random weights, ONNX opset 17)",
        "input_shape": input_shape(network),
        "dtype": "float32",
        "units": "seconds",
        "significant_digits": args.digits or "all",
        # as the cost cache writes them: the target's JSON, and TVM's version with the schedules' and timing
        "target": meta.context.target_key,
        "tvm": meta.context.version_key,
        "date": env["date"],
        "machine": env["machine"],
        "threads": env["threads"],
        "layoutopt": layoutopt.__version__,
        "candidates": args.blocks or "default (blocks 4, 8, 16, 32, 64; C when C < 8)",
        "measurement": meta.stats.to_json(),
        "seconds": {"load": round(loaded - started, 1),
                    **{k: round(v, 1) for k, v in meta.seconds.items()}},
        "failures": [{"op": failure.workload.get("op"), "candidate": failure.candidate,
                      "error": str(failure.error)[:200]} for failure in meta.failures],
        "regenerate": "python -m benchmarks.instances.regenerate",
    }
    path = Path(args.out) / f"{network}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, light, costs, metadata=metadata)
    sizes = problem.sizes
    return {
        "network": network,
        "nodes": len(problem.nodes),
        "edges": len(problem.edges),
        "choices": f"{min(sizes)}-{max(sizes)} (mean {sum(sizes) / len(sizes):.1f})",
        "measured": meta.stats.measured,
        "cached": meta.stats.cached,
        "failed": len(meta.failures),
        "seconds": round(time.perf_counter() - started, 1),
        "file": str(path),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", default=",".join(ORDER),
                        help=f"comma-separated, from {', '.join(ORDER)}")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="cost cache (.jsonl), shared with e2e.py")
    parser.add_argument("--models", default=str(MODELS), help="where the ONNX files are kept")
    parser.add_argument("--out", default=str(HERE), help="where the problem files go")
    parser.add_argument("--target", default="llvm", help="TVM target (default: this CPU)")
    parser.add_argument("--blocks", default=None, help="channel blocks, e.g. 8,16,32 (default 4,8,16,32,64)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one kernel may take before it counts as failed")
    parser.add_argument("--digits", type=int, default=4,
                        help="significant digits kept per cost (default 4; 0: every digit measured)")
    parser.add_argument("--torch-python", default=sys.executable,
                        help="a Python with torch and torchvision, to export a missing ONNX file")
    args = parser.parse_args(argv)
    args.blocks = [int(b) for b in args.blocks.split(",")] if args.blocks else None
    networks = [n.strip() for n in args.networks.split(",") if n.strip()]
    unknown = [n for n in networks if n not in NETWORKS]
    if unknown:
        parser.error(f"unknown network(s) {unknown}; known: {', '.join(ORDER)}")

    rows, failed = [], []
    for network in networks:
        print(f"== {network}", flush=True)
        try:
            row = regenerate(network, args)
        except Exception as exc:  # one network failing must not lose the others
            traceback.print_exc()
            print(f"{network} FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed.append(network)
            continue
        rows.append(row)
        print("   " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "network"), flush=True)
    print(f"\nwrote {len(rows)} instance(s)" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    for row in rows:
        print(f"  {row['network']}: {row['nodes']} nodes, {row['edges']} edges, choices {row['choices']}, "
              f"{row['seconds']} s ({row['measured']} measured, {row['cached']} cached)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
