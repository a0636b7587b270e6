"""Every cost-cache line either loads as a checked record or is skipped with a count and a reason,
whatever it holds; and a tune on such a cache completes, saying what it skipped."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutopt.tvm.measure.cache import CostCache, CostContext, CostRecord, record_cost

CONTEXT = CostContext({"kind": "llvm", "mcpu": "znver4"}, "0.27.0.post1", schedules=12)
WORKLOAD = {"op": "layout_transform", "shape": [1, 16, 4, 4], "src": "NCHW", "dst": "NCHW8c",
            "dtype": "float32"}
VALID = {**CONTEXT.record_fields(), "workload": WORKLOAD, "candidate": {}, "median": 1e-3,
         "results": [1e-3, 1.1e-3], "pass_medians": [1e-3], "error": None, "load_average": 0.4}


def line(**changed) -> str:
    return json.dumps({**VALID, **changed})


#: a line of each kind the issue names, and the reason counted for it
JUNK = {
    "deep nesting": ("[" * 200_000, "JSON nested deeper than 64 levels"),
    "pass_medians a number": (line(pass_medians=3), "'pass_medians' must be a list or null"),
    "median a string": (line(median="fast"), "'median' must be a number or null"),
    "median NaN": (line().replace('"median": 0.001', '"median": NaN'), "not valid JSON"),
    "median Infinity": (line().replace('"median": 0.001', '"median": Infinity'), "not valid JSON"),
    "negative median": (line(median=-1e-3), "'median' must be a finite number >= 0 or null"),
    "huge median": (line().replace('"median": 0.001', '"median": 1e400'), "not valid JSON"),
    "huge integer": (line().replace('"median": 0.001', '"median": ' + "9" * 400), "not valid JSON"),
    "results of strings": (line(results=["a"]), "'results' must hold finite numbers >= 0 (or null)"),
    "results with true": (line(results=[True]), "'results' must hold finite numbers >= 0 (or null)"),
    "negative load": (line(load_average=-2.0), "'load_average' must be a finite number >= 0 or null"),
    "workload a list": (line(workload=[1, 2]), "'workload' must be an object"),
    "candidate null": (line(candidate=None), "'candidate' must be an object"),
    "error a number": (line(error=3), "'error' must be a string or null"),
    "device a list": (line(device=["rpc"]), "'device' must be a string or null"),
    "target not a dict": (line(target="[1]"), "target and tvm fields of no cost context"),
    "target deeply nested": (line(target="[" * 5000), "target and tvm fields of no cost context"),
    "no schedule version": (line(tvm="0.27.0.post1"), "target and tvm fields of no cost context"),
    "missing workload": (json.dumps({k: v for k, v in VALID.items() if k != "workload"}),
                         "missing 'workload'"),
    "truncated": (line()[:40], "not valid JSON"),
    "binary junk": (bytes(b for b in range(256) if b != 10).decode("latin-1"), "not"),  # one line
    "a number": ("42", "cost record must be an object"),
}


@pytest.mark.parametrize("name", list(JUNK))
def test_every_kind_of_bad_line_is_skipped_with_its_reason(name, tmp_path):
    text, reason = JUNK[name]
    path = tmp_path / "c.jsonl"
    data = text.encode("latin-1") if name == "binary junk" else text.encode()
    path.write_bytes(line().encode() + b"\n" + data + b"\n")
    cache = CostCache(path)
    assert cache.skipped_lines == 1 and cache.loaded_lines == 1
    [counted] = cache.skipped
    assert counted.startswith(reason), counted
    assert record_cost(cache.get(CONTEXT, WORKLOAD, {})) == 1e-3  # the good line still loads
    assert cache.describe_skipped() == f"skipped 1 line: 1 {counted}"


def test_another_schedule_version_loads_and_is_not_this_ones(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(line(tvm="0.27.0.post1+schedules.3+cold") + "\n")
    cache = CostCache(path)
    assert cache.loaded_lines == 1 and cache.skipped_lines == 0
    assert cache.get(CONTEXT, WORKLOAD, {}) is None


def test_a_record_that_would_not_load_back_is_refused_when_stored(tmp_path):
    from layoutopt import ProblemError

    with pytest.raises(ProblemError, match="'results' must be a list"):
        CostCache(tmp_path / "c.jsonl").put({**VALID, "results": 7})
    assert not (tmp_path / "c.jsonl").exists()


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()  # floats: NaN and inf too
json_values = st.recursive(scalars, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(st.text(max_size=8), children, max_size=4), max_leaves=12)
#: a field of a valid record (or a new one) set to any JSON value, or the record's text cut short
mutated = st.builds(lambda key, value, cut: (json.dumps({**VALID, key: value}) if cut is None
                                            else line()[:cut]),
                    st.sampled_from([*VALID, "device", "timestamp", "extra"]), json_values,
                    st.none() | st.integers(0, len(line())))
junk_lines = st.lists(st.binary(max_size=60) | st.text(max_size=60).map(str.encode)
                      | json_values.map(lambda v: json.dumps(v).encode()) | mutated.map(str.encode),
                      max_size=12)


@settings(max_examples=150, deadline=None)
@given(junk_lines)
def test_any_junk_loads_or_is_counted_and_never_raises(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("junk") / "c.jsonl"
    data = b"\n".join([line().encode(), *lines])
    path.write_bytes(data)
    cache = CostCache(path)
    nonblank = sum(1 for piece in data.split(b"\n") if piece.strip())
    assert cache.loaded_lines + cache.skipped_lines == nonblank
    assert cache.loaded_lines >= 1
    for record in cache:  # what loaded is a record every reader of the cache can use
        CostRecord.from_json(record)
        cost = record_cost(record)
        assert cost == math.inf or (math.isfinite(cost) and cost >= 0)
    cache.put(VALID)  # and the file stays appendable


@pytest.mark.tvm
def test_a_tune_on_a_cache_of_junk_completes_and_says_what_it_skipped(tmp_path):
    pytest.importorskip("tvm")
    from layoutopt.tvm import models, tune_and_build

    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(text.encode("latin-1") for text, _ in JUNK.values()) + b"\n")
    said: list[str] = []
    result = tune_and_build(models.chain((8, 8)), cache=path, guard=False, baselines=(), calibrate=0,
                            repeat=2, profile=False, check=False, progress=said.append,
                            candidates={"blocks": [8], "algorithms": ["direct"]})
    assert result.tuned.measured > 0
    [skipped] = [message for message in said if "skipped" in message]
    assert f"skipped {len(JUNK)} lines: " in skipped and "not valid JSON" in skipped
