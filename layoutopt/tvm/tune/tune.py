"""One call from a Relax model to a layout-tuned, verified, timed TVM build: :func:`tune_and_build`.

It is a chain of stages (:mod:`layoutopt.tvm.tune.stages`), each a function of the previous stage's record:
extract -> measure -> solve -> build (checked against the untouched model in float64) -> calibrate in
the network -> time side by side -> profile -> choose (the guard, :mod:`layoutopt.tvm.tune.guard`). What it
hands back is a :class:`~layoutopt.tvm.tune.result.TuneResult`.

Everything runs where the ``runner`` runs code (:mod:`layoutopt.tvm.measure.runner`): on this machine by
default; with an :class:`~layoutopt.tvm.measure.runner.RPCRunner`, the kernels and then the whole builds
(for the target given: the device's) are exported, uploaded, checked and timed on the device.

Example:
    >>> import numpy as np, tvm
    >>> from layoutopt.tvm import models, tune_and_build
    >>> result = tune_and_build(models.chain((8, 8)), target="llvm", cache="costs.jsonl")
    >>> print(result.summary())
    layoutopt      predicted ... ms   measured ... ms [...]   transforms ...
    best_fixed     predicted ...   layoutopt speed-up ...x [...]
    ...
    handed back: ...
    timing: ... interleaved rounds; ...
    check: outputs checked against the untouched model computed in float64 ...
    checked and timed on this machine, target {"kind":"llvm",...}
    >>> vm = tvm.relax.VirtualMachine(result.executable, tvm.cpu())
    >>> vm["main"](tvm.runtime.tensor(np.ones((1, 8, 8, 8), "float32"))).numpy().shape
    (1, 8, 8, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._tvm import resolve_target
from ..evaluate.origin import ModelOrigin
from ..measure.runner import LocalRunner
from ..measure.search import ROUNDS
from . import stages
from .result import TUNED, Layer, TuneResult, Variant, layer_table, ms
from .stages import TuneOptions

__all__ = ["TUNED", "Layer", "TuneOptions", "TuneResult", "Variant", "layer_table", "ms", "tune_and_build"]


def tune_and_build(
    mod,
    target: Any = "llvm",
    method: str = "auto",
    cache: str | Path | None = None,
    runner: Any = None,
    *,
    candidates: Any = None,
    time_limit: float | None = None,
    baselines: Sequence[str] = ("greedy",),
    guard: bool = True,
    check: bool = True,
    rtol: float = 1e-4,
    seed: int = 0,
    repeat: int = 30,
    fuse: bool = True,
    profile: bool = True,
    calibrate: int = 2,
    pin: Any = None,
    forbid: Any = None,
    progress: bool | Callable[[str], None] = False,
    storage: str = "relax",
    loop_order: str = "oc",
    origin: ModelOrigin | None = None,
    trials: int = 0,
    search_time: float | None = None,
    top_k: int = 1,
    search_rounds: int = ROUNDS,
    memory_budget: float | str | None = None,
) -> TuneResult:
    """Extract, measure, solve, apply and build ``mod``; verify the outputs and time the build: the chain
    of :mod:`layoutopt.tvm.tune.stages`.

    Args:
        mod: a Relax ``IRModule`` (e.g. from ``from_onnx`` / ``from_exported_program``, or
            :mod:`layoutopt.tvm.frontend.models`).
        target: CPU target (see :func:`~layoutopt.tvm.resolve_target`).
        method, cache, candidates, time_limit, baselines, guard, check, rtol, seed, repeat, fuse, profile,
            calibrate, pin, forbid, progress, storage, loop_order, trials, search_time, top_k,
            search_rounds: the options,
            one :class:`~layoutopt.tvm.tune.stages.TuneOptions` (see it for each one's meaning).
        origin: the model file ``mod`` was imported from
            (:func:`~layoutopt.tvm.frontend.load.load_with_origin`):
            the check also compares TVM's build of the untouched model with that file run by a runtime
            independent of TVM (ONNX Runtime, torch eager), once, before measuring, and refuses a
            mismatch (:class:`~layoutopt.tvm.evaluate.origin.ImportMismatch`). None: TVM's import is not
            checked.
        memory_budget: the most memory the chosen kernels may hold (bytes, or a size such as
            ``"40MB"``: :func:`~layoutopt.problem.parse_bytes`), see
            :class:`~layoutopt.tvm.tune.stages.TuneOptions`; None: no budget.

    Returns:
        A :class:`TuneResult`.

    Example:
        Pins and forbids, direct kernels only and no in-network calibration (a quicker tune):

        >>> from layoutopt.tvm import models
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", calibrate=0,
        ...                         candidates={"algorithms": ["direct"]},
        ...                         pin={"conv1": "NCHW8c->NCHW8c"}, forbid=["conv2=NCHW->NCHW"])
        >>> result.solution.labels["conv1"], result.solution.labels["conv2"] != "NCHW->NCHW"
        ('NCHW8c->NCHW8c', True)
        >>> result.tuned.measured > 0, result.speedup("best_fixed") > 0   # seconds; b*'s latency over it
        (True, True)
        >>> result.chosen in [variant.name for variant in result.variants()]
        True
    """
    options = TuneOptions(method=method, cache=cache, candidates=candidates, time_limit=time_limit,
                          baselines=baselines, guard=guard, check=check, rtol=rtol, seed=seed,
                          repeat=repeat, fuse=fuse, profile=profile, calibrate=calibrate, pin=pin,
                          forbid=forbid, progress=progress, storage=storage, loop_order=loop_order,
                          trials=trials, search_time=search_time, top_k=top_k, search_rounds=search_rounds,
                          memory_budget=memory_budget)  # every option checked now, before the extraction
    target = resolve_target(target)
    place = runner if runner is not None else LocalRunner()
    with closing(place):  # it may hold a device session and the builds it loaded
        if (options.calibrate or options.profile) and not place.profiles_builds:
            options.say(f"not calibrated nor profiled: the calls of a running build cannot be timed one by "
                        f"one on {place.describe()}")
            options = replace(options, calibrate=0, profile=False)
        extracted = stages.search(stages.extract(mod, target, place, options, origin), options)
        solved = stages.solve(stages.measure(extracted, options), options)
        built = stages.calibrate(stages.build_variants(solved, options), options)
        built = stages.with_loop_order_rival(stages.with_storage_rival(built, options), options)
        timed = stages.profile(stages.time_variants(built, options), options)
        return stages.choose(timed, options)
