"""The planner: choose where every unit lives and is computed, under VRAM, pinned and RAM budgets.

`plan()` is pure and returns a frozen Plan (`feasible`, `reason`). Method: an integer program on the analytic model
(scipy.optimize.milp) gives candidates and a lower bound; the baselines are candidates too; a local search with the
fast evaluator refines the best; the SimPy timeline confirms it (`plan_with_report`).
"""
from planner.core import PlanReport, plan, plan_with_report

__all__ = ["plan", "plan_with_report", "PlanReport"]
