"""Validation: a real PyTorch streaming engine that executes plans, a calibrator, and predicted-vs-measured reports.
The only package that imports torch (lazily, inside its modules)."""
