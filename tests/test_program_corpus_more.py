"""The algorithm bodies of tests/program_corpus_more.py (written the natural scipy / NumPy way before they were
run under jit) on every operand kind, jitted against the same function without jit, with
tests/test_program_corpus.py's harness: the same values and class families, an error under jit only where the
eager function raises too, and the refusals below naming the construct and what to write instead."""

from __future__ import annotations

import pytest

from program_corpus_more import PROGRAMS
from test_program_corpus import KINDS, run

# refused inside jit, as JAX refuses them, each message naming the construct and the alternative
REFUSED = {}
QUICK = []


@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array", "SparseTensor"])
@pytest.mark.parametrize("name", QUICK)
def test_more_corpus_quick(name, kind):
    run(name, kind, PROGRAMS, REFUSED)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_more_corpus_every_kind(name, kind):
    run(name, kind, PROGRAMS, REFUSED)
