"""``vector_width`` left unset (issue 36): the static rule (``SPLYCE_NO_TUNE=1``, or a target other than the
host): 16 (the conflict lane) with ``fast_math`` on a target with AVX-512 CD, else 4; on the host, the width
measured at first use (runtime/lane_tuning.py, tests/passes/test_lane_tuning.py); an explicit width always wins; the
chosen width is part of the cache key; loops that cannot build the conflict lane keep the default width's code;
strict kernels are unchanged."""

import re

import numpy as np
import pytest

import splyce
from splyce.bench.paper_kernels import KERNELS
from splyce.native import codegen
from splyce.native.codegen import Target, resolve_target
from splyce.options import Options, choose_vector_width
from splyce.runtime import disk_kernels, lane_tuning

_BASE = "+sse2,+avx,+avx2,+fma,+bmi,+bmi2,+lzcnt,+popcnt"
WITH_CD = _BASE + ",+avx512f,+avx512cd,+avx512bw,+avx512dq,+avx512vl"
WITHOUT_CD = _BASE + ",-avx512f,-avx512cd"


def _fake_host(monkeypatch, features):
    monkeypatch.setenv(lane_tuning.ENV_SKIP, "1")   # the static rule: a faked host is not measured
    real = codegen.host_target()
    monkeypatch.setattr(codegen, "host_target", lambda: Target(real.triple, real.cpu, features))


def test_choice_from_the_target_features():
    with_cd, without_cd = Target("x86_64", "znver4", WITH_CD), Target("x86_64", "znver4", WITHOUT_CD)
    assert choose_vector_width(True, with_cd)[0] == 16
    assert "AVX-512 CD" in choose_vector_width(True, with_cd)[1]
    assert choose_vector_width(True, without_cd)[0] == 4
    assert choose_vector_width(True, Target("x86_64", "generic", ""))[0] == 4
    assert choose_vector_width(True, None)[0] == 4
    for target in (with_cd, without_cd, None):   # strict kernels: always the default
        assert choose_vector_width(False, target) == (4, "default")
    assert Options(fast_math=True, target=with_cd).vector_width == 16
    assert Options(fast_math=True, target=with_cd).width_reason.startswith("chosen")
    # chosen, 16 holds for the conflict lane's loops only; given, for every loop: different code, different keys
    assert Options(fast_math=True, target=with_cd) != Options(fast_math=True, vector_width=16, target=with_cd)
    assert Options(fast_math=True, target=with_cd).width_chosen
    assert not Options(fast_math=True, vector_width=16, target=with_cd).width_chosen
    # chosen as the default: the same code as given, the same key
    assert Options(fast_math=True, target=without_cd) == Options(fast_math=True, vector_width=4, target=without_cd)
    assert Options(target=with_cd) == Options(vector_width=4, target=with_cd)
    assert Options(fast_math=True, target=without_cd).vector_width == 4
    for width in (2, 4, 8):   # given: wins over the choice
        given = Options(fast_math=True, vector_width=width, target=with_cd)
        assert (given.vector_width, given.width_reason) == (width, "given")


@pytest.mark.parametrize("features, width", [(WITH_CD, 16), (WITHOUT_CD, 4)])
def test_jit_resolves_the_width_from_the_host(monkeypatch, features, width):
    _fake_host(monkeypatch, features)
    assert splyce.jit(lambda a, b: a @ b, fast_math=True).options.vector_width == width
    assert splyce.jit(lambda a, b: a @ b).options.vector_width == 4
    assert splyce.jit(lambda a, b: a @ b, fast_math=True, vector_width=8).options.vector_width == 8
    assert splyce.jit(lambda a, b: a @ b, fast_math=True).with_options(vector_width=2).options.vector_width == 2


def test_the_chosen_width_is_in_the_cache_keys(monkeypatch):
    spec = KERNELS["K1"]
    ops = spec.operands(size=spec.quick_size, density=0.2)
    keys = {}
    for features in (WITH_CD, WITHOUT_CD):
        _fake_host(monkeypatch, features)
        f = splyce.jit(spec.fun, fast_math=True)
        key, _, _ = f._key(ops)
        keys[features] = (key, disk_kernels.disk_key(f.lower(*ops).trace, key))
    assert keys[WITH_CD][0].options.vector_width == 16 and keys[WITHOUT_CD][0].options.vector_width == 4
    assert keys[WITH_CD][0] != keys[WITHOUT_CD][0]
    assert keys[WITH_CD][1] != keys[WITHOUT_CD][1]


def test_a_chosen_and_a_given_16_are_different_kernels():
    """A union loop (no conflict lane) is built at n = 4 under the chosen width and at n = 16 under a given
    one: their memory and disk cache keys differ, so neither kernel is served for the other."""
    import scipy.sparse as sps

    ops = [splyce.asarray(sps.random(200, 200, density=0.05, format="csr", random_state=i)) for i in range(2)]
    chosen = splyce.jit(lambda a, b: a + b, fast_math=True, target="avx512", library=False)
    given = chosen.with_options(vector_width=16)
    assert chosen.options.vector_width == given.options.vector_width == 16
    assert "n=4" in chosen.lower(*ops).as_text("splyce") and "n=16" in given.lower(*ops).as_text("splyce")
    keys = [f._key(ops)[0] for f in (chosen, given)]
    assert keys[0] != keys[1]
    assert disk_kernels.disk_key(chosen.lower(*ops).trace, keys[0]) != \
        disk_kernels.disk_key(given.lower(*ops).trace, keys[1])


def _host_has_conflict() -> bool:
    return {"+avx512f", "+avx512cd"} <= set(codegen.host_target().features.split(","))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["K1", "K3"])
def test_fast_math_default_width_matches_the_plain_sparsifier(name, dtype, monkeypatch):
    monkeypatch.delenv(lane_tuning.ENV_SKIP, raising=False)
    spec = KERNELS[name]
    ops = spec.operands(size=spec.quick_size, density=0.2, dtype=dtype)
    fast = splyce.jit(spec.fun, fast_math=True)
    text = fast.lower(*ops).as_text("splyce")
    conflict = fast.options.vector_width == 16 and _host_has_conflict()   # as measured on this host
    assert ("conflict compares" in text) == conflict, text
    assert f"n={fast.options.vector_width} (chosen: fast_math, measured on this CPU" in text, text
    want = np.asarray(splyce.jit(spec.fun, vectorize=False)(*ops))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(fast(*ops)), want, **tol, err_msg=name)


def _llvm(f, ops) -> str:
    return re.sub(r"^// splyce:.*\n", "", f.lower(*ops).as_text("llvm"), flags=re.M)


def _three_way(a, b, c):
    return (a * b * c).sum()


def _three_way_operands():
    import scipy.sparse as sps

    return [sps.csr_array(sps.random(1, 500, density=0.2, format="csr", random_state=i)) for i in range(3)]   # * elementwise


@pytest.mark.parametrize("name", ["K4", "three-way"])
def test_loops_without_the_conflict_lane_keep_the_default_code(name):
    """K4 (the elementwise product, stored) and a three-way dot: with the width chosen on an AVX-512 CD target,
    their loops are built at n = 4, the same code as vector_width=4, and say why."""
    if name == "K4":
        fun, ops = KERNELS[name].fun, KERNELS[name].operands(size=KERNELS[name].quick_size, density=0.2)
    else:
        fun, ops = _three_way, _three_way_operands()
    auto = splyce.jit(fun, fast_math=True, target="avx512")
    given = splyce.jit(fun, fast_math=True, vector_width=4, target="avx512")
    assert auto.options.vector_width == 16
    text = auto.lower(*ops).as_text("splyce")
    assert "conflict compares" not in text
    assert "n=4 (default: no conflict lane here, two fingers summing without stores only)" in text, text
    assert _llvm(auto, ops) == _llvm(given, ops)
    # the AVX-512 code runs only where the host has AVX-512; elsewhere its text is what this test checks
    if resolve_target("avx512").is_host_compatible:
        np.testing.assert_allclose(np.asarray(auto(*ops)), np.asarray(splyce.jit(fun, vectorize=False)(*ops)),
                                   rtol=1e-10, atol=1e-10)
