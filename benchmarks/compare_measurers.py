"""Do two revisions of layoutopt measure the same costs? Old and new measurer, alternated, one machine.

Measures the same seeded sample of ResNet-50's kernels and transforms (empty in-memory cache) with
layoutopt at git revision REV and with this code, alternately (old, new, old, new...), each run in a
fresh process, and prints the new/old cost ratios per pair of runs and of the best of all runs. A
cost model change shows as a median away from 1; load from other jobs shows as a wide spread.

Usage::

    python -m benchmarks.compare_measurers cf0a4ba --sample 80 --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from layoutopt.machine import stamp_line

REPOSITORY = Path(__file__).resolve().parent.parent

_RUN = """
import json, os, random, sys
if __name__ == "__main__":
    import layoutopt
    from layoutopt.tvm import extract_layout_graph, models, prepare
    from layoutopt.tvm.measure.cache import task_key
    from layoutopt.tvm.measure.measure import Measurer
    from layoutopt.tvm.measure.problem import kernel_tasks, transform_tasks
    graph = extract_layout_graph(prepare(models.resnet(depth=50)), None, prepared=True)
    tasks = list({task_key(w, c): (w, c) for w, c in kernel_tasks(graph) + transform_tasks(graph)}.values())
    sample = random.Random(int(sys.argv[2])).sample(tasks, int(sys.argv[1]))
    load = os.getloadavg()[0]
    with Measurer(progress=False) as measurer:
        costs = [r.cost for r in measurer.measure(sample)]
    print(json.dumps({"layoutopt": layoutopt.__file__, "costs": costs, "load": [load, os.getloadavg()[0]]}))
"""


def measure(tree: str | None, sample: int, seed: int) -> dict:
    """One run in a fresh process, with the layoutopt in ``tree`` (None: this one)."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join([tree, env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _RUN, str(sample), str(seed)], capture_output=True,
                          text=True, check=True, env=env, cwd=tree or REPOSITORY)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the older revision (git)")
    parser.add_argument("--sample", type=int, default=80, help="kernels and transforms measured")
    parser.add_argument("--pairs", type=int, default=2, help="old/new runs alternated")
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="layoutopt-old-") as tree:
        archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", args.revision, "layoutopt"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        runs = [(measure(tree, args.sample, args.seed), measure(None, args.sample, args.seed))
                for _ in range(args.pairs)]
        assert all(old["layoutopt"].startswith(tree) and not new["layoutopt"].startswith(tree)
                   for old, new in runs)
    print(f"{stamp_line()}; {args.sample} kernels and transforms of ResNet-50 (seed {args.seed}), "
          f"layoutopt at `{args.revision}` (old) and this code (new), alternated, each in a fresh process")
    print()
    print("| runs | load average (start, end) old / new | new / old cost: median | quartiles |")
    print("|---|---|---|---|")
    for i, (old, new) in enumerate(runs, 1):
        ratio = np.array(new["costs"]) / np.array(old["costs"])
        low, high = np.percentile(ratio, [25, 75])
        print(f"| pair {i} | {old['load'][0]:.1f}, {old['load'][1]:.1f} / {new['load'][0]:.1f}, "
              f"{new['load'][1]:.1f} | {np.median(ratio):.3f} | {low:.3f}-{high:.3f} |")
    best_old = np.min([old["costs"] for old, _ in runs], axis=0)
    best_new = np.min([new["costs"] for _, new in runs], axis=0)
    ratio = best_new / best_old
    low, high = np.percentile(ratio, [25, 75])
    print(f"| best of each | - | {np.median(ratio):.3f} | {low:.3f}-{high:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
