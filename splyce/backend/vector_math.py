"""Transcendental math at SIMD speed: a kernel's ``exp`` / ``log`` / ``log1p`` / ``expm1`` / ``tanh`` /
``sin`` / ``cos`` calls served by glibc's vector math library (libmvec), one algorithm for every element.

Without this, LLVM's loop vectorizer widens ``llvm.exp.f64`` to ``llvm.exp.v8f64`` and the code generator
splits that back into eight scalar libm calls (~4.5 ns each: 3x NumPy's AVX-512 ``exp``); ``log1p`` /
``expm1`` (libm calls) do not vectorize at all. ``rewrite`` edits a kernel's LLVM IR before O3: each scalar
call of one of those functions becomes a call of an internal wrapper ``splyce.vm.<name>.<type>`` (the
function on lane 0 of libmvec's AVX2 variant, ``_ZGVdN4v_exp`` for float64, ``_ZGVdN8v_expf`` for float32),
marked with the ``vector-function-abi-variant`` attribute that names that same AVX2 variant as its
vectorized form. The loop vectorizer then calls libmvec directly in vector bodies; remainders and loops it
does not vectorize call the wrapper. Every element, whatever loop computes it, is therefore computed by the
same libmvec function: a plan with the Splyce pass and the same plan without it (``vectorize=False``) stay
bit-identical, and an element's result does not depend on its position in the loop.

The accuracy is libmvec's (glibc documents at most 4 ulp for its vector functions; measured per function and
dtype in docs/toolchain.md and tests/test_vector_math.py), against libm's < 1 ulp. Special values (NaN, ±Inf,
±0, overflow to Inf, underflow to 0, log of negatives) follow libm: libmvec computes those lanes with the
scalar function.

Used when: the target is x86-64 Linux with AVX2 (the variant's calling convention), libmvec.so.1 loads in
this process and exports the function's AVX2 variant (glibc >= 2.22 for exp / log / sin / cos, >= 2.35 for
the others), and ``SPLYCE_VECTOR_MATH`` is not ``0``. Otherwise a function keeps its scalar libm call (the
previous code). ``key()`` is part of the disk cache key, so that kernels compiled under either setting are
different entries; ``ensure_loaded()`` makes libmvec's symbols resolvable (RTLD_GLOBAL, and MCJIT's symbol
search) before a kernel that calls them is loaded.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading

LIBRARY = "libmvec.so.1"
ENVIRONMENT = "SPLYCE_VECTOR_MATH"

# scalar callee in a kernel's LLVM IR -> (libmvec function, LLVM scalar type)
_F64 = {"exp": "llvm.exp.f64", "log": "llvm.log.f64", "tanh": "llvm.tanh.f64", "sin": "llvm.sin.f64",
        "cos": "llvm.cos.f64", "log1p": "log1p", "expm1": "expm1"}
CALLEES: dict[str, tuple[str, str]] = {}
for _name, _callee in _F64.items():
    CALLEES[_callee] = (_name, "double")
    _f32 = _callee[:-3] + "f32" if _callee.startswith("llvm.") else _callee + "f"
    CALLEES[_f32] = (_name + "f", "float")
LANES = {"double": 4, "float": 8}       # the AVX2 (ymm) variants: _ZGVdN4v_<f>, _ZGVdN8v_<f>f

_lock = threading.Lock()
_library = None          # the loaded libmvec (ctypes.CDLL), False when it does not load
_llvm_loaded = False


def _load():
    global _library
    with _lock:
        if _library is None:
            try:
                _library = ctypes.CDLL(LIBRARY, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                _library = False
    return _library


def enabled() -> bool:
    """Not switched off by ``SPLYCE_VECTOR_MATH=0``."""
    return os.environ.get(ENVIRONMENT, "1").strip().lower() not in ("0", "off", "false", "no")


def vector_name(function: str, scalar_type: str) -> str:
    return f"_ZGVdN{LANES[scalar_type]}v_{function}"


def available() -> dict[str, str]:
    """{libm function name: its libmvec AVX2 variant} for the functions this process can serve ({} when off,
    or libmvec does not load)."""
    if not enabled():
        return {}
    library = _load()
    if not library:
        return {}
    out = {}
    for function, scalar_type in CALLEES.values():
        name = vector_name(function, scalar_type)
        if hasattr(library, name):
            out[function] = name
    return out


def key() -> str:
    """The disk cache key part: which functions kernels compiled now call libmvec for."""
    served = available()
    return ",".join(sorted(served)) if served else "off"


def applies_to(target) -> bool:
    """The target can call libmvec's AVX2 variants (x86-64 Linux, AVX2 among its features)."""
    return (target.triple.startswith("x86_64") and "linux" in target.triple
            and "+avx2" in target.features.split(","))


def ensure_loaded() -> None:
    """libmvec's symbols resolvable by kernels loaded from now on (a shared library's undefined references,
    and MCJIT's symbol search)."""
    global _llvm_loaded
    library = _load()
    if not library or _llvm_loaded:
        return
    import sys

    from splyce.native import codegen

    if "llvmlite.binding" in sys.modules or codegen.artifact_kind() != "shared":   # MCJIT resolves by LLVM
        import llvmlite.binding as llvm

        llvm.load_library_permanently(library._name)
        _llvm_loaded = True


_CALL = re.compile(r"\bcall (?:(?:fast|nnan|ninf|nsz|arcp|contract|afn|reassoc) )*(double|float) @([\w.]+)\(")


def rewrite(llvm_ir: str, target) -> tuple[str, list[str]]:
    """``llvm_ir`` with its calls of the served functions routed to libmvec (module docstring), and the
    names of the libmvec functions it now calls ([] and the text unchanged when nothing applies)."""
    called = {m.group(2) for m in _CALL.finditer(llvm_ir)} & set(CALLEES)
    if not called or not applies_to(target):
        return llvm_ir, []
    served = available()
    plan = {}
    for callee in sorted(called):
        function, scalar_type = CALLEES[callee]
        if function in served:
            plan[callee] = (function, scalar_type, served[function])
    if not plan:
        return llvm_ir, []

    group = _free_attribute_group(llvm_ir)
    groups = {}
    lines = []
    for line in llvm_ir.splitlines():
        match = _CALL.search(line)
        if match and match.group(2) in plan and not line.lstrip().startswith("declare"):
            callee = match.group(2)
            function, scalar_type, vector = plan[callee]
            wrapper = f"splyce.vm.{function}"
            if callee not in groups:
                groups[callee] = group + len(groups) * 2
            line = line[:match.start(2)] + wrapper + line[match.end(2):]
            line = re.sub(r"\s*#\d+\s*$", "", line) + f" #{groups[callee]}"
        lines.append(line)
    extra = []
    for callee, number in groups.items():
        function, scalar_type, vector = plan[callee]
        n = LANES[scalar_type]
        vt = f"<{n} x {scalar_type}>"
        wrapper = f"splyce.vm.{function}"
        extra += [
            f"declare {vt} @{vector}({vt}) #{number + 1}",
            f"define internal {scalar_type} @{wrapper}({scalar_type} %x) #{number + 1} {{",
            f"  %v = insertelement {vt} poison, {scalar_type} %x, i64 0",
            f"  %s = shufflevector {vt} %v, {vt} poison, <{n} x i32> zeroinitializer",
            f"  %r = call {vt} @{vector}({vt} %s)",
            f"  %y = extractelement {vt} %r, i64 0",
            f"  ret {scalar_type} %y",
            "}",
            f'attributes #{number} = {{ "vector-function-abi-variant"="_ZGV_LLVM_N{n}v_{wrapper}({vector})" }}',
            f"attributes #{number + 1} = {{ noinline nounwind willreturn memory(none) "
            f'"target-cpu"="{target.cpu}" "target-features"="{target.features}" }}',
        ]
    return "\n".join(lines) + "\n" + "\n".join(extra) + "\n", sorted({p[2] for p in plan.values()})


def _free_attribute_group(text: str) -> int:
    used = [int(n) for n in re.findall(r"^attributes #(\d+)", text, flags=re.M)]
    return max(used, default=0) + 100
