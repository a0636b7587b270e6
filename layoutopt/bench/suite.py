"""Which instances a run solves: :class:`InstanceSpec`, the synthetic suite, problem-file suites.

An instance is described, not held: a generator call (see :mod:`layoutopt.generators`) or a
JSON problem file (see :mod:`layoutopt.io`), so a worker process rebuilds it from a few bytes.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUDGET_SHARES", "SIZES", "InstanceSpec", "budget_suite", "bundled_instances", "file_suite",
           "synthetic_suite"]

#: sizes of the standard synthetic suite
SIZES = (20, 50, 100, 200, 500, 1000, 2000)
#: where the budgets of the constrained suite lie, from the smallest assignment's memory (0) to the
#: unconstrained optimum's (1): budgets that bind
BUDGET_SHARES = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class InstanceSpec:
    """How to build one instance: a generator call, or a JSON problem file (``path``); with a
    ``budget_share``, under a memory budget (:func:`layoutopt.generators.constrain_memory`: synthetic
    figures anti-correlated with cost, the budget that share of the way from the smallest assignment's
    memory to the unconstrained optimum's).

    Example:
        >>> graph, costs = InstanceSpec("resnet50", family="resnet50").load()
        >>> graph.number_of_nodes()
        71
        >>> graph, costs = InstanceSpec("resnet50_mem50", family="resnet50", budget_share=0.5).load()
        >>> graph.graph["memory_budget"]
        232903898.0
    """

    name: str
    family: str | None = None
    nodes: int | None = None
    seed: int = 0
    regime: str = "normal"
    max_choices: int = 16
    path: str | None = None
    group: str = "synthetic"
    budget_share: float | None = None

    def load(self):
        """``(graph, costs)`` of the instance (the memory figures and budget, if any, in the graph)."""
        if self.path is not None:
            from ..io import read_json

            graph, costs = read_json(self.path)
        else:
            from ..generators import generate

            graph, costs = generate(self.family, nodes=self.nodes, max_choices=self.max_choices,
                                    seed=self.seed, regime=self.regime)
        if self.budget_share is not None:
            from ..generators import constrain_memory

            constrain_memory(graph, costs, self.budget_share, self.seed)
        return graph, costs

    def under_budget(self, share: float) -> InstanceSpec:
        """This instance under a memory budget at ``share`` (named ``NAME_memPERCENT``)."""
        return dataclasses.replace(self, name=f"{self.name}_mem{round(100 * share)}", budget_share=share,
                                   group=f"{self.group}, budget")


def synthetic_suite(
    sizes: Iterable[int] = SIZES,
    families: Iterable[str] = ("resnet", "inception", "densenet", "ssd", "random"),
    regimes: Iterable[str] = ("normal",),
    seeds: Iterable[int] = (0,),
    presets: bool = True,
) -> list[InstanceSpec]:
    """The synthetic suite: the named presets (real networks' sizes), then every family x size.

    Example:
        >>> [s.name for s in synthetic_suite(sizes=[50], families=["ssd"], regimes=["normal", "hard"])][:5]
        ['resnet50', 'inception', 'densenet121', 'ssd', 'ssd_50']
    """
    from ..generators import generate  # noqa: F401  (fail early if the generators are broken)

    specs = []
    regimes, seeds = list(regimes), list(seeds)
    for regime in regimes:
        prefix = "" if regime == "normal" else f"{regime}_"
        for seed in seeds:
            suffix = "" if len(seeds) == 1 else f"_s{seed}"
            if presets:
                for preset in ("resnet50", "inception", "densenet121", "ssd"):
                    specs.append(
                        InstanceSpec(
                            f"{prefix}{preset}{suffix}",
                            family=preset,
                            seed=seed,
                            regime=regime,
                            group="preset",
                        )
                    )
            for family in families:
                for n in sizes:
                    specs.append(
                        InstanceSpec(
                            f"{prefix}{family}_{n}{suffix}", family=family, nodes=n, seed=seed, regime=regime
                        )
                    )
    return specs


def budget_suite(specs: Iterable[InstanceSpec],
                 shares: Iterable[float] = BUDGET_SHARES) -> list[InstanceSpec]:
    """Every instance of ``specs`` under a memory budget at each of ``shares`` (see :class:`InstanceSpec`).

    Example:
        >>> [s.name for s in budget_suite(synthetic_suite(sizes=[], families=[])[:1], [0.25, 0.5])]
        ['resnet50_mem25', 'resnet50_mem50']
    """
    shares = list(shares)
    return [spec.under_budget(share) for spec in specs for share in shares]


def file_suite(directory: str | os.PathLike, group: str = "real") -> list[InstanceSpec]:
    """Every ``*.json`` problem file of ``directory`` (sorted by name), or [] if there is none.

    Example:
        >>> file_suite("/nonexistent")
        []
    """
    folder = Path(directory)
    if not folder.is_dir():
        return []
    return [InstanceSpec(p.stem, path=str(p), group=group) for p in sorted(folder.glob("*.json"))]


def bundled_instances() -> dict[str, Path]:
    """The problem files shipped in ``layoutopt/data`` (name -> path).

    They are generator presets written with :func:`layoutopt.io.write_json`, e.g.
    ``write_json("layoutopt/data/resnet50.json", *generate("resnet50"))``.

    Example:
        >>> sorted(bundled_instances())
        ['resnet50', 'ssd']
    """
    folder = importlib.resources.files("layoutopt") / "data"
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".json")}
