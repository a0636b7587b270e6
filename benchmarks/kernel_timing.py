"""One kernel compiled alone and timed as the measurer times it: shared by the kernel tables
(``schedule_space``, ``shufflenet``, ``epilogues``).

Example (not run: it compiles and times)::

    kernels = {"heuristic": compiled_kernel(workload, candidate, target)}
    seconds = cold_rounds(kernels, rounds=15)["heuristic"]
"""

from __future__ import annotations

import os


def compiled_kernel(workload: dict, candidate: dict, target):
    """The candidate's kernel: ``(module, name, args)``, checked against numpy (1e-4)."""
    import tvm

    from layoutopt.tvm.kernels import build_kernel, check_kernel

    kernel = build_kernel(workload, candidate, target)
    module = tvm.compile(kernel.module, target=target).mod
    args = kernel.device_args(kernel.logical_inputs(), tvm.cpu())
    error = check_kernel(kernel, module, args=args)
    if not error < 1e-4:
        raise AssertionError(f"kernel {candidate} of {workload} is off numpy by {error:.3g}")
    return module, kernel.name, args


def cold_rounds(kernels: dict, rounds: int, between=None) -> dict:
    """Each kernel of ``kernels`` (key -> :func:`compiled_kernel`'s ``(module, name, args)``) timed as
    the measurer times it (cold: weights and output flushed, the median of 10 runs a round), in
    ``rounds`` interleaved rounds, so that interference on a shared machine hits all alike: key -> one
    time per round. ``between(round_index)`` runs after each round (another engine's runs)."""
    import tvm

    from layoutopt.tvm import LocalRunner

    runner = LocalRunner(repeat=1, cold_runs=10)
    samples: dict = {key: [] for key in kernels}
    for round_index in range(rounds):
        for key, (module, name, args) in kernels.items():
            samples[key] += runner.time(module, tvm.cpu(), name, args)
        if between is not None:
            between(round_index)
    return samples


def produced_by(command: str, rounds: int, loads: tuple[float, float]) -> str:
    """The first sentence of a kernel table's preamble: what wrote it, and how it was timed."""
    return (f"Produced by `{command}` ({rounds} interleaved rounds, {os.environ['TVM_NUM_THREADS']} threads; "
            f"load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end).")
