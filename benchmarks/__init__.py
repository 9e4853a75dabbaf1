"""attnviz benchmarks: `python -m benchmarks --help`.

Importing this package imports neither torch nor Qt; the measurement modules do, when run.
"""

SIZES_HELP = "tiny (smoke test), S = H8 L128 d512, M = H12 L1024 d768, L = H16 L2048 d1024, XL = H32 L4096 d2048"
