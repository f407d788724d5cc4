"""The exceptions splyce raises, defined once on the ground floor (every stage imports them from here) and
exported from ``splyce``. Each names the stage that refuses; all but ``AllocationFailed`` are ``ValueError``
subclasses, so code written against NumPy's and scipy's errors keeps working."""


class TraceError(ValueError):
    """A traced operation that cannot be compiled (shape mismatch, unsupported operation or operand)."""


class LoweringError(ValueError):
    """A trace that cannot be lowered (for example no loop order fits the operands' formats)."""


class NotCanonicalError(ValueError):
    """Coordinates unsorted or duplicated within a segment: the one defect a canonicalizing copy can fix."""


class AllocationFailed(MemoryError):
    """An allocation inside a kernel returned NULL; the kernel stopped and freed what it had allocated."""

    def __init__(self, nbytes: int):
        super().__init__(f"an allocation of {nbytes} bytes inside the kernel failed")
        self.nbytes = nbytes


__all__ = ["TraceError", "LoweringError", "NotCanonicalError", "AllocationFailed"]
