"""The paper's five kernels (docs/kernels.md) as jitted functions, with their operands' formats and data.

``KERNELS[name]`` gives the NumPy-style function, a builder of random operands at a size and density, and a
NumPy dense reference. The benchmark, notebooks and tests all use these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from splyce.tensors.formats import CSC, CSR, SPARSE_VECTOR, csf
from splyce.tensors.tensor import asarray


def spgemm(B, C):
    """K1: A[i,j] = sum_k B[i,k] C[k,j] (B CSR, C CSC: an inner-product SpGEMM)."""
    from splyce.api import einsum

    return einsum("ik,kj->ij", B, C, order="ijk")   # the inner-product formulation, as the paper runs it


def spmspv(B, c):
    """K2: a[i] = sum_k B[i,k] c[k] (B CSR, c a compressed vector)."""
    from splyce.api import einsum

    return einsum("ik,k->i", B, c, order="ik")


def spmttkrp(B, C, D):
    """K3: A[i,j] = sum_{k,l} B[i,k,l] C[k,j] D[l,j] (B CSF, C dense, D stored (j dense, l compressed))."""
    from splyce.api import einsum

    return einsum("ikl,kj,lj->ij", B, C, D, order="ijkl")


def spmmh(B, C):
    """K4: A[i,j] = B[i,j] C[i,j] (both CSR); the benchmark measures it with a dense output."""
    from splyce.api import einsum

    return einsum("ij,ij->ij", B, C, out_format="dense", order="ij")


def spttspm(B, C):
    """K5: A[i,j,l] = sum_k B[i,j,k] C[k,l] (B CSF, C CSC)."""
    from splyce.api import einsum

    return einsum("ijk,kl->ijl", B, C, order="ijlk")


def _sparse(rng, shape, density, dtype):
    """Uniform random nonzeros (sorted, unique coordinates), values in [-1, 1) without zeros."""
    size = int(np.prod(shape))
    nnz = int(round(density * size))
    flat = np.sort(rng.choice(size, size=nnz, replace=False)) if size else np.zeros(0, np.int64)
    dense = np.zeros(size, dtype=dtype)
    vals = rng.uniform(0.5, 1.0, nnz) * rng.choice([-1.0, 1.0], nnz)
    dense[flat] = vals.astype(dtype)
    return dense.reshape(shape)


# Dimension-to-level order (j dense, l compressed) for D[l, j].
D_FORMAT = CSC


def _k1(n, density, dtype, rng):
    B = _sparse(rng, (n, n), density, dtype)
    C = _sparse(rng, (n, n), density, dtype)
    return [(B, CSR), (C, CSC)]


def _k2(n, density, dtype, rng):
    B = _sparse(rng, (n, n), density, dtype)
    c = _sparse(rng, (n,), density, dtype)
    return [(B, CSR), (c, SPARSE_VECTOR)]


def _k3(sizes, density, dtype, rng):
    I, K, L, J = sizes
    B = _sparse(rng, (I, K, L), density, dtype)
    C = rng.uniform(-1, 1, (K, J)).astype(dtype)
    D = _sparse(rng, (L, J), density, dtype)
    return [(B, csf(3)), (C, None), (D, D_FORMAT)]


def _k4(sizes, density, dtype, rng):
    m, n = sizes
    return [(_sparse(rng, (m, n), density, dtype), CSR), (_sparse(rng, (m, n), density, dtype), CSR)]


def _k5(sizes, density, dtype, rng):
    I, J, K, L = sizes
    return [(_sparse(rng, (I, J, K), density, dtype), csf(3)), (_sparse(rng, (K, L), density, dtype), CSC)]


@dataclass(frozen=True)
class KernelSpec:
    name: str
    title: str
    fun: Callable
    make: Callable            # (size, density, dtype, rng) -> [(dense ndarray, Format | None)]
    reference: Callable       # dense NumPy operands -> dense result
    bench_size: object        # benchmark size for 2-core machines (docs/kernels.md)
    quick_size: object        # small, fibers still long enough for the fast lane

    def operands(self, size=None, density=0.05, dtype=np.float64, seed=0, index_width=32):
        """Random operands as splyce tensors in the kernel's formats (dense operands stay NumPy)."""
        rng = np.random.default_rng(seed)
        size = self.bench_size if size is None else size
        out = []
        for dense, fmt in self.make(size, density, np.dtype(dtype), rng):
            if fmt is None:
                out.append(dense)
            else:
                out.append(asarray(dense, format=fmt.with_widths(index_width, index_width)))
        return out


KERNELS = {
    "K1": KernelSpec("K1", "SpGEMM", spgemm, _k1, lambda B, C: B @ C, 2000, 256),
    "K2": KernelSpec("K2", "SpMSpV", spmspv, _k2, lambda B, c: B @ c, 20000, 2048),
    "K3": KernelSpec("K3", "SpMTTKRP", spmttkrp, _k3,
                     lambda B, C, D: np.einsum("ikl,kj,lj->ij", B, C, D), (64, 64, 4000, 32), (8, 8, 1024, 8)),
    "K4": KernelSpec("K4", "SpMMH", spmmh, _k4, lambda B, C: B * C, (4000, 20000), (64, 4096)),
    "K5": KernelSpec("K5", "SpTTSpM", spttspm, _k5,
                     lambda B, C: np.einsum("ijk,kl->ijl", B, C), (48, 48, 4000, 64), (6, 6, 1024, 8)),
}
