import subprocess
import sys

import numpy as np
import pytest

from splyce.tensors.formats import (COO, CSC, CSR, DCSC, DCSR, SPARSE_VECTOR, Format, Level, coo, csf, dense,
                            to_mlir_encoding)

ALL_PRESETS = [CSR, CSC, DCSR, DCSC, COO, SPARSE_VECTOR, csf(3), csf(4), coo(3), dense(2), dense(3),
               CSR.with_widths(32, 32), COO.with_widths(32, 64),
               Format(("dense", "compressed(nonordered)", "compressed"), order=(2, 0, 1))]


def test_import_builds_no_mlir():
    code = "import sys, splyce.tensors.formats, splyce.tensors.tensor, splyce.tensors.validation; print('mlir' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_presets():
    assert CSR.levels == (Level("dense"), Level("compressed")) and CSR.order == (0, 1)
    assert CSC.order == (1, 0) and CSC.dim_to_lvl == (1, 0)
    assert DCSR.levels == (Level("compressed"),) * 2
    assert COO.levels == (Level("compressed", unique=False), Level("singleton"))
    assert csf(3) == Format(("dense", "compressed", "compressed"))
    assert csf(1) == SPARSE_VECTOR == coo(1)
    assert dense(2).is_dense and not CSR.is_dense
    assert csf(4).ndim == 4


def test_hashable_and_structural():
    assert Format(["dense", "compressed"]) == CSR
    assert hash(Format((Level("dense"), Level("compressed")), order=(0, 1))) == hash(CSR)
    assert len({CSR, CSC, CSR.with_widths(64, 64), CSR.with_widths(32, 32)}) == 3
    with pytest.raises(AttributeError):
        CSR.pos_width = 32
    numpy_ints = Format(["dense", "compressed"], order=np.array([1, 0]), pos_width=np.int64(32), crd_width=32)
    assert numpy_ints == CSC.with_widths(32, 32) and type(numpy_ints.order[0]) is int
    assert type(numpy_ints.pos_width) is int


@pytest.mark.parametrize("fmt, text", [
    (CSR, "(i, j) -> (i : dense, j : compressed)"),
    (CSC, "(i, j) -> (j : dense, i : compressed)"),
    (COO, "(i, j) -> (i : compressed(nonunique), j : singleton)"),
    (CSR.with_widths(32, 32), "(i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32"),
    (Format([Level("compressed", unique=False, ordered=False), Level("singleton", ordered=False)]),
     "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonordered))"),
    (dense(5), "(d0, d1, d2, d3, d4) -> (d0 : dense, d1 : dense, d2 : dense, d3 : dense, d4 : dense)"),
])
def test_str(fmt, text):
    assert str(fmt) == text
    assert Format.from_string(text) == fmt
    assert text in repr(fmt)


def test_from_string_short_form():
    assert Format.from_string("dense, compressed") == CSR
    assert Format.from_string("compressed(nonunique), singleton") == COO
    assert Format.from_string("dense,compressed, posWidth = 32, crdWidth = 32") == CSR.with_widths(32, 32)


@pytest.mark.parametrize("make, message", [
    (lambda: Format(()), "at least one level"),
    (lambda: Format(("dense", "sparse")), "unknown level kind 'sparse'"),
    (lambda: Format(("dense", "singleton")), "level 1 is singleton"),
    (lambda: Format(("singleton",)), "level 0 is singleton"),
    (lambda: Format(("compressed", "singleton")), "level 1 is singleton"),
    (lambda: Format(("dense", "compressed"), order=(0, 0)), "not a permutation"),
    (lambda: Format(("dense", "compressed"), order=(0, 1, 2)), "has 3 entries but the format has 2"),
    (lambda: Format(("dense", "compressed"), order=(0, True)), "tuple of ints"),
    (lambda: Format(("dense", "compressed"), order=(0, 1.0)), "tuple of ints"),
    (lambda: Format(("dense", "compressed"), pos_width=16), "pos_width must be 32 or 64"),
    (lambda: Format(("dense", "compressed"), crd_width=0), "crd_width must be 32 or 64"),
    (lambda: Format(("dense",), pos_width=True), "pos_width must be 32 or 64"),
    (lambda: Level("dense", unique=False), "always unique and ordered"),
    (lambda: Level.from_string("compressed(sorted)"), "unknown level property"),
    (lambda: Level.from_string("compressed("), "cannot parse level"),
    (lambda: Format.from_string("(i, j) -> (i : dense, x : compressed)"), "unknown dimension 'x'"),
    (lambda: Format.from_string("(i, j) -> i : dense"), "cannot parse format"),
    (lambda: csf(0), "positive int"),
])
def test_invalid_formats(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("make, message", [
    (lambda: Format("dense"), "sequence of levels"),
    (lambda: Format((1, 2)), "Level or a string"),
    (lambda: Level("dense", unique=1), "must be bool"),
])
def test_invalid_format_types(make, message):
    with pytest.raises(TypeError, match=message):
        make()


@pytest.mark.parametrize("fmt", ALL_PRESETS, ids=str)
def test_mlir_encoding_parses_back(fmt):
    from mlir import ir

    with ir.Context(), ir.Location.unknown():
        enc = to_mlir_encoding(fmt)
        if fmt.is_dense:
            assert enc is None
            return
        assert ir.Attribute.parse(str(enc)) == enc
        assert enc.pos_width == fmt.pos_width and enc.crd_width == fmt.crd_width
        assert str(enc.dim_to_lvl) == str(ir.AffineMap.get_permutation(list(fmt.order)))
        shape = [3] * fmt.ndim
        tensor_type = ir.RankedTensorType.get(shape, ir.F64Type.get(), enc)
        assert "#sparse_tensor.encoding" in str(tensor_type)
        assert tensor_type.encoding == enc


def test_mlir_encoding_text():
    from mlir import ir

    with ir.Context():
        assert "(d0, d1) -> (d1 : dense, d0 : compressed)" in str(to_mlir_encoding(CSC))
        assert "d1 : singleton(soa)" in str(to_mlir_encoding(COO))
        assert "posWidth = 32, crdWidth = 32" in str(to_mlir_encoding(CSR.with_widths(32, 32)))


def test_index_buffers_follow_the_per_level_rule_in_storage_order():
    # compressed: pos and crd; singleton: crd only; dense: none (MLIR's memref order for arguments/results)
    assert CSR.index_buffers == (("pos", 1), ("crd", 1))
    assert CSC.index_buffers == (("pos", 1), ("crd", 1))
    assert DCSR.index_buffers == (("pos", 0), ("crd", 0), ("pos", 1), ("crd", 1))
    assert COO.index_buffers == (("pos", 0), ("crd", 0), ("crd", 1))
    assert coo(3).index_buffers == (("pos", 0), ("crd", 0), ("crd", 1), ("crd", 2))
    assert dense(2).index_buffers == ()
    assert [lv.has_pos for lv in COO.levels] == [True, False] and [lv.has_crd for lv in CSR.levels] == [False, True]
