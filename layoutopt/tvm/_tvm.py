"""The one place that imports TVM and turns user target specs into CPU targets.

Everything in :mod:`layoutopt.tvm` gets TVM through :func:`import_tvm` so that a missing install
gives one clear :class:`~layoutopt.MissingExtraError`, and the thread pool is sized before TVM's
runtime starts (TVM defaults to one thread on small VMs, which halves every measured speed).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import MissingExtraError, ProblemError
from ..machine import default_tvm_threads

__all__ = ["first_line", "import_tvm", "one_blas_thread", "resolve_target", "target_key", "tvm_version",
           "without_scope_saving_lines"]


def import_tvm():
    """Return the ``tvm`` module, raising :class:`~layoutopt.MissingExtraError` if it is absent.

    Sets ``TVM_NUM_THREADS`` to the number of usable cores first, unless the user set it.

    Example:
        >>> tvm = import_tvm()
        >>> tvm.__name__, "TVM_NUM_THREADS" in os.environ
        ('tvm', True)
    """
    default_tvm_threads()
    try:
        import tvm
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingExtraError("apache-tvm", "tvm", "layoutopt.tvm") from exc
    return tvm


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run numpy's BLAS on one thread while TVM code is timed in this process.

    numpy's multi-threaded BLAS keeps its threads alive beside TVM's thread pool; on a 2-core
    CPU, end-to-end ResNet-50 timings measured slower with them than without (TVM build timed
    several times each way, interleaved). The measuring worker sets the same limit at start.

    Example:
        >>> from threadpoolctl import threadpool_info
        >>> with one_blas_thread():     # e.g. around vm.time_evaluator("main", tvm.cpu())(*args)
        ...     {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}
        {1}
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        yield


#: the line TVM 0.27's VM executable logs for every memory scope it saves while exporting
#: (``LOG(WARNING) << "Scope Saving:"`` in src/runtime/vm/executable.cc, a debugging print left in:
#: 42 lines for the embedded model), straight to the process's stderr from C++
_SCOPE_SAVING = re.compile(r"\] \S*executable\.cc:\d+: Warning: Scope Saving:")


@contextmanager
def without_scope_saving_lines() -> Iterator[None]:
    """Drop TVM's ``Warning: Scope Saving:`` lines from the process's stderr inside the block.

    TVM's C++ logs go to file descriptor 2, beneath Python, so the descriptor is pointed at a
    temporary file meanwhile; every other line written there (a real warning or error) is written
    on to ``sys.stderr`` when the block ends.

    Example:
        >>> import io
        >>> from contextlib import redirect_stderr
        >>> with redirect_stderr(io.StringIO()) as stderr, without_scope_saving_lines():
        ...     _ = os.write(2, b"[12:00:00] /src/vm/executable.cc:1: Warning: Scope Saving: global\\n")
        ...     _ = os.write(2, b"a real warning\\n")    # e.g. executable.export_library("model.so")
        >>> stderr.getvalue()
        'a real warning\\n'
    """
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to filter
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if not _SCOPE_SAVING.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def tvm_version() -> str:
    """The installed TVM version string (part of every cache key)."""
    return str(import_tvm().__version__)


def resolve_target(target: Any = None):
    """Turn ``target`` into an llvm ``tvm.target.Target`` for the machine's own CPU by default.

    Accepted: ``None`` or ``"llvm"`` (host CPU), a dict such as ``{"kind": "llvm", "mcpu": "znver4"}``,
    its JSON text, the legacy CLI form ``"llvm -mcpu=znver4 -num-cores=2"`` (TVM 0.27 no longer parses
    it), or a ``Target``. Without ``mcpu`` the host CPU is used: plain ``"llvm"`` emits no AVX and
    makes kernels several times slower, and ``mcpu=native`` is silently ignored by LLVM, so it is
    replaced too.

    Raises :class:`~layoutopt.ProblemError` for non-CPU kinds, unknown CPUs and unparsable text.

    Example:
        >>> resolve_target({"kind": "llvm", "mcpu": "znver3"})
        {"kind":"llvm","tag":"","keys":["cpu"],"mcpu":"znver3"}
        >>> resolve_target("llvm -mcpu=znver3 -num-cores=2")
        {"kind":"llvm","tag":"","keys":["cpu"],"num-cores":2,"mcpu":"znver3"}
        >>> tvm = import_tvm()
        >>> resolve_target("llvm").attrs["mcpu"] == tvm.target.codegen.llvm_get_system_cpu()
        True
        >>> resolve_target("cuda")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: target 'cuda': layoutopt.tvm measures CPU kernels and needs kind
        'llvm', not 'cuda'
    """
    tvm = import_tvm()
    if isinstance(target, tvm.target.Target):
        spec = _target_to_dict(target)
    elif target is None:
        spec = {"kind": "llvm"}
    elif isinstance(target, dict):
        spec = dict(target)
    elif isinstance(target, str):
        spec = _parse_target_text(target)
    else:
        raise ProblemError(
            f"target must be None, a string, a dict or a tvm Target, not {type(target).__name__}"
        )
    kind = spec.get("kind")
    if kind != "llvm":
        raise ProblemError(
            f"target {target!r}: layoutopt.tvm measures CPU kernels and needs kind 'llvm', not {kind!r}"
        )
    codegen = tvm.target.codegen
    host_triple = str(codegen.llvm_get_system_triple())
    triple = str(spec.get("mtriple") or host_triple)
    # the host CPU stands in for a missing mcpu only when the target is this host's architecture
    native = triple.split("-")[0] == host_triple.split("-")[0]
    if spec.get("mcpu") in (None, "", "native"):
        if not native:
            raise ProblemError(
                f"target {target!r}: mtriple {triple!r} is not this host's architecture ({host_triple}), "
                "so the host CPU cannot stand in for the device's: name it with 'mcpu' "
                "(e.g. \"cortex-a72\")"
            )
        spec["mcpu"] = codegen.llvm_get_system_cpu()
    try:
        resolved = tvm.target.Target(spec)
    except Exception as exc:  # TVM raises ValueError / TVMError with long C++ context
        raise ProblemError(f"target {target!r} is not a valid TVM target: {first_line(exc)}") from None
    if not codegen.llvm_is_valid_cpu(str(spec["mcpu"]), triple):
        advice = "leave 'mcpu' out to use the host CPU" if native else "name the device's CPU as LLVM does"
        raise ProblemError(
            f"target {target!r}: LLVM does not know the CPU {spec['mcpu']!r} for {triple}; {advice}"
        )
    return resolved


def target_key(target) -> str:
    """A stable string naming a resolved target, used as the cache key (sorted JSON of its attributes)."""
    return json.dumps(_target_to_dict(target), sort_keys=True)


def _target_to_dict(target) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": target.kind.name}
    for key, value in dict(target.attrs).items():
        if key in ("keys", "tag"):
            continue
        spec[key] = value if isinstance(value, int | float | bool) else str(value)
    return spec


def _parse_target_text(text: str) -> dict[str, Any]:
    text = text.strip()
    if not text:
        raise ProblemError("the target is empty: give 'llvm' (this CPU) or a JSON dict such as "
                           "'{\"kind\": \"llvm\", \"mcpu\": \"znver4\"}'")
    if text.startswith("{"):
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProblemError(f"target {text!r} is not valid JSON: {exc}") from None
        if not isinstance(spec, dict):
            raise ProblemError(f"target {text!r}: JSON target must be an object")
        return spec
    kind, *options = text.split()
    spec: dict[str, Any] = {"kind": kind}
    for option in options:
        if not option.startswith("-") or "=" not in option:
            raise ProblemError(f"target {text!r}: cannot parse option {option!r} (expected -name=value)")
        name, value = option.lstrip("-").split("=", 1)
        spec[name] = int(value) if value.isdigit() else value
    return spec


def first_line(exc: BaseException, with_type: bool = False) -> str:
    """An exception's message on one line, for error messages that must not carry a C++ backtrace.

    TVM 0.27's errors are one line; a few (LLVM, the RPC layer, older builds) put a backtrace before
    the message proper, which is then the last line. ``with_type`` prefixes the exception's class name.

    Example:
        >>> first_line(ValueError("Unknown config option 'x'")), first_line(KeyError(), with_type=True)
        ("Unknown config option 'x'", 'KeyError: KeyError')
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    backtrace = any(line.startswith(("Traceback", "Stack trace", "File ", "0: ", "#0")) for line in lines)
    text = (lines[-1] if backtrace else lines[0]) if lines else ""
    text = text[:500] if text else type(exc).__name__
    return f"{type(exc).__name__}: {text}" if with_type else text
