"""``python -m splyce.bench.spgemm_order MATRICES [REPEATS]``: what scipy's stored order costs the patched
sparse @ sparse (docs/scipy_patch.md). For each corpus matrix (comma-separated names, bench/corpus.py), ``A @ A``
by scipy, by the drop-in ``splyce.matmul`` (each row's columns in whichever order its faster kernel gives: what
``patch_scipy()`` served before it kept scipy's order) and by ``matmul_in_scipy_order`` (scipy's buffers, what
it serves now), interleaved in one process, the order rotated every repeat; medians and, in parentheses, the
ratios of the fastest samples. The scipy-order result is checked byte for byte against scipy's first."""

from __future__ import annotations

import statistics
import sys
import time


def main(argv: list[str]) -> None:
    import scipy.sparse as sps

    from splyce.bench import corpus
    from splyce.dropin import products

    names = argv[0].split(",")
    repeats = int(argv[1]) if len(argv) > 1 else 5
    entries = {e.name: e for e in corpus.entries()}
    print("| matrix | n | nnz(A) | nnz(A @ A) | scipy ms | any order ms | scipy order ms | scipy / any order "
          "| scipy / scipy order | scipy order / any order | any-order kernel |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        A = sps.csr_array(corpus.build(entries[name]))
        ref = A @ A
        ours = products.matmul_in_scipy_order(A, A)
        if (ours.indptr.tobytes(), ours.indices.tobytes(), ours.data.tobytes()) != (
                ref.indptr.tobytes(), ref.indices.tobytes(), ref.data.tobytes()):
            raise SystemExit(f"{name}: matmul_in_scipy_order's buffers differ from scipy's")
        products.matmul(A, A)
        kernel = products.last_spgemm_kernel
        fns = {"scipy": lambda: A @ A, "any": lambda: products.matmul(A, A),
               "scipy_order": lambda: products.matmul_in_scipy_order(A, A)}
        times = {k: [] for k in fns}
        for r in range(repeats):
            keys = list(fns)
            for k in keys[r % 3:] + keys[: r % 3]:
                t0 = time.perf_counter()
                fns[k]()
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}

        def ratio(x, y):
            return f"{med[x] / med[y]:.2f} ({best[x] / best[y]:.2f})"
        print(f"| {name} | {A.shape[0]} | {A.nnz} | {ref.nnz} | {med['scipy'] * 1e3:.2f} | {med['any'] * 1e3:.2f} | "
              f"{med['scipy_order'] * 1e3:.2f} | {ratio('scipy', 'any')} | {ratio('scipy', 'scipy_order')} | "
              f"{ratio('scipy_order', 'any')} | {kernel} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
