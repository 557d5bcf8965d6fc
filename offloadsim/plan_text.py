"""The text of `offloadsim plan`: first what the user can run (each engine's fastest placement at the budgets, its
predicted time, the command or code that runs it, and which to pick), then the planner's details and the default
placements it was compared with. The JSON answer is assembled in commands_plan.py; this module only words it."""
from __future__ import annotations

from hwmodels.units import GiB
from sim.engines import engine_of
from sim.engines.base import RunRef

CLOSE = 0.10  # engines predicted within this fraction of each other: no clear pick (the predictions' typical error)

# the policies that are no engine's own: what each does, where it is printed
POLICY_WORDS = {
    "density": "greedy by traffic density: the units read most per byte go to VRAM first, then pinned RAM, then disk "
               "(Afterimage's default)",
    "resident": "every weight in VRAM",
    "stream": "every unit streamed from disk through pinned staging, copies overlapping compute",
}


def header(model, machine, budgets, w) -> str:
    return (f"{model.name} on {machine.name}: VRAM {budgets.vram_bytes / GiB:.2f} GiB, RAM {budgets.ram_bytes / GiB:.2f}"
            f" GiB, pinned {budgets.pinned_bytes / GiB:.2f} GiB; batch {w.batch}, prompt {w.prompt_tokens}, "
            f"{w.new_tokens} tokens")


def _recipes(plans: dict, base: RunRef) -> dict[str, tuple[list[str], str]]:
    """Each engine with a plan: (its command or code, what to replace or why it cannot run here)."""
    out = {}
    for name, ep in plans.items():
        if ep.plan is not None:
            ref = RunRef(base.model, base.ref, ep.plan, base.w, base.machine, base.budgets,
                         base.plan_file if ep.plan is base.plan else None)
            out[name] = engine_of(name).how_to_run(ref)
    return out


def _speed(ep, fastest: float) -> str:
    t = ep.time_per_token_s
    rel = "" if t == fastest else f"  ({t / fastest:.3g}x the fastest)"
    return f"{t:.4f} s per token, first token {ep.summary.get('ttft_s', float('nan')):.3f} s{rel}"


def deploy_lines(plans: dict, base: RunRef) -> list[str]:
    """The lead: each engine's best plan, its time, how to run it; then which to pick and why."""
    recipes = _recipes(plans, base)
    timed = sorted((n for n in plans if plans[n].plan is not None), key=lambda n: plans[n].time_per_token_s)
    fastest = plans[timed[0]].time_per_token_s if timed else 0.0
    lines = ["what to run: each engine's fastest placement at these budgets, its predicted time, and how to run it"]
    for name in timed:
        ep = plans[name]
        code, caveat = recipes[name]
        lines.append(f"  {engine_of(name).label:<20} {_speed(ep, fastest)}")
        lines += [f"      {c}" for c in code] + ([f"      ({caveat})"] if caveat else [])
    for name, ep in plans.items():
        if ep.plan is None:
            lines.append(f"  {engine_of(name).label:<20} cannot run: {ep.reason}")
    runnable = [n for n in timed if recipes[n][0]]
    lines.append(pick_line(plans, runnable))
    return lines


def pick_line(plans: dict, runnable: list[str]) -> str:
    """Which engine to pick and why: the fastest that can run the model here, unless the next is within CLOSE."""
    if not runnable:
        return "pick: none of the engines can run this model at these budgets; raise --vram or --ram."
    first = engine_of(runnable[0]).label
    if len(runnable) == 1:
        return f"pick {first}: the only engine that can run this model here."
    t0, t1 = plans[runnable[0]].time_per_token_s, plans[runnable[1]].time_per_token_s
    second = engine_of(runnable[1]).label
    if t1 <= t0 * (1 + CLOSE):
        return (f"pick {first} or {second}: predicted within {t1 / t0 - 1:.0%} of each other, inside the predictions' "
                "typical error; take the one you already have installed.")
    return f"pick {first}: predicted {t1 / t0:.3g}x faster than {second}, the next fastest, at these budgets."


def planner_lines(rep, plan, s: dict) -> list[str]:
    """The planner's plan (offloadsim's runner) in detail, with the gap explained where it is printed."""
    return [f"the planner's plan (offloadsim's runner): {s['time_per_token_s']:.4f} s per token, first token "
            f"{s['ttft_s']:.3f} s; prefetch {plan.prefetch_depth}, {plan.vram_slots} VRAM slots, {plan.pinned_slots} "
            "pinned slots",
            f"  lower bound on the request {rep.lower_bound_s:.3f} s vs simulated {s['total_s']:.3f} s: gap "
            f"{rep.gap:.1%} (how far the simulated time is above a bound no plan can beat; the best plan lies between)",
            f"  planned in {rep.seconds:.2f} s; search {'converged' if rep.converged else 'NOT converged'} "
            f"(stopped: {rep.stopped}) after {rep.evaluations} plans scored; chosen from {rep.chosen_from}"]


def _policy_words(name: str) -> str:
    if name in POLICY_WORDS:
        return POLICY_WORDS[name]
    e = engine_of(name)
    return f"{e.label} with {e.default_placement}"


def baseline_lines(baselines: dict, planner_s: float) -> list[str]:
    """The default placements the planner was compared with, each named and described: an engine's is what it does
    with no plan, priced with that engine (its best placement is the one under 'what to run')."""
    lines = ["default placements against the planner's plan (an engine's row here is what it does with no plan; its "
             "best placement is under 'what to run'):"]
    for name, v in baselines.items():
        t = v.get("time_per_token_s")
        head = f"{t:.4f} s per token  ({t / planner_s:.2f}x the planner)" if t is not None else "cannot run"
        lines.append(f"  {name:<11} {head}  {_policy_words(name)}")
        if t is None:
            lines.append(f"              {v['error']}")
    return lines
