"""A report of a :func:`~layoutopt.tvm.tune_and_build` run: markdown tables plus a PNG plot.

The plot shows, per layer (problem node, in graph order), the chosen kernel's time beside the
fastest kernel of that layer, with the layout-transform time paid on its inputs stacked on top and
marked where transforms were placed.

Example:
    >>> from layoutopt.tvm import models, tune_and_build
    >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False,
    ...                         baselines=("nchw16c",), calibrate=0, check=False)   # quick: one baseline
    >>> paths = write_report(result, "report")
    >>> sorted(str(path) for path in paths.values())
    ['report/report.md', 'report/report.png']
    >>> print(paths["markdown"].read_text())
    # layoutopt tune report
    ...
    | variant | how layouts are chosen | predicted (ms) | measured (ms) | transforms | MB moved | ...
    |---|---|---|---|---|---|---|---|
    | layoutopt | layoutopt, method 'auto' | ... | 1.00x |
    ...
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...machine import stamp_line
from ...problem import Problem
from .result import TUNED, Layer, TuneResult, layer_table, ms

__all__ = ["breakdown_markdown", "handed_back_layers", "layer_markdown", "summary_markdown", "write_report"]


def summary_markdown(result: TuneResult) -> str:
    """The variants table: predicted and measured latency, transforms, bytes moved per inference (what
    its calls read and write: :func:`~layoutopt.tvm.building.memory.bytes_moved`), error, speed-up of
    layoutopt."""
    lines = [
        "| variant | how layouts are chosen | predicted (ms) | measured (ms) | transforms | MB moved "
        "| max rel. error | layoutopt speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant in [result.tuned, *result.baselines.values()]:
        speedup = result.speedup(variant.name) if variant is not result.tuned else 1.0
        error = "-" if variant.max_relative_error is None else f"{variant.max_relative_error:.1e}"
        moved = "-" if variant.bytes_moved is None else f"{variant.bytes_moved / 1e6:.2f}"
        lines.append(
            f"| {variant.name} | {variant.description} | {ms(variant.predicted)} | {ms(variant.measured)} "
            f"| {variant.transforms if variant.transforms is not None else '-'} | {moved} | {error} "
            f"| {'-' if speedup is None else f'{speedup:.2f}x'} |"
        )
    return "\n".join(lines)


def breakdown_markdown(result: TuneResult, builds: Sequence[str] | None = None) -> str:
    """Predicted vs in-network time per category of op, three columns per profiled build: every
    build, or those named in ``builds`` (the terminal's summary shows the build handed back and b*).

    Empty when no build was profiled (``tune_and_build(..., profile=False)``).

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> print(breakdown_markdown(result, ["layoutopt"]))
        | op | layoutopt predicted (ms) | layoutopt in network (ms) | calls |
        |---|---|---|---|
        | conv2d | ... | ... | 2 |
        ...
        | vm builtins | - | ... | ... |
    """
    variants = [v for v in result.variants() if v.breakdown and (builds is None or v.name in builds)]
    if not variants:
        return ""
    header = " | ".join(f"{v.name} predicted (ms) | {v.name} in network (ms) | calls" for v in variants)
    lines = [f"| op | {header} |", "|---|" + "---|---|---|" * len(variants)]
    categories = list(dict.fromkeys(row.category for v in variants for row in v.breakdown))
    for category in categories:
        cells = []
        for variant in variants:
            row = next((r for r in variant.breakdown if r.category == category), None)
            cells.append("- | - | -" if row is None
                         else f"{ms(row.predicted)} | {ms(row.measured)} | {row.calls}")
        lines.append(f"| {category} | {' | '.join(cells)} |")
    totals = [
        f"{ms(sum(r.predicted for r in v.breakdown if r.predicted is not None))} "
        f"| {ms(sum(r.measured for r in v.breakdown))} | {sum(r.calls for r in v.breakdown)}"
        for v in variants
    ]
    lines.append(f"| total | {' | '.join(totals)} |")
    return "\n".join(lines)


def _fallbacks(result: TuneResult) -> str:
    listed = [f"{variant.name}: " + "; ".join(f.describe() for f in variant.fallbacks)
              for variant in result.variants() if variant.fallbacks]
    return "none" if not listed else " / ".join(listed)


def _breakdown_section(result: TuneResult) -> list[str]:
    table = breakdown_markdown(result)
    if not table:
        return []
    return [
        "## Where the time goes",
        "",
        "Every call of each build, timed inside the running network (the fastest of 5 runs, the builds in",
        "interleaved rounds), beside its share of the prediction. The timing hook pauses the VM between",
        "calls, where TVM's worker threads may fall asleep, so the calls can add up to more than the",
        "latency (most with many small kernels). A kernel is slower in the network than alone when its",
        "inputs and weights are not in cache; pooling, concat, elementwise ops outside a conv and the",
        "VM's builtins are outside the layout problem.",
        "",
        table,
        "",
    ]


def handed_back_layers(result: TuneResult) -> list[Layer]:
    """The per-layer table of the build handed back: ``result.layers`` when it is the tuned build,
    else the fixed rule's layers, under the same costs (their ``in_network`` times unknown: only the
    tuned build is profiled layer by layer).

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> layers = handed_back_layers(result)     # the tuned build's, here
        >>> layers == result.layers, [(layer.node, layer.kind) for layer in layers][:2]
        (True, [('conv1', 'target'), ('conv2', 'target')])
    """
    if result.chosen == TUNED:
        return result.layers
    variant = result.baselines[result.chosen]
    return layer_table(result.graph, Problem.from_graph(result.graph, result.costs), variant.assignment,
                       result.isolated_costs)


def layer_markdown(result: TuneResult) -> str:
    """The per-layer table: chosen layouts, kernel time, fastest kernel, transforms paid on the inputs."""
    lines = [
        "| # | layer | op | workload | chosen | kernel alone (ms) | kernel costed (ms) | in network (ms) "
        "| fastest kernel | fastest (ms) | transforms in | transform (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, layer in enumerate(result.layers, start=1):
        lines.append(
            f"| {number} | {layer.node} | {layer.op.rsplit('.', 1)[-1]} | {layer.workload} | {layer.choice} "
            f"| {ms(layer.isolated_time)} | {ms(layer.kernel_time)} | {ms(layer.in_network)} "
            f"| {layer.best_choice} "
            f"| {ms(layer.best_kernel_time)} | {layer.transforms_in} | {ms(layer.transform_time)} |"
        )
    return "\n".join(lines)


def plot(result: TuneResult, path: str | Path) -> Path:
    """Per-layer chosen vs fastest kernel time, transform time stacked, transforms marked; a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = result.layers
    xs = range(len(layers))
    chosen = [layer.kernel_time * 1e3 for layer in layers]
    fastest = [layer.best_kernel_time * 1e3 for layer in layers]
    transform = [layer.transform_time * 1e3 for layer in layers]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.22 * len(layers) + 3), 4.5))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], chosen, width, label="chosen kernel", color="#2b6cb0")
    ax.bar([x - width / 2 for x in xs], transform, width, bottom=chosen, label="layout transforms in",
           color="#dd6b20")
    ax.bar([x + width / 2 for x in xs], fastest, width, label="fastest kernel of the layer", color="#a0aec0")
    marked = [x for x, layer in zip(xs, layers, strict=True) if layer.transforms_in]
    ax.scatter([x - width / 2 for x in marked], [chosen[x] + transform[x] for x in marked], marker="v",
               color="#c05621", zorder=3, label="transform placed")
    profiled = [(x, layer.in_network * 1e3) for x, layer in zip(xs, layers, strict=True) if layer.in_network]
    if profiled:
        ax.scatter([x - width / 2 for x, _ in profiled], [t for _, t in profiled], marker="_", s=60,
                   color="black", zorder=4, label="chosen kernel, timed in the network")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([str(layer.node) for layer in layers], rotation=90, fontsize=6)
    ax.set_ylabel("time (ms)")
    tuned = result.tuned
    ax.set_title(f"layoutopt: predicted {ms(tuned.predicted)} ms, measured {ms(tuned.measured)} ms, "
                 f"{tuned.transforms} transforms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(result: TuneResult, directory: str | Path, name: str = "report",
                 model: str = "") -> dict[str, Path]:
    """Write ``<directory>/<name>.md`` and ``<directory>/<name>.png``; returns their paths.

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> paths = write_report(result, "out", model="chain")
        >>> paths
        {'markdown': PosixPath('out/report.md'), 'plot': PosixPath('out/report.png')}
        >>> paths["markdown"].read_text().splitlines()[0]
        '# layoutopt tune report: chain'
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    png = plot(result, directory / f"{name}.png")
    solution = result.solution
    timings = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in result.timings.items())
    text = "\n".join([
        f"# layoutopt tune report{f': {model}' if model else ''}",
        "",
        f"*{stamp_line()}; target `{result.target}`*",
        "",
        "## Latency",
        "",
        summary_markdown(result),
        "",
        f"Handed back: **{result.chosen}** (the faster, measured side by side, of the tuned build and the "
        "best fixed layout).",
        "",
        f"Timing: {result.noise.describe() if result.noise is not None else 'not timed'}.",
        "",
        *([f"Schedules: {result.search.describe()}.", ""] if result.search is not None else []),
        "Functions no schedule rule covered (they run unscheduled or on one core), per build: "
        + _fallbacks(result) + ".",
        "",
        "Check: " + (result.reference.describe() if result.reference is not None else
                     "none (outputs not compared with the untouched model)") + "; each build's error is the "
        "'max rel. error' column, against that reference.",
        "",
        "Predicted = the layout problem's objective: kernel and transform times, calibrated in the network",
        "when calibration ran (see `layoutopt.tvm.evaluate.calibrate`); ops that run in any layout",
        "(relu, bias, pooling) are not in it, so measured latency is higher.",
        "",
        f"Solver: {solution.method} ({solution.stats.get('engine', solution.method)}), status "
        f"{solution.status}, objective {ms(solution.objective)} ms, solved in {solution.solve_time:.3f} s.",
        *([f"Memory: {result.describe_memory()}."] if result.memory is not None else []),
        f"Time per stage: {timings}.",
        "",
        *_breakdown_section(result),
        "## Layers",
        "",
        "The layers of the tuned build" + (", the one handed back." if result.chosen == TUNED else
                                           f"; the build handed back (written by `-o`, its layers in the "
                                           f"solution file) is {result.chosen}."),
        "",
        f"![per-layer time]({png.name})",
        "",
        layer_markdown(result),
        "",
    ])
    markdown = directory / f"{name}.md"
    markdown.write_text(text)
    return {"markdown": markdown, "plot": png}
