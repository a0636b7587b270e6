"""The operator rules (:mod:`layoutopt.tvm.ops`): one description per Relax op that extraction, the
rewrite, the profile and the build all read."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from rule_snapshot import DATA, models, snapshot_of

pytestmark = pytest.mark.tvm

SNAPSHOT = json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def snapshot_models():
    return models()


@pytest.mark.parametrize("name", sorted(SNAPSHOT))
def test_the_graph_and_rewrite_are_those_the_code_before_the_rules_made(name, snapshot_models):
    # the workloads byte for byte (a cost cache written before still hits), the choices, the edges, and
    # the same program rewritten and legalized for three assignments
    assert snapshot_of(snapshot_models[name]) == SNAPSHOT[name]
