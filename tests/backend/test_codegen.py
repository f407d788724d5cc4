"""The generated code, not just the answer: assembly checks for the speed claims."""

import re

import numpy as np
import pytest
import scipy.sparse as sps

import splyce
from splyce.bench.paper_kernels import KERNELS


def _asm(target, **options):
    spec = KERNELS["K1"]
    ops = spec.operands(64, 0.2, seed=1)
    return splyce.jit(spec.fun, target=target, **options).lower(*ops).as_text("asm")


def _vector_to_gpr(asm: str) -> int:
    """Moves from vector registers into general-purpose ones (how SLP feeds packed cursors to loads)."""
    return len(re.findall(r"vpextr[qd]\s|vmovq\s+%xmm\d+, %r|vmovd\s+%xmm\d+, %e", asm))


@pytest.mark.parametrize("phases", [5, 7])
@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_scalar_pointer_advance_stays_in_general_purpose_registers(target, phases):
    asm = _asm(target, phases=phases)
    assert re.search(r"vpcmpeq[dq]", asm), "phase 1 (all-pairs compare) should be SIMD"
    assert re.search(r"vperm|vpshufd|valign|vpalignr|vshuf", asm), "the rotations should be shuffles"
    assert _vector_to_gpr(asm) == 0


def test_slp_on_packs_the_cursors_into_vector_registers():
    # the measured cost this avoids (docs/toolchain.md): LLVM's SLP vectorizer moves the two cursor advances
    # into one xmm register and extracts them for every load
    assert _vector_to_gpr(_asm("avx512", phases=5, slp=True)) > 0


def test_default_configuration_multiplies_in_simd():
    # the default (7): SIMD load / compare and multiply-accumulate (an ordered reduction), scalar advance
    assert re.search(r"\bvmulpd\b", _asm("avx2"))


def test_plain_sparsifier_has_no_all_pairs_compare():
    assert not re.search(r"vpcmpeq[dq]\s+%[xyz]mm", _asm("avx2", vectorize=False))


def test_three_way_intersection_compares_b_against_c_and_d_in_simd():
    # a * b * c summed by row (einsum "ij,ij,ij->i"): B's n = 4 coordinates against C's and D's windows,
    # each rotated 0..3 lanes: at least 2 n vector compares, and the product multiplied in SIMD
    rng = np.random.default_rng(1)
    ops = [splyce.asarray(sps.random_array((32, 64), density=0.3, format="csr", random_state=rng)) for _ in range(3)]

    def fun(a, b, c):
        return splyce.einsum("ij,ij,ij->i", a, b, c)

    asm = splyce.jit(fun, target="avx2").lower(*ops).as_text("asm")
    assert len(re.findall(r"vpcmpeq[dq]\s+%[xyz]mm", asm)) >= 2 * 4
    assert re.search(r"vperm|vpshufd|valign|vpalignr|vshuf", asm), "the rotations should be shuffles"
    assert re.search(r"\bvmulpd\b", asm)
    plain = splyce.jit(fun, target="avx2", vectorize=False).lower(*ops).as_text("asm")
    assert not re.search(r"vpcmpeq[dq]\s+%[xyz]mm", plain)
