"""The latency-memory Pareto front of a model: :func:`memory_front`.

The kernels and transforms are measured as for a tune (:mod:`~layoutopt.tvm.tune.stages`), each
choice's memory figured from the same workload and candidate records
(:func:`~layoutopt.tvm.measure.problem.memory_figures`: its weight as packed or transformed, padded
channels included, and the workspace its scheduled kernel allocates), and the front walked by
:func:`layoutopt.front.memory_front` with an exact method: from the unconstrained optimum down to
the smallest assignment. A few points are then built, each checked against the untouched model and
timed side by side with the others, and their figure set beside the constants the rewritten module
holds (:func:`~layoutopt.tvm.building.memory.estimate_memory`'s ``weights``).

What the figure covers, and how close it is: the resident weights are exact (they are the
constants the rewrite stores, bias and other per-channel constants aside, which no layout changes);
the workspace is each kernel's own, counted once per kernel though only one kernel runs at a time
(an upper bound of the peak workspace). Activations are not in it: Relax plans their storage, and
a layout changes them only by its padded channels and the transforms' copies.

Example:
    >>> from layoutopt.tvm import models
    >>> front = memory_front(models.chain((8, 8)), cache="costs.jsonl", points=4, build=2, repeat=3)
    >>> front.points[0].memory >= front.points[-1].memory     # fastest first, smallest last
    True
    >>> sorted(front.built) == [0, len(front.points) - 1]     # both ends built, checked and timed
    True
    >>> print(front.table())
    | point | budget MB | predicted ms | memory MB | proven | measured ms | module constants MB |
    ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...front import FrontPoint
from ...front import memory_front as walk_front
from .._tvm import resolve_target
from ..building.memory import estimate_memory
from ..evaluate.origin import ModelOrigin
from ..evaluate.timing import Latency, compare_builds
from ..measure.problem import memory_figures
from ..measure.runner import LocalRunner
from . import stages
from .result import TUNED, Variant, ms
from .stages import TuneOptions

__all__ = ["BuiltPoint", "MemoryFront", "describe_built", "memory_front"]


@dataclass(frozen=True)
class BuiltPoint:
    """A point of the front built, checked and timed: its ``variant`` (the checked build), its median
    ``measured`` latency (seconds, timed side by side with the other points built) and the bytes of
    the constants the rewritten module holds (``module_constants``)."""

    variant: Variant = field(repr=False)
    measured: float
    module_constants: int


@dataclass(frozen=True)
class MemoryFront:
    """The front (:attr:`points`, fastest first; each one's ``objective`` in seconds and ``memory`` in
    bytes) and the points built (:attr:`built`, by index into :attr:`points`); ``memory``, every
    choice's figure; ``target`` what it was measured for."""

    points: list[FrontPoint]
    built: dict[int, BuiltPoint]
    memory: Mapping = field(repr=False)
    target: str = ""

    def rows(self) -> list[dict[str, Any]]:
        """One dict per point: the table's columns as numbers (None where not built)."""
        rows = []
        for i, point in enumerate(self.points):
            built = self.built.get(i)
            rows.append({"point": i, "budget_mb": point.budget / 1e6 if math.isfinite(point.budget) else None,
                         "predicted_ms": point.objective * 1e3, "memory_mb": point.memory / 1e6,
                         "proven": point.proven,
                         "measured_ms": None if built is None else built.measured * 1e3,
                         "module_constants_mb": None if built is None else built.module_constants / 1e6})
        return rows

    def table(self) -> str:
        """The front as a markdown table; ``budget`` ``inf`` for the unconstrained optimum."""
        lines = ["| point | budget MB | predicted ms | memory MB | proven | measured ms | "
                 "module constants MB |", "|---|---|---|---|---|---|---|"]
        for row in self.rows():
            budget = "inf" if row["budget_mb"] is None else f"{row['budget_mb']:.6g}"
            measured = "" if row["measured_ms"] is None else f"{row['measured_ms']:.3f}"
            constants = "" if row["module_constants_mb"] is None else f"{row['module_constants_mb']:.6g}"
            lines.append(f"| {row['point']} | {budget} | {row['predicted_ms']:.3f} | "
                         f"{row['memory_mb']:.6g} | {'yes' if row['proven'] else 'no'} | {measured} | "
                         f"{constants} |")
        return "\n".join(lines)

    def plot(self, path: str | Path, title: str = "") -> Path:
        """Predicted latency against memory along the front (a step line), the built points' measured
        latency marked; a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        memory = [p.memory / 1e6 for p in self.points]
        predicted = [p.objective * 1e3 for p in self.points]
        ax.step(memory, predicted, where="post", color="tab:blue", alpha=0.6)
        ax.plot(memory, predicted, "o", color="tab:blue", label="front (predicted)")
        if self.built:
            ax.plot([self.points[i].memory / 1e6 for i in self.built],
                    [b.measured * 1e3 for b in self.built.values()], "s", color="tab:red",
                    label="built, checked (measured)")
        ax.set_xlabel("memory of the chosen kernels, MB (weights as packed + workspace)")
        ax.set_ylabel("latency, ms")
        ax.set_title(title or f"latency-memory front ({len(self.points)} points)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _built_indices(count: int, build: int) -> list[int]:
    """``build`` indices spread over ``count`` points, both ends first.

    Example:
        >>> _built_indices(10, 3), _built_indices(2, 3), _built_indices(5, 0)
        ([0, 4, 9], [0, 1], [])
    """
    wanted = min(build, count)
    if wanted <= 1:
        return [0] * wanted
    return sorted({round(i * (count - 1) / (wanted - 1)) for i in range(wanted)})


def memory_front(
    mod,
    target: Any = "llvm",
    cache: Any = None,
    runner: Any = None,
    *,
    candidates: Any = None,
    method: str = "auto",
    points: int = 12,
    build: int = 3,
    time_limit: float | None = None,
    check: bool = True,
    repeat: int = 10,
    fuse: bool = True,
    progress: Any = False,
    origin: ModelOrigin | None = None,
) -> MemoryFront:
    """Measure ``mod``, walk its latency-memory front, and build, check and time ``build`` of its points.

    Args:
        mod, target, cache, runner, candidates, time_limit, check, fuse, progress, origin: as
            :func:`~layoutopt.tvm.tune_and_build` takes them.
        method: the exact method each budget is solved with (``auto``).
        points: the most solves along the front (:func:`layoutopt.front.memory_front`).
        build: how many points to build, check and time: the fastest, the smallest, and the others
            spread between them (0: none).
        repeat: interleaved timing rounds of the builds.

    Returns:
        A :class:`MemoryFront`.
    """
    options = TuneOptions(method=method, cache=cache, candidates=candidates, time_limit=time_limit,
                          baselines=(), guard=False, check=check, repeat=repeat, fuse=fuse, profile=False,
                          calibrate=0, progress=progress)
    target = resolve_target(target)
    place = runner if runner is not None else LocalRunner()
    extracted = stages.extract(mod, target, place, options, origin)
    measured = stages.measure(extracted, options)
    options.say("figuring the memory of every kernel (weights as packed, workspace) ...")
    memory = memory_figures(extracted.graph, target)
    options.say(f"walking the latency-memory front (method {method!r}, at most {points} solves) ...")
    front = walk_front(extracted.graph, measured.costs, memory, method=method, points=points,
                       time_limit=time_limit)
    variants: dict[int, Variant] = {}
    for i in _built_indices(len(front), build):
        options.say(f"building and checking point {i} ({front[i].memory / 1e6:.3f} MB) ...")
        variants[i] = stages.build_variant(extracted, TUNED, f"front point {i}", front[i].assignment, options)
    built: dict[int, BuiltPoint] = {}
    if variants:
        options.say(f"timing the {len(variants)} builds side by side ...")
        executables = {str(i): v.executable for i, v in variants.items()}
        samples, _ = compare_builds(executables, extracted.inputs, next(iter(executables)), repeat,
                                    runner=place)
        built = {i: BuiltPoint(v, Latency.of(samples[str(i)]).median, estimate_memory(v.module).weights)
                 for i, v in variants.items()}
    return MemoryFront(front, built, memory, str(target))


def describe_built(front: MemoryFront) -> str:
    """A line per built point: its figure beside the module's constants and its latencies.

    Example:
        >>> describe_built(MemoryFront([], {}, {}))
        ''
    """
    lines = []
    for i, point in front.built.items():
        figure = front.points[i].memory
        lines.append(f"point {i}: figure {figure / 1e6:.6g} MB, module constants "
                     f"{point.module_constants / 1e6:.6g} MB; predicted {ms(front.points[i].objective)} ms, "
                     f"measured {ms(point.measured)} ms")
    return "\n".join(lines)
