"""Workload models, equations, the SimPy timeline, the fast evaluator, traces and analysis."""
