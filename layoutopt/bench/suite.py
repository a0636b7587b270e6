"""Which instances a run solves: :class:`InstanceSpec`, the synthetic suite, problem-file suites.

An instance is described, not held: a generator call (see :mod:`layoutopt.generators`) or a
JSON problem file (see :mod:`layoutopt.io`), so a worker process rebuilds it from a few bytes.
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SIZES", "InstanceSpec", "bundled_instances", "file_suite", "synthetic_suite"]

#: sizes of the standard synthetic suite
SIZES = (20, 50, 100, 200, 500, 1000, 2000)


@dataclass(frozen=True)
class InstanceSpec:
    """How to build one instance: a generator call, or a JSON problem file (``path``).

    Example:
        >>> graph, costs = InstanceSpec("resnet50", family="resnet50").load()
        >>> graph.number_of_nodes()
        71
    """

    name: str
    family: str | None = None
    nodes: int | None = None
    seed: int = 0
    regime: str = "normal"
    max_choices: int = 16
    path: str | None = None
    group: str = "synthetic"

    def load(self):
        """``(graph, costs)`` of the instance."""
        if self.path is not None:
            from ..io import read_json

            return read_json(self.path)
        from ..generators import generate

        return generate(
            self.family, nodes=self.nodes, max_choices=self.max_choices, seed=self.seed, regime=self.regime
        )


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
