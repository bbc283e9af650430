"""The eval app's outputs: the JSON report, the stdout table and the per-turn curves (PNG)."""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path
from typing import Any

from apps.eval.report import MetricsSummary, SampleRecord, select_turn, summarize

from apps.eval.config import EvalAppConfig
from apps.eval.rollout import EvalRun

__all__ = ["build_report", "format_table", "plot_turns", "write_report"]

log = logging.getLogger("apps.eval")


def _episodes(run: EvalRun) -> list[list[SampleRecord]]:
    return [ep for eps in run.episodes.values() for ep in eps]


def per_turn_summaries(run: EvalRun, cfg: EvalAppConfig) -> list[dict[str, Any]]:
    """For each turn t: metrics of every episode's answer at t (``last``) and of its best so far."""
    episodes = _episodes(run)
    return [{"turn": t,
             "last": summarize(select_turn(episodes, t, "last"), cfg.pass_k, cfg.fast_p),
             "best": summarize(select_turn(episodes, t, "best"), cfg.pass_k, cfg.fast_p)}
            for t in range(1, run.max_turns + 1)]


def _task_row(task: str, episodes: list[list[SampleRecord]]) -> dict[str, Any]:
    final = [ep[-1] for ep in episodes]
    best = [r for ep in episodes for r in ep if r.correct]
    faults: dict[str, int] = {}
    for r in final:
        faults[r.fault] = faults.get(r.fault, 0) + 1
    speed = [r.speedup for r in best if r.speedup is not None]
    vs_compile = [r.speedup_vs_compile for r in best if r.speedup_vs_compile is not None]
    return {"task": task, "samples": len(final), "extracted": sum(r.extracted for r in final),
            "compiled": sum(r.compiled for r in final), "correct": sum(r.correct for r in final),
            "correct_any_turn": sum(any(r.correct for r in ep) for ep in episodes),
            "best_speedup": max(speed, default=None), "best_speedup_vs_compile": max(vs_compile, default=None),
            "faults": dict(sorted(faults.items()))}


def _timing_status(run: EvalRun, best: MetricsSummary) -> str:
    if best.timed_correct:
        return "measured" if not best.untimed_correct else f"measured ({best.untimed_correct} correct untimed)"
    if best.untimed_correct:
        return "not measured (the CPU interpreter never times)" if any("cpu" in d for d in run.devices) \
            else "not measured"
    return "n/a (no correct sample to time)"


def build_report(cfg: EvalAppConfig, run: EvalRun, policy_name: str, wall_s: float) -> dict[str, Any]:
    """The JSON report: headline (final turn, last and best), per-turn curves, per-task rows, samples."""
    turns = per_turn_summaries(run, cfg)
    report: dict[str, Any] = {
        "policy": policy_name,
        "devices": sorted(run.devices),
        "timing": _timing_status(run, turns[-1]["best"]),
        "tasks": list(run.episodes),
        "samples_per_task": cfg.samples_per_task,
        "turns": run.max_turns,
        "context": cfg.context.model_dump() if cfg.turns.max_turns > 1 else None,
        "stop_reasons": dict(sorted(run.stop_reasons.items())),
        "final": turns[-1]["last"].model_dump(mode="json"),
        "best_over_turns": turns[-1]["best"].model_dump(mode="json"),
        "per_turn": [{"turn": t["turn"], "last": t["last"].model_dump(mode="json"),
                      "best": t["best"].model_dump(mode="json")} for t in turns],
        "per_task": [_task_row(name, eps) for name, eps in run.episodes.items()],
        "wall_s": round(wall_s, 3),
        # time inside generate / score calls, summed over the tasks in flight (so it can exceed wall_s)
        "busy_s": {"generate": round(run.generate_s, 3), "score": round(run.score_s, 3)},
        "config": cfg.model_dump(mode="json"),
    }
    if cfg.output.samples:
        report["samples"] = [r.model_dump(mode="json") for ep in _episodes(run) for r in ep]
    return report


def _path(cfg: EvalAppConfig, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() else Path(cfg.run_dir) / path


def write_report(cfg: EvalAppConfig, report: dict[str, Any]) -> Path:
    """Write the JSON report; returns its path."""
    path = _path(cfg, cfg.output.report)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    return path


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "n/a" if value is None else format(value, fmt)


def format_table(report: dict[str, Any]) -> str:
    """A readable summary: headline metrics, fast_p against both baselines, faults, per-task rows."""
    final = MetricsSummary.model_validate(report["final"])
    best = MetricsSummary.model_validate(report["best_over_turns"])
    multi = report["turns"] > 1
    turns = f" x {report['turns']} turns" if multi else ""
    devices = ", ".join(report["devices"]) or "n/a"
    lines = [f"policy {report['policy']} | {final.tasks} tasks x {final.samples_per_task} samples{turns}"
             f" | device {devices} | timing {report['timing']}"]
    head = f"{'metric':<26}{'final turn':>12}" + (f"{'best so far':>13}" if multi else "")
    lines += ["", head, "-" * len(head)]

    def row(label: str, a: float | None, b: float | None) -> None:
        lines.append(f"{label:<26}{_num(a):>12}" + (f"{_num(b):>13}" if multi else ""))

    row("code extracted", final.extract_rate, best.extract_rate)
    row("compile rate", final.compile_rate, best.compile_rate)
    row("correct rate (fast_0)", final.correct_rate, best.correct_rate)
    for k, value in final.pass_at_k.items():
        row(f"pass@{k}", value, best.pass_at_k[k])
    row("geomean speedup (eager)", final.geomean_speedup["eager"], best.geomean_speedup["eager"])
    row("geomean speedup (compile)", final.geomean_speedup["compile"], best.geomean_speedup["compile"])
    row("mean reward", final.mean_reward, best.mean_reward)
    head = (f"{'fast_p (final turn)':<26}{'eager/sample':>13}{'eager/best-n':>13}"
            f"{'compile/sample':>15}{'compile/best-n':>15}")
    lines += ["", head, "-" * len(head)]
    fp = final.fast_p
    for p in fp["per_sample"]["eager"]:
        lines.append(f"{f'fast_{p:g}':<26}{_num(fp['per_sample']['eager'][p]):>13}"
                     f"{_num(fp['best_of_n']['eager'][p]):>13}"
                     f"{_num(fp['per_sample']['compile'][p]):>15}{_num(fp['best_of_n']['compile'][p]):>15}")
    lines += ["", "faults (final turn): " + ", ".join(f"{k} {v}" for k, v in final.fault_counts.items())]
    if final.untimed_correct:
        lines.append(f"{final.untimed_correct} correct sample(s) without a measured speedup: fast_p for p > 0 "
                     f"counts them as not fast (n/a when no correct sample was timed)")
    head = f"{'task':<28}{'correct':>9}{'compiled':>10}{'best speedup':>14}{'vs compile':>12}"
    lines += ["", head, "-" * len(head)]
    for t in report["per_task"]:
        correct, compiled = f"{t['correct']}/{t['samples']}", f"{t['compiled']}/{t['samples']}"
        lines.append(f"{t['task']:<28}{correct:>9}{compiled:>10}"
                     f"{_num(t['best_speedup'], '.2f'):>14}{_num(t['best_speedup_vs_compile'], '.2f'):>12}")
    if multi:
        head = f"{'turn':<6}{'correct (last)':>16}{'correct (best)':>16}{'fast_1 (last)':>15}{'fast_1 (best)':>15}"
        lines += ["", head, "-" * len(head)]
        for t in report["per_turn"]:
            last, bst = t["last"], t["best"]
            lines.append(f"{t['turn']:<6}{_num(last['correct_rate']):>16}{_num(bst['correct_rate']):>16}"
                         f"{_num(_fast1(last)):>15}{_num(_fast1(bst)):>15}")
    return "\n".join(lines)


def _fast1(summary: dict[str, Any]) -> float | None:
    return summary["fast_p"]["per_sample"]["eager"].get("1.0")


def plot_turns(cfg: EvalAppConfig, report: dict[str, Any]) -> Path | None:
    """Per-turn curves: compile and correct rate of the answer at each turn and of the best so far,
    and fast_1 when timed. Returns the PNG's path (None when ``output.plot`` is null)."""
    if cfg.output.plot is None:
        return None
    try:
        import matplotlib
    except ImportError:  # the report is already written; a missing plotting library must not lose it
        log.warning("matplotlib is not installed: no per-turn plot (set output.plot: null to silence this)")
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = [t["turn"] for t in report["per_turn"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = report["per_turn"]
    # best-so-far underneath, wide and pale: where it equals the answer at the turn, both stay visible
    ax.plot(turns, [t["best"]["correct_rate"] for t in rows], color="C2", linewidth=5, alpha=0.35, marker="o",
            markersize=9, label="correct rate (best so far)")
    ax.plot(turns, [t["last"]["correct_rate"] for t in rows], color="C1", marker="o",
            label="correct rate (answer at turn)")
    ax.plot(turns, [t["last"]["compile_rate"] for t in rows], color="C0", linestyle="--", marker="o",
            label="compile rate (answer at turn)")
    for label, which, color in (("fast_1 (best so far)", "best", "C4"), ("fast_1 (answer at turn)", "last", "C3")):
        values = [_fast1(t[which]) for t in rows]
        if all(v is not None for v in values):
            ax.plot(turns, values, marker="s", color=color, linestyle=":", label=label)
    ax.set_xlabel("turn")
    ax.set_ylabel("fraction of samples (mean over tasks)")
    ax.set_xticks(turns)
    ax.set_ylim(-0.03, 1.03)
    title = (f"{Path(report['policy'].split(':', 1)[-1]).name or report['policy']}: {len(report['tasks'])} tasks x "
             f"{report['samples_per_task']} samples; timing {report['timing']}")
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=9)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = _path(cfg, cfg.output.plot)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
