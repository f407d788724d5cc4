"""The algorithm bodies of tests/tracer/program_corpus_more.py (written the natural scipy / NumPy way before they were
run under jit) on every operand kind, jitted against the same function without jit, with
tests/tracer/test_program_corpus.py's harness: the same values and class families, an error under jit only where the
eager function raises too, and the refusals below naming the construct and what to write instead."""

from __future__ import annotations

import pytest

from program_corpus_more import PROGRAMS
from test_program_corpus import KINDS, run

# refused inside jit, each message naming the construct and the alternative: in-place writes (as JAX refuses
# them: traced values are immutable). gauss_seidel_sweeps and splitting_residual (scipy.sparse tril / triu /
# spsolve_triangular of a traced value) were refused until 2026-12-08: now host steps (tracer/scipy_host.py)
REFUSED = {"item_knn_topk": "np.where(np.eye(n, dtype=bool), v, a)", "max_abs_scale": "np.where(mask, v, y)",
           "ppmi": ".data array", "sublinear_tfidf_l2": ".data array"}
# smoothed_prolongation: p.T @ a @ p of CSR operands, two sparse intermediates with no common loop order (a
# LoweringError before planner/restored_operands.py)
QUICK = ["two_level_multigrid", "bm25_query_terms", "subspace_iteration", "ease_recommender", "smoothed_prolongation"]


@pytest.mark.parametrize("name, kind", [(n, "csr_matrix") for n in QUICK])
def test_more_corpus_quick(name, kind):
    run(name, kind, PROGRAMS, REFUSED)


@pytest.mark.slow
@pytest.mark.parametrize("name, kind", [(n, k) for n in sorted(PROGRAMS) for k in KINDS])
def test_more_corpus_every_kind(name, kind):
    run(name, kind, PROGRAMS, REFUSED)
