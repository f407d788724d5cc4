"""splyce.bench.bandwidth and the kernels bench's memory-traffic model (no timing asserts: only that the rates
are measured and positive, and that the byte counts are the model's)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from splyce.bench import bandwidth, kernels
from splyce.bench.paper_kernels import KERNELS


def test_lines_holding_counts_distinct_lines():
    # 8-byte elements, 8 to a line: 0 and 7 share line 0; 8 is line 1; 100 is line 12
    assert bandwidth.lines_holding(np.array([0, 7, 8, 100]), 8) == 3
    assert bandwidth.lines_holding(np.array([], dtype=np.int64), 8) == 0
    # data starting 16 bytes into a line: element 6 moves to line 1
    assert bandwidth.lines_holding(np.array([0, 5]), 8, offset=16) == 1
    assert bandwidth.lines_holding(np.array([0, 6]), 8, offset=16) == 2
    # an element straddling two lines counts both
    assert bandwidth.lines_holding(np.array([0]), 8, offset=60) == 2


def test_rates_positive_and_remembered():
    nbytes = 1 << 20
    for kind in ("read", "write", "update"):
        r = bandwidth.rate(kind, nbytes)
        assert math.isfinite(r) and r > 0
        assert bandwidth.rate(kind, nbytes) == r      # measured once per process
    with pytest.raises(ValueError, match="read"):
        bandwidth.rate("copy", nbytes)
    t = bandwidth.Traffic(read=nbytes, written=nbytes, updated=nbytes)
    expected = sum(nbytes / bandwidth.rate(k, nbytes) for k in ("read", "write", "update"))
    assert bandwidth.floor_seconds(t, nbytes) == pytest.approx(expected)
    assert bandwidth.floor_seconds(bandwidth.Traffic(), nbytes) == 0.0


def test_k4_traffic_model():
    spec = KERNELS["K4"]
    ops = spec.operands((16, 1024), 0.05)
    B, C = ops
    operand_bytes = sum(b.nbytes for t in ops for b in (*t.pos, *t.crd, t.values) if b is not None)
    assert operand_bytes == (B.nnz + C.nnz) * (8 + 4) + 2 * 17 * 4    # values f64, coordinates and positions i32
    product = B.to_numpy() * C.to_numpy()
    as_called = kernels.traffic(ops, product, accumulate=False)
    assert as_called == bandwidth.Traffic(read=operand_bytes, written=16 * 1024 * 8)
    into = kernels.traffic(ops, product, accumulate=True)
    assert into.read == operand_bytes and into.written == 0
    # between the lines the nonzeros must span (8 to a line, at least) and one line each (at most)
    nz = np.count_nonzero(product)
    assert 0 < nz and nz * 8 <= into.updated <= nz * bandwidth.LINE
    assert into.updated % bandwidth.LINE == 0
