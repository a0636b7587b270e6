"""The product apart from the lab: benchmarks use layoutopt's public names only, the help of every
command names no file that an installed package lacks, and a retired investigation stays retired."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from layoutopt.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def _private_imports(path: Path) -> list[str]:
    """``module: name`` of each import of a private layoutopt module or name in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules, names = [node.module], [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        else:
            continue
        for module in modules:
            if module.split(".")[0] != "layoutopt":
                continue
            private = [part for part in module.split(".") if part.startswith("_")]
            private += [name for name in names if name.startswith("_")]
            if private:
                found.append(f"{path.name}:{node.lineno}: {module} ({', '.join(private)})")
    return found


def test_benchmarks_import_public_names_only():
    scripts = sorted((ROOT / "benchmarks").rglob("*.py"))
    assert len(scripts) > 10
    assert [hit for path in scripts for hit in _private_imports(path)] == []


def test_a_private_import_is_found(tmp_path):
    # the check above is only as good as its parser: a private module or name must be caught
    script = tmp_path / "probe.py"
    script.write_text("import numpy\nfrom layoutopt.tvm._tvm import resolve_target\n"
                      "from layoutopt.api import _solve\nfrom layoutopt.tvm import resolve_target\n")
    assert _private_imports(script) == ["probe.py:2: layoutopt.tvm._tvm (_tvm)",
                                        "probe.py:3: layoutopt.api (_solve)"]


def _help_texts(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    texts = [(parser.prog, parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += _help_texts(sub)
    return texts


def test_no_help_text_names_a_file_of_the_repository():
    texts = _help_texts(build_parser())
    assert any("tune" in prog for prog, _ in texts)
    for prog, text in texts:
        flat = " ".join(text.split())
        for repository_only in ("benchmarks/", "notes/", "docs/", "README", ".py"):
            assert repository_only not in flat, f"`{prog} --help` names {repository_only!r}: a wheel lacks it"


RETIRED = ["handover", "cross_core", "host_drift", "profile_repro", "compare_measurers", "gemm_tiles",
           "register_tiles", "transpose_algorithms", "isolated_vs_network", "grouped", "depthwise", "dense",
           "detector_ops", "storage_plan", "toulbar2_time_limit"]


@pytest.mark.parametrize("name", RETIRED)
def test_a_retired_investigation_has_its_note_and_no_script(name):
    assert not (ROOT / "benchmarks" / f"{name}.py").exists()
    assert f"`{name}" in (ROOT / "notes" / "README.md").read_text()
    note = ROOT / "notes" / f"{name}.md"
    if note.exists():  # compare_measurers had no table
        assert f"benchmarks/{name}.py" in note.read_text()
