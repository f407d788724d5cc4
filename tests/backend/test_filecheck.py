"""The FileCheck-style helper the IR tests rely on: it must fail exactly when order or presence is wrong."""

import re

import pytest

from filecheck import check_in_order

TEXT = "func.func @f {\n  %0 = arith.addi %a, %b\n  scf.while {\n    arith.cmpi ult\n  }\n  return\n}\n"


def test_patterns_in_order_pass_and_report_their_spans():
    spans = check_in_order(TEXT, ["func.func", "arith.addi", "scf.while", re.compile(r"cmpi (ult|slt)"), "return"])
    assert [TEXT[a:b] for a, b in spans] == ["func.func", "arith.addi", "scf.while", "cmpi ult", "return"]


def test_the_same_pattern_twice_needs_two_occurrences():
    check_in_order("a x a", ["a", "a"])
    with pytest.raises(AssertionError, match=r"pattern 1 'a' not found"):
        check_in_order("a x", ["a", "a"])


def test_patterns_out_of_order_fail_naming_the_pattern_and_the_text_searched():
    with pytest.raises(AssertionError) as info:
        check_in_order(TEXT, ["scf.while", "arith.addi"])
    message = str(info.value)
    assert "pattern 1 'arith.addi' not found after pattern 0 'scf.while'" in message
    assert "out of order" in message
    # the excerpt starts where the failed search started: right after the scf.while match
    assert f"searched from offset {TEXT.index('scf.while') + len('scf.while')}:\n {{\n    arith.cmpi" in message


def test_missing_pattern_fails_and_says_it_is_absent():
    with pytest.raises(AssertionError) as info:
        check_in_order(TEXT, ["func.func", re.compile(r"vector\.load")])
    message = str(info.value)
    assert "pattern 1 re.compile('vector\\\\.load') not found" in message
    assert "does not occur anywhere" in message


def test_regex_is_a_regex_and_a_string_is_literal():
    check_in_order("x.y", [re.compile(r"x.y")])
    check_in_order("xzy", [re.compile(r"x.y")])
    with pytest.raises(AssertionError):
        check_in_order("xzy", ["x.y"])


def test_a_single_pattern_instead_of_a_list_is_a_type_error():
    with pytest.raises(TypeError, match="sequence of patterns"):
        check_in_order(TEXT, "scf.while")
    with pytest.raises(TypeError, match="str or a compiled re.Pattern"):
        check_in_order(TEXT, [3])
