"""Validation: a real PyTorch streaming engine that executes plans, a calibrator, and predicted-vs-measured reports.
The only package that imports torch (lazily, inside its modules)."""

import os

# cuBLAS gives bit-reproducible results only with a fixed workspace configuration, read when its first handle is
# made: set it before any GEMM of this process (docs.nvidia.com/cuda/cublas, "Results reproducibility").
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
