"""Kernels called on NumPy array objects: a compiled kernel's entry that takes ``id(arr)`` for each array and
loads its data pointer itself (``array_objects``: ~0.1 us an argument instead of ~0.6 us for the address), where
numpy's array layout was confirmed; else the kernel itself on data addresses. Shared by the stored-format
kernels (coo.py, dia.py, bsr.py), whose calls take tens of microseconds on small matrices."""

from __future__ import annotations

from splyce.native import array_objects
from splyce.native.array_objects import address as _address


def compile_on_objects(text: str, sig, name: str, kinds: str):
    """The kernel ``name`` of the IR ``text`` (``i64 name(...)``, ``sig`` its ctypes prototype on addresses),
    compiled for the host; ``kinds``: one letter per argument, ``'a'`` an array, ``'i'`` an i64. Call it with
    ``array_args(...)`` for the arrays."""
    from splyce.native.codegen import compile_host_helpers

    if array_objects.DATA_OFFSET is None:
        return compile_host_helpers(text, {name: sig})[name]
    entry = name + "_objects"
    text += array_objects.object_entry_ir(entry, name, kinds)
    return compile_host_helpers(text, {entry: array_objects.signature(len(kinds))})[entry]


def array_args(*arrays) -> tuple:
    """What a ``compile_on_objects`` kernel takes for each array (the caller keeps the arrays alive)."""
    if array_objects.DATA_OFFSET is None:
        return tuple(_address(a) for a in arrays)
    return tuple(map(id, arrays))
