"""A short sorted row in registers: the map kernel's (:mod:`splyce.native.spgemm_sorted_map`) rows of at most 16
entries (int32 columns) sorted by a bitonic network of 16 keys, their values permuted by the same order, and
both written with one masked store each: no loop, no branch per entry.

Each key packs the column and the entry's place in the scratch row, ``col << 4 | lane`` (columns below
``2**28``, checked per call in the kernel: wider results keep the vector ranks); lanes past the row's end
hold all-ones columns, whose keys sort after every real one. The network's 10 steps are a constant shuffle,
an unsigned min and max, and a constant blend each; the sorted keys give the columns (``key >> 4``) and the
permutation of the values (``key & 15``, one AVX-512 variable permute of 16 four-byte or two of 8 eight-byte
values, read as integers: no value is computed on, so every bit, NaN and -0.0 included, is kept). The sums
themselves are the map kernel's (A's row order, from +0.0), untouched: only where they are written changes.

Why (issue 33): a road network's product rows hold ~7 entries of about one term each (road-700: 490k rows),
where the vector ranks' loop over the row costs a mispredicted exit per row on top of the map's own. Kernel
alone, thread CPU time, min of 7, 2-core Sapphire Rapids KVM, 2026-12-05, load 4 (the drop-in's unsorted
kernel first): road-700 25.1 ms, the flags kernel 35.3, the map kernel with ranks 33.4, with this network
31.5; road-100 0.59 / 0.76 / 0.75 / 0.56 ms.

Needs AVX-512F (the variable permutes); :func:`available` says whether the host has it, else the ranks stay.
"""

from __future__ import annotations

import functools

LANES = 16
KEY_SHIFT = 4                      # lanes of the scratch row in a key's low bits
COLUMN_LIMIT = 1 << (32 - KEY_SHIFT)

DECLARATIONS = """\
declare <16 x i32> @llvm.umin.v16i32(<16 x i32>, <16 x i32>)
declare <16 x i32> @llvm.umax.v16i32(<16 x i32>, <16 x i32>)
declare <8 x i64> @llvm.x86.avx512.vpermi2var.q.512(<8 x i64>, <8 x i64>, <8 x i64>)
declare <16 x i32> @llvm.x86.avx512.permvar.si.512(<16 x i32>, <16 x i32>)
declare void @llvm.masked.store.v8i64.p0(<8 x i64>, ptr, i32, <8 x i1>)
declare void @llvm.masked.store.v16i32.p0(<16 x i32>, ptr, i32, <16 x i1>)
"""


@functools.cache
def available() -> bool:
    """Whether the host's code may use the network (AVX-512F)."""
    from splyce.native.codegen import host_target

    return "+avx512f" in host_target().features.split(",")


def _splat(value: int) -> str:
    return "<" + ", ".join([f"i32 {value}"] * LANES) + ">"


def _half(vector: str, lanes: str, out: str, high: bool) -> str:
    sel = ", ".join(f"i32 {x + (8 if high else 0)}" for x in range(8))
    return f"  {out} = shufflevector <16 x {lanes}> {vector}, <16 x {lanes}> poison, <8 x i32> <{sel}>"


def steps(key: str) -> tuple[str, str]:
    """The bitonic network's steps over the <16 x i32> ``key`` (unsigned): (IR lines, the sorted vector)."""
    lines, cur, s, k = [], key, 0, 2
    while k <= LANES:
        j = k // 2
        while j >= 1:
            partner = ", ".join(f"i32 {i ^ j}" for i in range(LANES))
            # lane i keeps the smaller of its pair when it is the pair's lower lane in an ascending run
            low = ", ".join("i1 " + ("true" if ((i & j) == 0) == ((i & k) == 0) else "false") for i in range(LANES))
            lines += [f"  %nt_p{s} = shufflevector <16 x i32> {cur}, <16 x i32> poison, <16 x i32> <{partner}>",
                      f"  %nt_n{s} = call <16 x i32> @llvm.umin.v16i32(<16 x i32> {cur}, <16 x i32> %nt_p{s})",
                      f"  %nt_x{s} = call <16 x i32> @llvm.umax.v16i32(<16 x i32> {cur}, <16 x i32> %nt_p{s})",
                      f"  %nt_s{s} = select <16 x i1> <{low}>, <16 x i32> %nt_n{s}, <16 x i32> %nt_x{s}"]
            cur, s, j = f"%nt_s{s}", s + 1, j // 2
        k *= 2
    return "\n".join(lines), cur


def row_ir(t: str, next_block: str, done_block: str) -> str:
    """The end of block one_load (spgemm_ir.small_rows: %yrow, the row's columns with all-ones past its end,
    %inrow, the lanes in the row; the kernel's %n, %sv (the row's values, 16 readable), %cc, %cv, %start): rows
    of a result with fewer than COLUMN_LIMIT columns sorted here, then ``done_block``; else ``next_block``."""
    net, out = steps("%nt_key")
    if t in ("double", "i64"):
        values = "\n".join([
            "  %nt_vlo = load <8 x i64>, ptr %sv, align 1",
            "  %nt_psv = getelementptr i64, ptr %sv, i64 8",
            "  %nt_vhi = load <8 x i64>, ptr %nt_psv, align 1",
            _half("%nt_ix", "i32", "%nt_il", False), _half("%nt_ix", "i32", "%nt_ih", True),
            "  %nt_il8 = zext <8 x i32> %nt_il to <8 x i64>",
            "  %nt_ih8 = zext <8 x i32> %nt_ih to <8 x i64>",
            "  %nt_olo = call <8 x i64> @llvm.x86.avx512.vpermi2var.q.512(<8 x i64> %nt_vlo, <8 x i64> %nt_il8, "
            "<8 x i64> %nt_vhi)",
            "  %nt_ohi = call <8 x i64> @llvm.x86.avx512.vpermi2var.q.512(<8 x i64> %nt_vlo, <8 x i64> %nt_ih8, "
            "<8 x i64> %nt_vhi)",
            _half("%inrow", "i1", "%nt_mlo", False), _half("%inrow", "i1", "%nt_mhi", True),
            "  %nt_pv = getelementptr i64, ptr %cv, i64 %start",
            "  call void @llvm.masked.store.v8i64.p0(<8 x i64> %nt_olo, ptr %nt_pv, i32 1, <8 x i1> %nt_mlo)",
            "  %nt_pv8 = getelementptr i64, ptr %nt_pv, i64 8",
            "  call void @llvm.masked.store.v8i64.p0(<8 x i64> %nt_ohi, ptr %nt_pv8, i32 1, <8 x i1> %nt_mhi)"])
    elif t in ("float", "i32"):
        values = "\n".join([
            "  %nt_vv = load <16 x i32>, ptr %sv, align 1",
            "  %nt_ov = call <16 x i32> @llvm.x86.avx512.permvar.si.512(<16 x i32> %nt_vv, <16 x i32> %nt_ix)",
            "  %nt_pv = getelementptr i32, ptr %cv, i64 %start",
            "  call void @llvm.masked.store.v16i32.p0(<16 x i32> %nt_ov, ptr %nt_pv, i32 1, <16 x i1> %inrow)"])
    else:
        raise ValueError(f"spgemm_network: no network for values of type {t}")
    lanes = "<" + ", ".join(f"i32 {x}" for x in range(LANES)) + ">"
    return f"""\
  %nt_ok = icmp ult i64 %n, {COLUMN_LIMIT}
  br i1 %nt_ok, label %nt_sort, label %{next_block}
nt_sort:
  %nt_hi = shl <16 x i32> %yrow, {_splat(KEY_SHIFT)}
  %nt_key = or <16 x i32> %nt_hi, {lanes}
{net}
  %nt_col = lshr <16 x i32> {out}, {_splat(KEY_SHIFT)}
  %nt_ix = and <16 x i32> {out}, {_splat(LANES - 1)}
  %nt_pc = getelementptr i32, ptr %cc, i64 %start
  call void @llvm.masked.store.v16i32.p0(<16 x i32> %nt_col, ptr %nt_pc, i32 1, <16 x i1> %inrow)
{values}
  br label %{done_block}
"""
