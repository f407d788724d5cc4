"""The matcher of the union fast lane: recognize the sparsifier's two-finger *union* ``scf.while``.

For an index that is compressed in two operands of a disjunction (``b + c``, ``b - c``, ``maximum``), the
sparsifier emits the intersection loop's head (two bound checks, coordinate loads, ``min``, two ``eq``
tests, their ``and``) and then three guarded bodies::

    scf.if both { body on B's and C's values at k } else {
      scf.if kb == k { body on B's value } else { scf.if kc == k { body on C's value } } }

followed by the select-based cursor advance; the loop is followed by the two tail loops for the operand
not exhausted. ``match_union`` accepts it when the bodies only load at the cursors, load and store at the
coordinate (a dense output, each coordinate written once), and compute pure arithmetic, and the loop
carries nothing but the cursors (a sparse output or a reduction carries more: declined with the reason).
The three bodies are described as ``Coiteration`` values so the fast lane's body builder can rebuild each.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from splyce.passes.coiteration_match import (
    CAST_OPS, Coiteration, Decline, _match_before, _match_then, _name, _predicate, _unit_stride_1d, side_of as _side)
from splyce.passes.ir_utils import CMPI_EQ, CMPI_ULT, const_int, defined_outside


@dataclass
class Union:
    """A matched union loop: the shared head and one Coiteration per branch (both, only B, only C)."""
    head: Coiteration  # cursors, bounds, coordinates, advance (its body fields describe the "both" branch)
    both: Coiteration
    only_b: Coiteration
    only_c: Coiteration


def _branch(head: Coiteration, if_op, block, after, cursor_args) -> Coiteration | Decline:
    if any(len(op.operation.regions) for op in block.operations):
        return Decline("a union branch is not innermost")
    result = _match_then(head.while_op, after, block, cursor_args, head.coord_level, {})
    if isinstance(result, Decline):
        return result
    then_ops, then_yield, lane_loads, stores, element_type, inv_mems, crd_mems = result
    if then_yield:
        return Decline("a union branch yields values")
    if not stores:
        return Decline("a union branch stores nothing (no dense output)")
    for store in stores:
        if list(store.operation.operands[2:])[-1] not in head.coord_level:
            return Decline("a union branch stores at an index other than the coordinate (innermost)")
    return Coiteration(
        while_op=head.while_op, cursor_pos=head.cursor_pos, bounds=head.bounds, crd_memrefs=head.crd_memrefs,
        crd_type=head.crd_type, cast_chain=head.cast_chain, coord_level=head.coord_level, if_op=if_op,
        then_ops=then_ops, then_yield=[], acc_of_result={}, lane_loads=lane_loads, reductions={},
        stores=stores, element_type=element_type, kind="union-store", invariant_load_memrefs=inv_mems,
        coord_load_memrefs=crd_mems, after_yield=head.after_yield, next_cursors=head.next_cursors)


def _single_if(block):
    """(eq-compare op, scf.if op) when ``block`` is exactly [cmpi eq, scf.if on it, scf.yield], else None."""
    ops = list(block.operations)
    if len(ops) != 3 or _name(ops[0]) != "arith.cmpi" or _predicate(ops[0]) != CMPI_EQ or \
            _name(ops[1]) != "scf.if" or ops[1].operation.operands[0] != ops[0].operation.results[0] or \
            len(ops[1].operation.results):
        return None
    return ops[0], ops[1]


def match_union(while_op, carried: bool = False):
    """Match ``while_op`` against the two-finger union with a dense output: a ``Union`` or the ``Decline``.
    With ``carried``, the loop may carry values besides the cursors (a sparse output), and the result is
    the parsed head (its ``Coiteration``, the two coordinates, the minimum, the cursor arguments) for
    ``union_insert.match_union_insert`` to parse the branches."""
    head = _match_before(while_op)
    if isinstance(head, Decline):
        return head
    cursor_pos, bounds = head
    if len(cursor_pos) != 2:
        return Decline("not a two-finger union")
    after = while_op.after.blocks[0]
    if len(after.arguments) != 2 and not carried:
        return Decline("union carries values besides the cursors (sparse output or reduction)")
    cursor_args = [after.arguments[p] for p in cursor_pos]
    crd = [None, None]
    final = [None, None]
    chains = ([], [])
    level_of = {}
    lt = min_value = both = if_op = yield_op = None
    eqs = {}
    incs = {}
    nexts = [None, None]
    for op in after.operations:
        name = _name(op)
        operands = list(op.operation.operands)
        results = list(op.operation.results)
        if name == "memref.load" and len(operands) == 2 and operands[1] in cursor_args:
            side = cursor_args.index(operands[1])
            mtype = ir.MemRefType(operands[0].type)
            if crd[side] is not None or not _unit_stride_1d(mtype) or not defined_outside(operands[0], while_op):
                return Decline("coordinate loads are not one unit-stride, loop-invariant array per cursor")
            crd[side] = operands[0]
            final[side] = results[0]
            level_of[results[0]] = 0
        elif name in CAST_OPS and _side(operands[0], final) is not None:
            side = _side(operands[0], final)
            chains[side].append((name, results[0].type))
            level_of[results[0]] = level_of[operands[0]] + 1
            final[side] = results[0]
        elif name == "arith.cmpi" and _predicate(op) == CMPI_ULT and lt is None and \
                all(f is not None for f in final) and set(operands) == set(final):
            lt = results[0]
        elif name == "arith.select" and lt is not None and operands[0] == lt and min_value is None and \
                set(operands[1:]) == set(final):
            min_value = results[0]
        elif name == "arith.cmpi" and _predicate(op) == CMPI_EQ and min_value is not None and \
                min_value in operands and any(_side(v, final) is not None for v in operands):
            eqs[results[0]] = next(_side(v, final) for v in operands if _side(v, final) is not None)
        elif name == "arith.andi" and len(eqs) >= 2 and all(v in eqs for v in operands) and \
                {eqs[v] for v in operands} == {0, 1}:
            both = results[0]
        elif name == "scf.if":
            if if_op is not None or both is None or operands[0] != both:
                return Decline("union body is not guarded by the coordinate match")
            if_op = op
        elif name == "arith.addi" and operands[0] in cursor_args and const_int(operands[1]) == 1:
            incs[results[0]] = cursor_args.index(operands[0])
        elif name == "arith.select" and operands[0] in eqs and operands[1] in incs and \
                incs[operands[1]] == eqs[operands[0]] and operands[2] == cursor_args[eqs[operands[0]]]:
            nexts[eqs[operands[0]]] = results[0]
        elif name == "scf.yield":
            yield_op = op
        else:
            return Decline(f"union loop has unexpected op {name}")
    if any(v is None for v in (*crd, *nexts)) or min_value is None or if_op is None or yield_op is None:
        return Decline("not the sparsifier's two-finger union shape")
    if ir.MemRefType(crd[0].type).element_type != ir.MemRefType(crd[1].type).element_type or \
            [(n, str(t)) for n, t in chains[0]] != [(n, str(t)) for n, t in chains[1]]:
        return Decline("coordinate types differ")
    if not isinstance(final[0].type, ir.IndexType):
        return Decline("coordinates are not compared as index")
    if [yield_op.operation.operands[p] for p in cursor_pos] != nexts:
        return Decline("cursor advance is not select(eq, cursor + 1, cursor)")
    coord_level = dict(level_of)
    coord_level[min_value] = len(chains[0])
    head_match = Coiteration(
        while_op=while_op, cursor_pos=cursor_pos, bounds=bounds, crd_memrefs=tuple(crd),
        crd_type=ir.MemRefType(crd[0].type).element_type, cast_chain=tuple(chains[0]), coord_level=coord_level,
        if_op=if_op, then_ops=[], then_yield=[], acc_of_result={}, lane_loads={}, reductions={}, stores=[],
        element_type=None, kind="union-store", after_yield=yield_op, next_cursors=tuple(nexts))
    if carried:
        return head_match, final, min_value, cursor_args
    if len(if_op.operation.results):
        return Decline("union branches yield values")

    regions = if_op.operation.regions
    if not len(regions[1].blocks):
        return Decline("intersection (no else-region): not a union")
    nest_b = _single_if(regions[1].blocks[0])
    if nest_b is None or not (final[0] in nest_b[0].operation.operands and min_value in nest_b[0].operation.operands):
        return Decline("union else-region is not `scf.if kb == k`")
    inner_regions = nest_b[1].operation.regions
    if not len(inner_regions[1].blocks):
        return Decline("union has no only-C branch")
    nest_c = _single_if(inner_regions[1].blocks[0])
    if nest_c is None or not (final[1] in nest_c[0].operation.operands and min_value in nest_c[0].operation.operands):
        return Decline("union only-C branch is not `scf.if kc == k`")
    if len(nest_c[1].operation.regions[1].blocks) and len(list(nest_c[1].operation.regions[1].blocks[0].operations)) > 1:
        return Decline("union has a fourth branch")

    branches = []
    for what, owner, block in (("both", if_op, regions[0].blocks[0]),
                               ("only-B", nest_b[1], inner_regions[0].blocks[0]),
                               ("only-C", nest_c[1], nest_c[1].operation.regions[0].blocks[0])):
        branch = _branch(head_match, owner, block, after, cursor_args)
        if isinstance(branch, Decline):
            return Decline(f"{what} branch: {branch.reason}")
        branches.append(branch)
    if any(ll.side != 0 for ll in branches[1].lane_loads.values()) or \
            any(ll.side != 1 for ll in branches[2].lane_loads.values()):
        return Decline("an only-B / only-C branch reads the other operand")
    head_match.element_type = branches[0].element_type
    return Union(head_match, *branches)


def _guard(block, coord, k, results: int):
    """The nested ``scf.if`` of ``block`` when it is exactly [cmpi eq coord, k ; scf.if (``results`` results) ;
    yield its results], else None."""
    ops = list(block.operations)
    if len(ops) != 3 or _name(ops[0]) != "arith.cmpi" or _predicate(ops[0]) != CMPI_EQ or \
            set(ops[0].operation.operands) != {coord, k} or _name(ops[1]) != "scf.if" or \
            ops[1].operation.operands[0] != ops[0].operation.results[0] or \
            len(ops[1].operation.results) != results or list(ops[2].operation.operands) != list(ops[1].operation.results):
        return None
    return ops[1]


def union_branches(if_op, final, k, carried: list) -> tuple | Decline:
    """The three branch blocks (both, only B, only C) of a union loop's body ``if_op``: ``if both ... else
    (if kb == k: only B else (if kc == k: only C else yield carried))``, with ``final`` the two coordinates and
    ``carried`` what the unreachable fourth branch yields; a Decline naming what differs."""
    regions = if_op.operation.regions
    if not len(regions[1].blocks):
        return Decline("intersection (no else-region): not a union")
    n = len(if_op.operation.results)
    nest_b = _guard(regions[1].blocks[0], final[0], k, n)
    if nest_b is None or not len(nest_b.operation.regions[1].blocks):
        return Decline("union else-region is not `scf.if kb == k`")
    nest_c = _guard(nest_b.operation.regions[1].blocks[0], final[1], k, n)
    if nest_c is None or not len(nest_c.operation.regions[1].blocks):
        return Decline("union only-C branch is not `scf.if kc == k`")
    fourth = list(nest_c.operation.regions[1].blocks[0].operations)
    if len(fourth) != 1 or list(fourth[0].operation.operands) != list(carried):
        return Decline("union has a fourth branch")
    return (("both", regions[0].blocks[0]), ("only-B", nest_b.operation.regions[0].blocks[0]),
            ("only-C", nest_c.operation.regions[0].blocks[0]))

