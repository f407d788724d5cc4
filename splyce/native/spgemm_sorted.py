"""Gustavson's ``A @ B`` writing each row's columns sorted: the row kernel of :mod:`splyce.native.spgemm` for
the jit's sparse-output product, whose result must be the sparsifier's (the MLIR kernel's) bit for bit.

The sparsifier's kernel keeps every position the product reaches (zero sums too), sums each entry from +0.0 in
the order of A's row (``i, k, j`` loops), and emits each row's columns ascending. Here each row accumulates in
a dense row of the thread's scratch (``dense[j] += a * b``: zero between rows, so the first term is summed
from +0.0 as in the sparsifier's zero-filled workspace, and a product of -0.0 gives +0.0), with no branch on
the values: a byte flag per column says whether the row met it (a column met first is appended to the row's
column list, ``count += flag was 0``), a byte per 64 columns whether its block did (a store, never read back
in the loop: no chain of read-modify-writes through one word when B's rows are dense), and the row's first
and last column come from each B row's ends (B's rows are sorted). At the row's end, by length:

- up to one vector of columns (16 int32 / 8 int64): ranks, the popcount of one vector compare of each column
  against the row loaded once (lanes past its end all-ones); no branch depends on the values (road networks'
  ~5-entry rows);
- up to ``RANK_MAX`` (int64 columns: rows of 9-16 entries): the same ranks counted over the row a vector at a
  time, the row padded with all-ones;
- longer rows: the block flags of the row's span read 64 at a time (one vector compare gives a 64-bit mask
  of the blocks met), and each block met gives the 64-bit mask of its columns from its 64 flags; one vector
  compress of the lane numbers 0-63 under the mask gives the block's columns in order (as bytes, widened and
  added to the block's first column a vector at a time: one vector for up to 16 columns (8 int64), all four
  (eight) beyond), with no branch per column. Without a byte compress in one instruction (AVX-512 VBMI2; on
  AVX2 LLVM expands it lane by lane) a block's first two columns come from two trailing-zero counts and, past
  two, all of them from a table of 8-bit masks, 8 lanes a load (:func:`_table_groups`; Zen 1 AVX2 VM, kernel
  alone, min of 5 x 3: ba-4k 12.2 -> 5.9 ms, ba-100k 1668 -> 654 ms, fem2d-3k 1.28 -> 0.99 ms). The columns then take their sums from ``dense`` into the
  result, which leaves ``dense`` and the flags zero for the next row.

Against the previous kernel (a scatter map of output positions, ``slots[j]``, then a scratch row sorted
through a one- or two-level bitmap of 64-bit words set by read-modify-writes), on the 2-core Zen 4 VM
(thread CPU time, min of 5, 2026-12-05; the drop-in's unsorted kernel with every position kept in brackets):
fem3d-100k 139 -> 76 ms [104], rmat-s13 177 -> 102 ms [147] (an entry's repeated terms cost a branch-free add
where the scatter map mispredicts insert-or-add), ba-4k 2.7 -> 1.6 ms [0.9], ba-100k 287 -> 277 ms [145] and
road-700 about even (rows of about one term per entry: the flags and the gather of the sums from ``dense``
cost about what the old sort did; the sort itself stays the gap to the drop-in there).

The scratch (``scratch(n)``) is one int64 buffer per thread (:func:`layout`): ``[n | dense (n) | row columns
(n + PAD) | flags (n + FLAG_PAD bytes) | block flags (n / 64 + FLAG_PAD bytes)]``, zero but ``n``; the kernel
finds the parts from ``n``, so its signature stays the unsorted kernel's and the driver (threads, backward
blocks) is shared.
"""

from __future__ import annotations

import numpy as np

from splyce.native import spgemm_ir
from splyce.native.spgemm_ir import RANK_MAX  # noqa: F401 (the bound of the rule above, tested by name)
from splyce.native.ir_text import bind, fill, index_at, load_at, loop_head, store_at

PAD = 64           # lanes after a row's columns: vector stores of a block's columns and all-ones padding
FLAG_PAD = 128     # bytes after the flags (and the block flags): a 64-byte load at the last block stays inside


def layout(n: int) -> tuple[int, int, int, int, int]:
    """Offsets in int64 words of the scratch's parts: dense values, the row's columns, flags, block flags, end."""
    dense = 1
    cols = dense + n
    flags = cols + n + PAD
    blocks = flags + (n + FLAG_PAD) // 8 + 1
    end = blocks + (n // 64 + FLAG_PAD) // 8 + 1
    return dense, cols, flags, blocks, end


# The map kernel (spgemm_sorted_map.py) when at least this share of B's neighbouring stored columns are
# adjacent (j, j + 1), counted on at most SAMPLE evenly spaced pairs. The corpus splits cleanly around it: the
# map wins on 0.60-0.91 (banded, dense element blocks, propack), the flags on 0.00-0.45 (meshes, graphs,
# roads, block-diagonal at 25 %).
ADJACENT_SHARE = 0.5
SAMPLE = 4096


# The map kernel with spgemm_network's sort of rows of up to 16 entries (kind "short") when the product's rows
# average at most this many terms (flops / rows): nearly all its rows then fit the network's 16 lanes, sorted
# in registers with no loop (road networks: 7.3; every other corpus product 25 or more). Kernel alone, 2-core
# Sapphire Rapids KVM, 2026-12-05, min of 9, load ~2: road-700 34.8 ms (flags) -> 31.7, road-100 0.73 ->
# 0.66 (the drop-in's unsorted kernel 26.0, 0.46); not for longer rows (ba-4k, 106 terms a row: 1.7 against
# 3.0), nor for the map's own rows of equal lengths (banded-4k's 9 entries: the ranks' loop exit is predicted
# there, and they take 0.22 ms against the network's 0.25).
SHORT_ROW_FLOPS = 16


def kind_for(b_indices: np.ndarray, flops: int = -1, rows: int = 0) -> str:
    """``"short"``, ``"map"`` or ``"flags"``: the kernel for a product of ``flops`` multiply-adds over ``rows``
    rows (SHORT_ROW_FLOPS), when given, whose B has these column indices (ADJACENT_SHARE). Pairs that
    straddle two rows count as well (one per row: noise at these sizes)."""
    if 0 <= flops <= SHORT_ROW_FLOPS * rows:
        return "short"
    pairs = len(b_indices) - 1
    if pairs <= 0:
        return "flags"
    step = max(1, pairs // SAMPLE)
    left, right = b_indices[0: pairs: step], b_indices[1: pairs + 1: step]     # views: no gather, no copy
    adjacent = np.count_nonzero(right - left == 1)    # (int32 wraps only past 2**31 - 1: never a 1)
    return "map" if adjacent >= ADJACENT_SHARE * len(left) else "flags"


def scratch(n: int, kind: str = "flags") -> np.ndarray:
    """A thread's dense accumulator, column list and flags: all zero but the header (n); the map kernel's own
    scratch for ``kind="map"`` or ``"short"``."""
    if kind in ("map", "short"):
        from splyce.native import spgemm_sorted_map

        return spgemm_sorted_map.scratch(n)
    buf = np.zeros(layout(n)[-1], dtype=np.int64)
    buf[0] = n
    return buf


# A short row's values (spgemm_ir.small_rows): from the dense row, which they leave zero as they leave the
# flags and block flags (the value ``%{v}`` of column ``%{x}``)
_TAKEN = ("  %{x}w = {co_ext} %{x} to i64\n" + load_at("{t}", "%dn", "%{x}w", "%{v}")
          + "  store {t} {zero}, ptr %{v}_at\n" + store_at("i8", "0", "%fl", "%{x}w", "%{x}_flag")
          + "  %{x}b = lshr i64 %{x}w, 6\n" + store_at("i8", "0", "%bf", "%{x}b", "%{x}_block"))


_ONE_VALUE, _RANK_VALUE = bind(_TAKEN, x="x", v="v"), bind(_TAKEN, x="rx", v="rv")


def _taken_bytes(ptr: str, at: str, tag: str, bits: str) -> str:
    """The 64 flag bytes ``ptr[at:at + 64]`` as the bit mask ``%{bits}`` of those set (``%{tag}m``, as lanes),
    left zero (``%p{tag}``, ``%{tag}v``: their address and bytes)."""
    return (f"  %p{tag} = getelementptr i8, ptr {ptr}, i64 {at}\n  %{tag}v = load <64 x i8>, ptr %p{tag}, align 1\n"
            f"  store <64 x i8> zeroinitializer, ptr %p{tag}, align 1\n"
            f"  %{tag}m = icmp ne <64 x i8> %{tag}v, zeroinitializer\n  %{bits} = bitcast <64 x i1> %{tag}m to i64\n")

_ROWS = "\n" + spgemm_ir.sorted_head("""declare i64 @llvm.ctpop.i64(i64)
declare <64 x i8> @llvm.experimental.vector.compress.v64i8(<64 x i8>, <64 x i1>, <64 x i8>)
""", "dn") + """\
  %fl = getelementptr i64, ptr %buf, i64 %o2b
  %nf = add i64 %n, {flag_pad}
  %nf8 = lshr i64 %nf, 3
  %o3 = add i64 %o2b, %nf8
  %o3b = add i64 %o3, 1
  %bf = getelementptr i64, ptr %buf, i64 %o3b
  br label %row
{row_loop}
{k_head}
{a_entry}
  %filled = icmp slt i64 %ja, %jb
  br i1 %filled, label %k_range, label %k_end
k_range:
""" + index_at("%bc", "%ja", "%fc", "cb") + """  %jbm = sub i64 %jb, 1
""" + index_at("%bc", "%jbm", "%lc", "cb") + """  %flt = icmp slt i64 %fc, %lo_c
  %lo_c1 = select i1 %flt, i64 %fc, i64 %lo_c
  %lgt = icmp sgt i64 %lc, %hi_c
  %hi_c1 = select i1 %lgt, i64 %lc, i64 %hi_c
  br label %j_head
{j_head}
{b_column}
{b_value}
  %pf = getelementptr i8, ptr %fl, i64 %col
  %flag = load i8, ptr %pf
  store i8 1, ptr %pf
  %blk = lshr i64 %col, 6
""" + store_at("i8", "1", "%bf", "%blk", "%pbk") + """  %pd = getelementptr {t}, ptr %dn, i64 %col
  %old = load {t}, ptr %pd
  %sum = {add} {t} %old, %prod
  store {t} %sum, ptr %pd
  %fresh = icmp eq i8 %flag, 0
  %col_out = {co_narrow} %col to i{co}
""" + store_at("i{co}", "%col_out", "%sc", "%c2", "%pcc") + """  %inc = zext i1 %fresh to i64
  %c2n = add i64 %c2, %inc
  %jj1 = add i64 %jj, 1
  br label %j_head
k_end:
  %cnt2 = phi i64 [%len, %k_body], [%c2, %j_head]
  %lo_c2 = phi i64 [%lo_c, %k_body], [%lo_c1, %j_head]
  %hi_c2 = phi i64 [%hi_c, %k_body], [%hi_c1, %j_head]
{k_next}
finish:
  %row_end = add i64 %start, %len
{small_rows}
s_start:
  %slo = lshr i64 %lo_c, 12
  %shi = lshr i64 %hi_c, 12
  br label %s_head
""" + loop_head("s_head", "s_body", "s_start", [("si", "i64", "%slo", "%si1"), ("spos", "i64", "0", "%wpos0")],
                "sin = icmp ule i64 %si, %shi", "emit", latch="s_next") + """\
  %sb0 = shl i64 %si, 6
""" + _taken_bytes("%bf", "%sb0", "sb", "sw0") + """\
  br label %sw_head
""" + loop_head("sw_head", "sw_body", "s_body", [("sw", "i64", "%sw0", "%sw1"),
                ("wpos0", "i64", "%spos", "%wpos_next")], "swz = icmp eq i64 %sw, 0", "s_next", latch="w_done",
                exit_on=True) + """\
  %tz = call i64 @llvm.cttz.i64(i64 %sw, i1 true)
  %wi = add i64 %sb0, %tz
  %wcbase = shl i64 %wi, 6
""" + _taken_bytes("%fl", "%wcbase", "wf", "wbits") + """\
  %wpc = call i64 @llvm.ctpop.i64(i64 %wbits)
{compress}  %wcb = {co_narrow} %wcbase to i{co}
  %wcbi = insertelement <{w} x i{co}> poison, i{co} %wcb, i64 0
  %wcbs = shufflevector <{w} x i{co}> %wcbi, <{w} x i{co}> poison, <{w} x i32> zeroinitializer
{group0}
{more}  br label %w_done
w_done:
  %wpos_next = add i64 %wpos0, %wpc
  %swm = sub i64 %sw, 1
  %sw1 = and i64 %sw, %swm
  br label %sw_head
s_next:
  %si1 = add i64 %si, 1
  br label %s_head

emit:
  br label %e_head
""" + loop_head("e_head", "e_body", "emit", [("ee", "i64", "0", "%ee1")], "ein2 = icmp ult i64 %ee, %len",
                "{row_exit}") + """\
""" + load_at("i{co}", "%sc", "%ee", "%ex") + """  %exw = {co_ext} %ex to i64
  %pev = getelementptr {t}, ptr %dn, i64 %exw
  %ev = load {t}, ptr %pev
  store {t} {zero}, ptr %pev
  %eo = add i64 %start, %ee
""" + store_at("i{co}", "%ex", "%cc", "%eo", "%peo") + """\
""" + store_at("{t}", "%ev", "%cv", "%eo", "%pevo") + """  %ee1 = add i64 %ee, 1
  br label %e_head
{drop}
{row_done}
"""


def rows_ir(fields: dict, kind: str = "flags", compress: bool | None = None, keep_zeros: bool = True) -> str:
    """The sorted row kernel ``@{name}`` (the unsorted one's signature, ``%slots`` being :func:`scratch`);
    ``fields``: the format fields of spgemm's templates (name, t, mul, add, index widths and extensions);
    ``kind``: :func:`kind_for`'s answer; ``compress``: a block's columns by one vector compress (default: where
    the host compresses bytes in one instruction, :func:`byte_compress`), else by the table of 8-bit masks;
    ``keep_zeros=False`` (kind "flags" only: the drop-in's product, spgemm.unordered_kernel): scipy's rule,
    each written row compacted to its nonzero sums (:data:`_DROP`)."""
    if not keep_zeros and kind != "flags":
        raise ValueError(f"spgemm_sorted: zero sums are dropped by the flags kernel only, not {kind!r}")
    if kind in ("map", "short"):
        from splyce.native import spgemm_network, spgemm_sorted_map

        return spgemm_sorted_map.rows_ir(fields, network=kind == "short" and spgemm_network.available())
    fields = spgemm_ir.sorted_fields(fields)
    w = fields["w"]
    if compress is None:
        compress = byte_compress()
    if compress:
        kind = dict(compress=_COMPRESS_LINE, more=_MORE, group0=_group(0, w, fields),
                    groups="\n".join(_group(g, w, fields) for g in range(1, 64 // w)), table="")
    else:
        kind = dict(compress="", more="", group0=_table_groups(fields), table=_TABLE)
    # scipy's rule: every way to the row's end goes through the compaction, whose end is the row's
    drop = dict(row_exit="drop", row_end="%dq", drop=_DROP) if not keep_zeros else dict(drop="")
    loops = spgemm_ir.nest("finish", "k_range", "j_body", j=[("%c2", "i64", "%len", "%c2n")], k=[
        ("%len", "i64", "0", "%cnt2"), ("%lo_c", "i64", "9223372036854775807", "%lo_c2"), ("%hi_c", "i64", "0", "%hi_c2")])
    return fill(_ROWS + "{table}", **dict(fields, **drop), **kind, **loops, **spgemm_ir.small_rows(_ONE_VALUE, _RANK_VALUE, "s_start"),
                pad=PAD, flag_pad=FLAG_PAD, bytes="<" + ", ".join(f"i8 {x}" for x in range(64)) + ">")


# scipy's rule (csr_matmat: an entry is stored where its sum != 0; NaN kept) over the row just written sorted
# at [start, row_end): its nonzero sums moved down in order, no branch on the values (each entry stored, the
# position advanced by the test). The sums are those of the unsorted kernel bit for bit where nonzero: both add
# the same terms in A's row order, and a sum started from +0.0 instead of the first term differs only in the
# sign of a zero, which is dropped.
_DROP = """
drop:
  br label %drop_head""" + bind(spgemm_ir.COMPACT, blk="drop", p="d", stop="%row_end", exit="row_done", before="drop",
                              value=load_at("{t}", "%cv", "%dx", "%dv").removesuffix("\n")).removesuffix("\n")


def byte_compress() -> bool:
    """Whether the host compresses a vector of bytes in one instruction (AVX-512 VBMI2's ``vpcompressb``: Zen 4,
    Ice Lake and later). Elsewhere LLVM expands ``llvm.experimental.vector.compress`` lane by lane (64 lanes a
    block), and the table of 8-bit masks (:func:`_table_groups`) is faster."""
    from splyce.native.codegen import host_target

    return "+avx512vbmi2" in host_target().features.split(",")


_MORE = "  %wmore = icmp ugt i64 %wpc, {w}\n  br i1 %wmore, label %w_rest, label %w_done\nw_rest:\n{groups}\n"
_COMPRESS_LINE = ("  %widx = call <64 x i8> @llvm.experimental.vector.compress.v64i8(<64 x i8> {bytes}, "
                  "<64 x i1> %wfm, <64 x i8> zeroinitializer)\n")

FEW = 2

# Byte ``m`` of a block's 64-bit mask of columns met -> the numbers of its set bits, ascending, as the bytes of
# one i64 (zero-padded): the compress of 8 lanes by one table load, for hosts without a byte compress.
_TABLE = "@{name}_bits = private unnamed_addr constant [256 x i64] [" + ", ".join(
    "i64 " + str(sum(b << (8 * k) for k, b in enumerate(x for x in range(8) if m >> x & 1))) for m in range(256)) \
    + "], align 64\n"


def _table_groups(fields: dict) -> str:
    """The block's columns from its mask ``%wbits`` 8 at a time, in order, with no branch: each byte's set-bit
    numbers from ``@{name}_bits``, widened and added to the byte's first column, stored as 8 lanes at the row's
    list (lanes past the byte's count are overwritten by the next byte's, or lie in the list's PAD), the
    position advanced by the byte's popcount."""
    co, name = fields["co"], fields["name"]
    out = [f"""  %tx0 = call i64 @llvm.cttz.i64(i64 %wbits, i1 true)
  %tr1 = sub i64 %wbits, 1
  %tr = and i64 %wbits, %tr1
  %tx1 = call i64 @llvm.cttz.i64(i64 %tr, i1 false)
  %tx0n = {fields["co_narrow"]} %tx0 to i{co}
  %tx1n = {fields["co_narrow"]} %tx1 to i{co}
  %ty0 = add i{co} %wcb, %tx0n
  %ty1 = add i{co} %wcb, %tx1n
  %tf0 = getelementptr i{co}, ptr %sc, i64 %wpos0
  store i{co} %ty0, ptr %tf0
  %tf1 = getelementptr i{co}, ptr %tf0, i64 1
  store i{co} %ty1, ptr %tf1
  %tfew = icmp ule i64 %wpc, {FEW}
  br i1 %tfew, label %w_done, label %w_table
w_table:
  %tp0 = add i64 %wpos0, 0"""]
    for c in range(8):
        out.append(f"""  %tb{c}s = lshr i64 %wbits, {8 * c}
  %tb{c} = and i64 %tb{c}s, 255
  %tt{c}p = getelementptr [256 x i64], ptr @{name}_bits, i64 0, i64 %tb{c}
  %tt{c} = load <8 x i8>, ptr %tt{c}p, align 8
  %tz{c} = zext <8 x i8> %tt{c} to <8 x i{co}>
  %tc{c} = add i{co} %wcb, {8 * c}
  %tc{c}i = insertelement <8 x i{co}> poison, i{co} %tc{c}, i64 0
  %tc{c}s = shufflevector <8 x i{co}> %tc{c}i, <8 x i{co}> poison, <8 x i32> zeroinitializer
  %tv{c} = add <8 x i{co}> %tc{c}s, %tz{c}
  %tq{c} = getelementptr i{co}, ptr %sc, i64 %tp{c}
  store <8 x i{co}> %tv{c}, ptr %tq{c}, align 1
  %tn{c} = call i64 @llvm.ctpop.i64(i64 %tb{c})
  %tp{c + 1} = add i64 %tp{c}, %tn{c}""")
    return "\n".join(out)


def _group(g: int, w: int, fields: dict) -> str:
    """Columns ``g * w`` to ``g * w + w - 1`` of the block's compressed byte offsets (``%widx``) as columns
    (``%wcbase`` plus the offset) stored at the row's list from ``%wpos0 + g * w`` on."""
    co = fields["co"]
    sel = ", ".join(f"i32 {g * w + x}" for x in range(w))
    return f"""  %g{g}b = shufflevector <64 x i8> %widx, <64 x i8> poison, <{w} x i32> <{sel}>
  %g{g}z = zext <{w} x i8> %g{g}b to <{w} x i{co}>
  %g{g}v = add <{w} x i{co}> %wcbs, %g{g}z
  %g{g}p = add i64 %wpos0, {g * w}
  %g{g}pp = getelementptr i{co}, ptr %sc, i64 %g{g}p
  store <{w} x i{co}> %g{g}v, ptr %g{g}pp, align 1"""
