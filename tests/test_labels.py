"""The label grammar: one formatter, one parser, and the pins and forbids that read it."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutopt import ProblemError
from layoutopt.constraints import parse_constraints
from layoutopt.labels import Label, format_label, parse_label

words = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True)
#: option values as candidates carry them: integers, or words that do not read as integers
values = st.one_of(st.integers(-(2**40), 2**40), words, st.from_regex(r"[0-9]+[A-Za-z_][A-Za-z0-9_]*",
                                                                      fullmatch=True))


@given(words, words, st.dictionaries(words, values, max_size=5))
def test_every_label_the_formatter_writes_parses_back(in_layout, out_layout, options):
    text = format_label(in_layout, out_layout, options)
    assert parse_label(text) == Label(in_layout, out_layout, options)
    # the options come sorted, so that one choice has one label
    assert text == format_label(in_layout, out_layout, dict(reversed(list(options.items()))))


@given(words)
def test_a_single_layout_is_that_layout_in_and_out(layout):
    assert format_label(layout) == layout
    assert parse_label(layout) == Label(layout, layout, {})


def test_known_labels_read_as_written():
    assert parse_label("NCHW16c->NCHW[algorithm=winograd,oc_block=16,tile=4]") == Label(
        "NCHW16c", "NCHW", {"algorithm": "winograd", "oc_block": 16, "tile": 4})
    assert parse_label("NCHW->NCHW[weight=NK16n]").options == {"weight": "NK16n"}
    assert parse_label("NCHW8c->NCHW8c[reg_n=-1]").options == {"reg_n": -1}


@pytest.mark.parametrize("text", ["", "NCHW8c->", "->NCHW8c", "A->B->C", "A->B[", "A->B]", "A->B[]",
                                  "A->B[k]", "A->B[k=]", "A->B[=1]", "A->B[k=1,k=2]", "A->B[k=1,]",
                                  "A[k=1]", "A->B [k=1]", "NCHW 8c", "A->B[k=a-b]", None, 3])
def test_text_outside_the_grammar_is_refused_with_the_reason(text):
    with pytest.raises(ProblemError, match=r"choice|label"):
        parse_label(text)


@pytest.mark.parametrize(("args", "message"), [
    (("NCHW8c", "NCHW8c", {"tile": "4"}), "integer or a word"),   # would read back as an integer
    (("NCHW8c", "NCHW8c", {"fast": True}), "integer or a word"),
    (("NCHW8c", "NCHW8c", {"scale": 0.5}), "integer or a word"),
    (("NCHW8c", "NCHW8c", {"order": "a,b"}), "integer or a word"),
    (("NCHW 8c", "NCHW8c", {}), "must be a word"),
    (("NCHW8c", "NCHW8c", {"bad key": 1}), "must be a word"),
    (("NCHW8c", None, {"tile": 4}), "'IN->OUT' form"),
])
def test_the_formatter_refuses_what_would_not_parse_back(args, message):
    with pytest.raises(ProblemError, match=message):
        format_label(*args)


# -- pins and forbids read labels in the grammar ---------------------------------------------------


def one_node(labels):
    graph = nx.DiGraph()
    graph.add_node("conv", choices=list(labels))
    return graph


def named(labels, choice):
    return parse_constraints(one_node(labels), pin=[f"conv={choice}"])[0].indices


def test_a_choice_names_the_same_label_with_its_options_in_any_order():
    labels = ["NCHW16c->NCHW16c", "NCHW16c->NCHW16c[algorithm=winograd,tile=2]",
              "NCHW16c->NCHW16c[algorithm=winograd,order=tiles,tile=4]"]
    assert named(labels, "NCHW16c->NCHW16c[tile=4,order=tiles,algorithm=winograd]") == (2,)
    assert named(labels, "NCHW16c->NCHW16c[algorithm=winograd,tile=2]") == (1,)
    assert named(labels, "NCHW16c") == (0,)  # a single layout is that layout in and out
    with pytest.raises(ProblemError, match="has no choice"):
        named(labels, "NCHW16c->NCHW16c[algorithm=winograd,tile=6]")


def test_layouts_alone_name_every_kernel_in_them_only_when_no_choice_is_named_exactly():
    labels = ["NCHW8c->NCHW8c[order=rows]", "NCHW8c->NCHW8c[algorithm=gemm]", "NCHW8c->NCHW16c"]
    assert named(labels, "NCHW8c->NCHW8c") == (0, 1)
    assert named(labels, "NCHW8c") == (0, 1)
    assert named(["NCHW8c", "NCHW8c->NCHW8c[order=rows]"], "NCHW8c->NCHW8c") == (0,)


def test_labels_outside_the_grammar_are_matched_as_text():
    labels = ["fast kernel", "x", "a->b->c"]
    assert named(labels, "fast kernel") == (0,) and named(labels, "a->b->c") == (2,)
    with pytest.raises(ProblemError, match="has no choice 'fast'"):
        named(labels, "fast")
