"""The benchmark suite behind ``python -m splyce.bench`` (see ``python -m splyce.bench --help``).

One module per subcommand (``kernels``, ``ablation``, ``width``, ``sparsity``, ``real``, ``threads``), each with
``run(Config) -> Result``; the shared methodology (warm-up, checks, interleaved repeats, machine info, output
files) is in :mod:`splyce.bench.common`.
"""

from splyce.bench.common import BenchMismatch, Config, Result, machine_info, measure

__all__ = ["BenchMismatch", "Config", "Result", "machine_info", "measure"]
