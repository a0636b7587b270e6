"""Does a change keep layoutopt's behaviour? Two revisions, one shared cost cache, the same answers.

Runs two git revisions of layoutopt (each ``git archive``-d into a temporary tree and run in a fresh
process with it first on ``sys.path``) on the embedded model
(:func:`layoutopt.tvm.frontend.models.default_model`)
and ResNet-18 (:func:`layoutopt.tvm.frontend.models.resnet`), through the stages ``tune_and_build`` chains
(:mod:`layoutopt.tvm.tune.stages`: extract, measure, solve with ``dp``) and
:func:`layoutopt.tvm.build_problem`,
each run reading a copy of ONE cost cache filled beforehand (by the first revision, once: a rerun with
the same cache measures nothing). Nothing is timed in the comparison, so both revisions must find:

- the same cost-cache keys requested (the keys the measurer looked up, in order);
- the same costs (every node vector and edge matrix, bit for bit), from the stages and ``build_problem``;
- the same solution labels;
- the same rewritten module (the TVMScript of the solution applied to the prepared module).

Each revision also measures a few kernels and transforms into an empty cache: the records it writes
must have the same keys and fields (their times differ, as any two timings do).

Writes ``benchmarks/results/compare_revisions.md`` (stamped with :func:`layoutopt.machine.stamp`).

Usage::

    python -m benchmarks.compare_revisions e285486 HEAD   # cache ~/.cache/layoutopt/compare_revisions.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from layoutopt.machine import stamp_line

REPOSITORY = Path(__file__).resolve().parent.parent
RESULTS = REPOSITORY / "benchmarks" / "results"
DEFAULT_CACHE = Path.home() / ".cache" / "layoutopt" / "compare_revisions.jsonl"

#: the networks compared, and their candidates (channel blocks 8 and 16, every algorithm: a few hundred
#: kernels each, so that filling the cache takes minutes, not an hour)
NETWORKS = {"default_model": "models.default_model()", "resnet18": "models.resnet(depth=18)"}
CANDIDATES = {"blocks": [8, 16]}
#: kernels and transforms each revision measures into an empty cache (their records' fields compared)
FRESH = 4

#: what one revision computes, in a fresh process with that revision's layoutopt first on sys.path
_RUN = """
import json, sys
if __name__ == "__main__":
    import numpy as np
    import layoutopt
    from layoutopt.tvm import build_problem, models, resolve_target, stages
    from layoutopt.tvm.building.apply import apply_assignment
    from layoutopt.tvm.measure.cache import CostCache, task_key
    from layoutopt.tvm.measure.measure import Measurer
    from layoutopt.tvm.measure.problem import kernel_tasks, transform_tasks
    from layoutopt.tvm.measure.runner import LocalRunner

    class Asked(dict):  # the cache's records, remembering every key looked up
        asked = []

        def get(self, key, default=None):
            self.asked.append(key)
            return super().get(key, default)

    def exact(values):
        return [repr(float(value)) for value in np.asarray(values).ravel()]

    def costs_json(graph, costs):
        return {"nodes": {str(n): exact(costs.nodes[n]) for n in graph},
                "edges": {f"{u}->{v}": exact(costs.edges[u, v]) for u, v in graph.edges}}

    cache_path, fresh_path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    candidates, networks = json.loads(sys.argv[4]), json.loads(sys.argv[5])
    out = {"layoutopt": layoutopt.__file__, "networks": {}}
    for number, (name, expression) in enumerate(networks.items()):
        cache = CostCache(cache_path)
        cache._records = Asked(cache._records)
        Asked.asked = []
        options = stages.TuneOptions(method="dp", cache=cache, candidates=candidates, check=False,
                                     guard=False, baselines=(), progress=False)
        extracted = stages.extract(eval(expression), resolve_target("llvm"), LocalRunner(), options)
        measured = stages.measure(extracted, options)
        solved = stages.solve(measured, options)
        asked, graph = list(Asked.asked), extracted.graph
        _, costs, _ = build_problem(eval(expression), candidates=candidates, cache=cache, progress=False)
        module = apply_assignment(graph.mod, graph, solved.solution.assignment)
        meta = measured.meta  # a dict before it was a record (MeasureMeta)
        stats = meta["stats"] if isinstance(meta, dict) else meta.stats.to_json()
        out["networks"][name] = {
            "asked": asked, "costs": costs_json(graph, measured.costs),
            "build_problem_costs": costs_json(graph, costs),
            "labels": {str(node): label for node, label in solved.solution.labels.items()},
            "objective": repr(solved.solution.objective), "script": module.script(),
            "measured": stats["measured"],
        }
        if number == 0:
            tasks = kernel_tasks(graph)[:count] + transform_tasks(graph)[:count]
            with Measurer(cache=fresh_path, progress=False) as measurer:
                records = [result.record for result in measurer.measure(tasks)]
            out["fresh"] = {"fields": sorted({tuple(sorted(record)) for record in records}),
                            "keys": sorted(CostCache.record_key(record) for record in CostCache(fresh_path))}
    print(json.dumps(out))
"""


def run_revision(revision: str, cache: Path, fresh: Path) -> dict:
    """One revision's answers, computed in a fresh process from ``git archive REVISION``."""
    with tempfile.TemporaryDirectory(prefix=f"layoutopt-{revision}-") as tree:
        archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", revision, "layoutopt"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
        arguments = [str(cache), str(fresh), str(FRESH), json.dumps(CANDIDATES), json.dumps(NETWORKS)]
        done = subprocess.run([sys.executable, "-c", _RUN, *arguments], capture_output=True, text=True,
                              env=env, cwd=tree)
        if done.returncode:
            raise SystemExit(f"revision {revision} failed:\n{done.stderr[-4000:]}")
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        assert answer["layoutopt"].startswith(tree), answer["layoutopt"]  # that revision ran, not this tree
    return answer


def resolve(revision: str) -> str:
    return subprocess.run(["git", "-C", str(REPOSITORY), "rev-parse", "--short", revision],
                          capture_output=True, text=True, check=True).stdout.strip()


def compare(old: dict, new: dict) -> list[tuple[str, str, bool, str]]:
    """Per network and check: (network, what, identical, detail)."""
    rows = []
    for name in NETWORKS:
        a, b = old["networks"][name], new["networks"][name]
        script = hashlib.sha256(a["script"].encode()).hexdigest()[:12]
        nodes = len(a["costs"]["nodes"])
        entries = sum(len(values) for part in a["costs"].values() for values in part.values())
        rows += [
            (name, "cache keys requested (nothing measured)", a["asked"] == b["asked"] and a["measured"] ==
             b["measured"] == 0,
             f"{len(a['asked'])} look-ups, {len(set(a['asked']))} distinct; measured now: {a['measured']} / "
             f"{b['measured']}"),
            (name, "costs (stages)", a["costs"] == b["costs"], f"{nodes} nodes, {entries} cost entries"),
            (name, "costs (build_problem)",
             a["build_problem_costs"] == a["costs"] and b["build_problem_costs"] == b["costs"],
             "the same as the stages' in both"),
            (name, "solution labels (dp)", a["labels"] == b["labels"] and a["objective"] == b["objective"],
             f"objective {float(a['objective']) * 1e3:.4f} ms"),
            (name, "rewritten module (TVMScript)", a["script"] == b["script"],
             f"{len(a['script'])} characters, sha256 {script}"),
        ]
    rows.append(("fresh measurement", "record fields and keys", old["fresh"] == new["fresh"],
                 f"{len(old['fresh']['keys'])} records; fields {', '.join(old['fresh']['fields'][0])}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the revision before (git)")
    parser.add_argument("new", help="the revision after (git)")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="the shared cost cache, filled once")
    parser.add_argument("--output", default=str(RESULTS / "compare_revisions.md"))
    args = parser.parse_args(argv)
    old, new = resolve(args.old), resolve(args.new)
    cache = Path(args.cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="layoutopt-compare-") as work:
        print(f"filling the shared cost cache {cache} with {old} (a rerun measures nothing) ...", flush=True)
        run_revision(old, cache, Path(work) / "fill-fresh.jsonl")
        filled = time.perf_counter() - started
        records = len(cache.read_bytes().splitlines())
        answers = {}
        for revision in (old, new):  # each on its own copy: neither sees what the other might add
            copy = Path(work) / f"{revision}.jsonl"
            shutil.copyfile(cache, copy)
            answers[revision] = run_revision(revision, copy, Path(work) / f"{revision}-fresh.jsonl")
    rows = compare(answers[old], answers[new])
    identical = all(same for _, _, same, _ in rows)
    lines = [
        f"# Behaviour of `{old}` and `{new}` compared (`benchmarks/compare_revisions.py`)",
        "",
        f"*{stamp_line()}*",
        "",
        f"Both revisions ran on copies of one cost cache ({records} records), filled beforehand by `{old}` "
        f"(that pass took {filled:.0f} s in this run, measuring only what the cache lacked); candidates "
        f"{json.dumps(CANDIDATES)}; extract, measure and solve (`dp`) "
        f"through `layoutopt.tvm.stages`, then `build_problem`; each revision also measured {FRESH} kernels "
        "and transforms into an empty cache. Total "
        f"{time.perf_counter() - started:.0f} s.",
        "",
        "| network | what | identical | detail |",
        "|---|---|---|---|",
        *[f"| {name} | {what} | {'yes' if same else '**NO**'} | {detail} |"
          for name, what, same, detail in rows],
        "",
        f"**{'Identical' if identical else 'DIFFERENT'}**: `{new}` "
        f"{'keeps' if identical else 'changes'} the behaviour of `{old}` on these checks.",
        "",
    ]
    report = "\n".join(lines)
    Path(args.output).write_text(report)
    print(report)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
