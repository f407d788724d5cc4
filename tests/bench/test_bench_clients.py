"""python -m splyce.bench clients in its tiny mode: every client workload and break-even row is measured with
the switch off and on, checked against the unpatched result, and the switch served the calls it should."""

from __future__ import annotations

import pytest

from splyce.bench import __main__ as cli
from splyce.bench.common import read_csv

pytest.importorskip("networkx")
pytest.importorskip("sklearn")


def test_clients_tiny(tmp_path, capsys):
    import splyce

    assert cli.main(["clients", "--tiny", "--no-progress", "--out", str(tmp_path)]) == 0
    comments, rows = read_csv(tmp_path / "clients.csv")
    assert any(c.startswith("# cpu:") for c in comments)
    by = {(r["group"], r["workload"]): r for r in rows}
    for key in [("client", "pagerank"), ("client", "tfidf fit_transform"), ("client", "cosine_similarity"),
                ("client", "cosine_similarity, sorted X"), ("client", "knn-union"),
                ("client", "knn-spgemm C @ C.T"), ("small", "pagerank"), ("small", "cosine_similarity, sorted X"),
                ("break-even", "A + B"), ("break-even", "A @ v (not routed)")]:
        assert key in by, key
    assert all(float(r["speedup"]) > 0 and float(r["scipy_s"]) > 0 and float(r["patched_s"]) > 0 for r in rows)
    assert int(by[("client", "knn-union")]["served"]) == 3            # W + W.T - W.multiply(W.T)
    assert int(by[("client", "knn-spgemm C @ C.T")]["served"]) == 1
    assert int(by[("client", "cosine_similarity, sorted X")]["served"]) == 1     # X @ X.T
    assert int(by[("client", "cosine_similarity")]["served"]) == 1   # scikit-learn's X (unsorted) read as it is
    assert int(by[("break-even", "A @ v (not routed)")]["served"]) == 0
    assert all(int(r["served"]) == 1 for r in rows if r["group"] == "break-even" and "not routed" not in r["workload"])
    assert "| knn-union |" in capsys.readouterr().out
    assert not splyce.is_scipy_patched()                               # the bench leaves the switch off
