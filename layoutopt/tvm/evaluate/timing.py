"""Run, check and time built models: the measured side of every comparison.

Builds run where a :class:`~layoutopt.tvm.measure.runner.Runner` runs code: this machine by default, or a
device behind a TVM RPC tracker (:class:`~layoutopt.tvm.measure.runner.RPCRunner`: the build is exported,
uploaded, run and timed there; inputs go to the device, outputs come back).

Builds are compared only side by side: :func:`time_builds` times several builds in interleaved rounds
(one run of each per round), so that the interference episodes of a shared machine fall on all of
them alike, and keeps every sample so that a comparison can report its spread. :class:`Ratio` pairs
two builds' samples round by round, and :func:`compare_builds` times on where a comparison is not yet
settled.

Why single runs in many rounds, paired: on a cloud host each core's speed flips between levels every
second or so, independently per core, and a parallel kernel runs at its slowest thread's pace. A
build's median over minutes moves with those episodes, but two builds timed a fraction of a second
apart mostly share one: the per-round ratio holds still where the medians move
(``benchmarks/results/e2e-notes.md`` measured both).

Example:
    >>> from layoutopt.tvm import apply_layouts, build, models
    >>> mod = models.chain()
    >>> builds = {"tuned": build(apply_layouts(mod, {"conv1": "NCHW8c->NCHW16c", "conv2": "NCHW16c"})),
    ...           "nchw": build(mod)}
    >>> samples = time_builds(builds, random_inputs(mod), repeat=10)
    >>> {name: len(values) for name, values in samples.items()}
    {'tuned': 10, 'nchw': 10}
    >>> ratio = Ratio.of(samples["tuned"], samples["nchw"])   # below 1: the tuned build is faster
    >>> ratio.rounds, ratio.low <= ratio.median <= ratio.high
    (10, True)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm, one_blas_thread
from ..measure.runner import LocalRunner, Runner

__all__ = ["EPISODE", "Latency", "Noise", "Ratio", "compare_builds", "measure_latencies", "measure_latency",
           "random_inputs", "rotated", "run", "time_builds"]


def random_inputs(mod, seed: int = 0) -> list[np.ndarray]:
    """One seeded random array per parameter of ``mod["main"]`` (static shapes required).

    Example:
        >>> from layoutopt.tvm import models
        >>> (x,) = random_inputs(models.chain())
        >>> x.shape, x.dtype, bool(np.all(x == random_inputs(models.chain())[0]))   # seeded
        ((1, 8, 8, 8), dtype('float32'), True)
    """
    tvm = import_tvm()
    rng = np.random.default_rng(seed)
    arrays = []
    for param in mod["main"].params:
        ty = param.ty
        if not isinstance(ty, tvm.relax.TensorType) or ty.shape is None:
            raise ProblemError(f"input {param.name!r} is not a tensor with a known shape")
        try:
            shape = [int(s) for s in ty.shape]
        except (TypeError, ValueError):
            raise ProblemError(
                f"input {param.name!r} has a dynamic shape {ty.shape}; give a static one"
            ) from None
        arrays.append(rng.standard_normal(shape).astype(str(ty.dtype)))
    return arrays


def _virtual_machine(executable, runner: Runner | None):
    """A VM running ``executable`` where ``runner`` runs code, and that place's device."""
    module, device = (runner or LocalRunner()).load_build(executable)
    return import_tvm().relax.VirtualMachine(module, device), device


def _device_args(inputs: Sequence[np.ndarray], device) -> list:
    tvm = import_tvm()
    return [tvm.runtime.tensor(x, device) for x in inputs]


def _to_numpy(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [array for item in value for array in _to_numpy(item)]


def run(executable, inputs: Sequence[np.ndarray], runner: Runner | None = None) -> list[np.ndarray]:
    """Run ``main`` of a built module on numpy ``inputs`` (where ``runner`` runs code; default: this
    machine); the outputs as a flat list of arrays.

    Example:
        >>> from layoutopt.tvm import build, models
        >>> mod = models.chain()
        >>> (y,) = run(build(mod), random_inputs(mod))
        >>> y.shape, bool((y >= 0).all())       # the last op is a relu
        ((1, 16, 8, 8), True)
    """
    vm, device = _virtual_machine(executable, runner)
    vm.set_input("main", *_device_args(inputs, device))  # the stateful calls also work over RPC,
    vm.invoke_stateful("main")  # where a returned tuple would stay a reference to the device's
    return _to_numpy(vm.get_outputs("main"))


def measure_latency(
    executable, inputs: Sequence[np.ndarray], repeat: int = 5, min_repeat_ms: int = 200,
    runner: Runner | None = None,
) -> float:
    """Median end-to-end latency of ``main`` in seconds, timed by TVM's own ``time_evaluator`` (where
    ``runner`` runs code; default: this machine).

    Example:
        >>> from layoutopt.tvm import build, models
        >>> mod = models.chain()
        >>> 0 < measure_latency(build(mod), random_inputs(mod), repeat=3, min_repeat_ms=10) < 1   # seconds
        True
    """
    vm, device = _virtual_machine(executable, runner)
    args = _device_args(inputs, device)
    with one_blas_thread():
        vm["main"](*args)  # warm up (first-touch of the constants, thread pool start)
        timer = vm.time_evaluator("main", device, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        return float(np.median(timer(*args).results))


@dataclass(frozen=True)
class Latency:
    """A build's latency over interleaved timing rounds, in seconds: the median and the spread
    (25th and 75th percentiles) of its samples.

    Example:
        >>> Latency.of([0.010, 0.011, 0.013, 0.012]).median
        0.0115
    """

    median: float
    low: float
    high: float
    samples: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Latency:
        values = np.asarray(samples, dtype=float)
        low, median, high = np.percentile(values, [25, 50, 75])
        return cls(float(median), float(low), float(high), len(values))

    @property
    def spread(self) -> float:
        """The interquartile range relative to the median."""
        return (self.high - self.low) / self.median if self.median else 0.0


@dataclass(frozen=True)
class Ratio:
    """One build's latency over another's, paired round by round: the median of the per-round
    ratios and a 95 % confidence interval of that median (from order statistics: no assumption on
    the noise's shape). Above 1 the first build is slower.

    Example:
        >>> ratio = Ratio.of([1.1, 1.2, 1.3, 2.0, 1.2], [1.0, 1.0, 1.0, 1.0, 1.0])
        >>> ratio.median, ratio.settled
        (1.2, True)
        >>> Ratio.of([0.9, 1.1, 1.0], [1.0, 1.0, 1.0]).settled
        False
    """

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
        """The ratio of two builds' samples from the same rounds (the shorter list sets the count)."""
        rounds = min(len(numerator), len(denominator))
        if rounds == 0:
            raise ValueError("Ratio.of needs at least one round of each build")
        ratios = np.sort(np.asarray(numerator[:rounds], float) / np.asarray(denominator[:rounds], float))
        # ranks n/2 -/+ 1.96 sqrt(n)/2 bracket the median with 95 % probability (binomial, normal approx.)
        half_width = 0.98 * np.sqrt(rounds)
        low = max(1, round(rounds / 2 - half_width))
        high = min(rounds, round(1 + rounds / 2 + half_width))
        return cls(float(np.median(ratios)), float(ratios[low - 1]), float(ratios[high - 1]), rounds)

    @property
    def settled(self) -> bool:
        """Whether the interval excludes 1: one build is faster beyond what the noise explains."""
        return not self.low <= 1.0 <= self.high

    @property
    def text(self) -> str:
        """The median and its interval, as the results tables print them.

        Example:
            >>> Ratio.of([1.1, 1.2, 1.3, 2.0, 1.2], [1.0] * 5).text
            '1.200 [1.100-2.000]'
        """
        return f"{self.median:.3f} [{self.low:.3f}-{self.high:.3f}]"


def time_builds(executables: Mapping[str, Any], inputs: Sequence[np.ndarray], repeat: int = 30,
                min_repeat_ms: int = 1, runner: Runner | None = None,
                others: Mapping[str, Callable[[], float]] | None = None) -> dict[str, list[float]]:
    """Every latency sample (seconds) of each build, timed in ``repeat`` interleaved rounds where
    ``runner`` runs code (default: this machine); sample ``i`` of every build comes from round ``i``.
    ``others`` are contenders outside TVM timed in the same rounds: each a function that runs once and
    returns its seconds (another runtime's session, say).

    On a shared machine the load drifts; interleaving exposes every build to the same drift, which
    keeps their ratios honest where back-to-back timing would not, and the order rotates from round to
    round. A sample is one run (the mean of the runs of ``min_repeat_ms`` when one run is shorter), so
    that a round is as short as it can be and its builds share one episode of the machine's drift.

    Example:
        A build and a numpy computation timed in the same 5 rounds:

        >>> import time
        >>> from layoutopt.tvm import build, models
        >>> mod = models.chain()
        >>> def numpy_relu():
        ...     started = time.perf_counter()
        ...     np.maximum(random_inputs(mod)[0], 0)
        ...     return time.perf_counter() - started
        >>> samples = time_builds({"tvm": build(mod)}, random_inputs(mod), 5, others={"numpy": numpy_relu})
        >>> {name: len(values) for name, values in samples.items()}
        {'tvm': 5, 'numpy': 5}
    """
    timers: dict[str, Callable[[], float]] = {}
    args = None
    for name, executable in executables.items():
        vm, device = _virtual_machine(executable, runner)
        args = args if args is not None else _device_args(inputs, device)
        vm["main"](*args)  # warm up
        evaluator = vm.time_evaluator("main", device, number=1, repeat=1, min_repeat_ms=min_repeat_ms)
        timers[name] = functools.partial(_one_sample, evaluator, args)
    timers.update(others or {})
    samples: dict[str, list[float]] = {name: [] for name in timers}
    with one_blas_thread():
        for round_ in range(repeat):
            for name in rotated(list(timers), round_):
                samples[name].append(float(timers[name]()))
    return samples


def _one_sample(evaluator, args: Sequence[Any]) -> float:
    return evaluator(*args).results[0]


def compare_builds(executables: Mapping[str, Any], inputs: Sequence[np.ndarray], reference: str,
                   repeat: int = 30, runner: Runner | None = None,
                   ) -> tuple[dict[str, list[float]], dict[str, Ratio]]:
    """Time the builds side by side (:func:`time_builds`) and pair each with ``reference``: returns
    every sample and each other build's :class:`Ratio` to the reference (above 1: slower).

    When a pair is not settled (its interval contains 1), every build is timed again for ``repeat``
    more rounds: a close call gets twice the evidence, and a lone outlier round can no longer decide
    it. The ratio is then final, settled or not (a tie within the noise). Every build is timed in
    every round, so that each build's samples, its median and its ratios all come from the same rounds:
    a median taken from other rounds than its neighbour's is not a comparison (a ResNet-50 build once
    printed a median a third above a baseline's beside a ratio to it of 1.03x, because the extra
    rounds had been added to one side only).

    Example:
        >>> from layoutopt.tvm import apply_layouts, build, models
        >>> mod = models.chain()
        >>> builds = {"tuned": build(apply_layouts(mod, {"conv1": "NCHW8c->NCHW16c", "conv2": "NCHW16c"})),
        ...           "nchw": build(mod)}
        >>> samples, ratios = compare_builds(builds, random_inputs(mod), reference="tuned", repeat=10)
        >>> list(ratios), len(samples["tuned"]) in (10, 20)    # 20: not settled in 10 rounds
        (['nchw'], True)
    """
    if reference not in executables:
        raise ValueError(f"compare_builds: the reference {reference!r} is not among the builds "
                         f"{list(executables)}")
    samples = time_builds(executables, inputs, repeat, runner=runner)
    ratios = _ratios(samples, reference)
    if not all(ratio.settled for ratio in ratios.values()):
        more = time_builds(executables, inputs, repeat, runner=runner)
        samples = {name: values + more[name] for name, values in samples.items()}
        ratios = _ratios(samples, reference)
    return samples, ratios


def _ratios(samples: Mapping[str, Sequence[float]], reference: str) -> dict[str, Ratio]:
    return {name: Ratio.of(values, samples[reference])
            for name, values in samples.items() if name != reference}


#: a round in which every build ran this much slower than its median is a host episode (see :class:`Noise`)
EPISODE = 1.15


@dataclass(frozen=True)
class Noise:
    """How noisy a set of interleaved rounds was: ``spread``, the interquartile range over the median
    of a build's samples (the median over the builds), and ``episodes``, the rounds in which every
    build ran at least :data:`EPISODE` times its median (the host slowed down for all of them: a
    shared VM's episodes; paired ratios survive them, single medians do not).

    Example:
        >>> noise = Noise.of({"a": [1.0, 1.0, 1.3, 1.0], "b": [2.0, 2.1, 2.7, 2.0]})
        >>> noise.rounds, noise.episodes
        (4, 1)
    """

    rounds: int
    spread: float
    episodes: int

    @classmethod
    def of(cls, samples: Mapping[str, Sequence[float]]) -> Noise:
        if not samples:
            return cls(0, 0.0, 0)
        rounds = min(len(values) for values in samples.values())
        relative = np.array([np.asarray(values[:rounds], float) / np.median(values[:rounds])
                             for values in samples.values()])
        spread = float(np.median([Latency.of(values).spread for values in samples.values()]))
        return cls(rounds, spread, int(np.count_nonzero(np.all(relative >= EPISODE, axis=0))))

    def describe(self) -> str:
        """One line for a summary."""
        return (f"{self.rounds} interleaved rounds; a build's samples spread {self.spread:.0%} "
                f"(interquartile range / median); {self.episodes} round(s) ran {EPISODE - 1:.0%}+ slow "
                "for every build (host episodes: every latency and ratio printed comes from these same "
                "rounds)")


def rotated(names: Sequence[str], round_: int) -> list[str]:
    """The order of ``names`` in interleaved round ``round_``: each round starts one further on, so
    that nothing always runs first (after a pause, with the thread pool asleep) or right after the
    same neighbour.

    Example:
        >>> rotated(["a", "b", "c"], 1), rotated(["a", "b", "c"], 3)
        (['b', 'c', 'a'], ['a', 'b', 'c'])
    """
    shift = round_ % len(names) if names else 0
    return [*names[shift:], *names[:shift]]


def measure_latencies(executables: Mapping[str, Any], inputs: Sequence[np.ndarray], repeat: int = 30,
                      min_repeat_ms: int = 1, runner: Runner | None = None) -> dict[str, float]:
    """Median latency of each build (seconds), timed in interleaved rounds (see :func:`time_builds`).

    Example:
        >>> from layoutopt.tvm import build, models
        >>> mod = models.chain()
        >>> latencies = measure_latencies({"nchw": build(mod)}, random_inputs(mod), repeat=5)
        >>> list(latencies), 0 < latencies["nchw"] < 1     # seconds
        (['nchw'], True)
    """
    samples = time_builds(executables, inputs, repeat, min_repeat_ms, runner)
    return {name: Latency.of(values).median for name, values in samples.items()}
