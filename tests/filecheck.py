"""FileCheck-style checks for IR text: patterns that must appear in order.

``check_in_order(text, patterns)`` is the test-side analogue of LLVM's FileCheck ``CHECK:`` lines: each
pattern is searched for after the end of the previous match, so the check fails when an op is missing *and*
when the ops are present but in the wrong order (which an unordered ``"x" in text`` cannot see).
"""

import re

_CONTEXT = 300   # characters of text shown after the point where the failing search started


def _find(pattern, text, start):
    """(match start, match end) of ``pattern`` in ``text`` at or after ``start``, or None. A plain string
    is matched literally; a compiled ``re.Pattern`` as a regular expression."""
    if isinstance(pattern, re.Pattern):
        found = pattern.search(text, start)
        return None if found is None else (found.start(), found.end())
    if not isinstance(pattern, str):
        raise TypeError(f"a pattern is a str or a compiled re.Pattern, not {type(pattern).__name__}")
    at = text.find(pattern, start)
    return None if at < 0 else (at, at + len(pattern))


def _describe(pattern):
    return f"re.compile({pattern.pattern!r})" if isinstance(pattern, re.Pattern) else repr(pattern)


def check_in_order(text, patterns):
    """Assert that ``patterns`` occur in ``text`` in order, each after the end of the previous match.

    Returns the list of (start, end) spans matched, so a caller can check what lies between two of them.
    On failure raises AssertionError naming the failing pattern (and its index), the previous match, and
    the text from where the search started.
    """
    if isinstance(patterns, (str, re.Pattern)):
        raise TypeError("check_in_order takes a sequence of patterns, not a single pattern")
    spans = []
    position = 0
    for index, pattern in enumerate(patterns):
        span = _find(pattern, text, position)
        if span is None:
            previous = (f"after pattern {index - 1} {_describe(patterns[index - 1])} matched "
                        f"at offset {spans[-1][0]}" if spans else "from the start of the text")
            earlier = _find(pattern, text, 0)
            where = (f"\n(it does occur earlier, at offset {earlier[0]}: out of order)"
                     if earlier is not None else "\n(it does not occur anywhere in the text)")
            excerpt = text[position:position + _CONTEXT]
            more = "..." if len(text) > position + _CONTEXT else ""
            raise AssertionError(
                f"pattern {index} {_describe(pattern)} not found {previous}{where}\n"
                f"searched from offset {position}:\n{excerpt}{more}")
        spans.append(span)
        position = span[1]
    return spans
