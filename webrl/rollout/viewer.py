"""A static HTML page per run for reading trajectories: `webrl view RUN_DIR`.

For each trajectory: goal, outcome and status (dropped ones with their reason); for each turn the
screenshot the model saw with the executed action drawn on it (the element's box, or the
clicked point), the model's text and the environment's feedback. Buttons filter by outcome.
The page is self-contained HTML with relative links to the images the trajectory log wrote, so
a run folder can be copied and opened anywhere.

Outcome: the reward the run's reward function gave (the log is written once a trajectory is
scored), else the env checker's `info.task_reward` (logs of older runs); "unscored" when neither
exists. Each trajectory also shows who scored it and how: the judge's verdict and its reason
(the judge's reply), or the checker's details.

Where the action is drawn comes from `Turn.observation` (`TurnObservation`): `action_bbox` =
[x, y, w, h] or `action_point` = [x, y] in screenshot pixels, and `screenshot_size` = [w, h].
"""
from __future__ import annotations

import html
import os
from pathlib import Path

from webrl.types import Trajectory, Turn, load_trajectories

TRAJECTORY_LOG = "trajectories/trajectories.jsonl"

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 20px;position:sticky;top:0;z-index:2}
header button{margin-left:6px;padding:4px 10px;border:0;border-radius:4px;cursor:pointer}
.traj{background:#fff;margin:16px 20px;padding:12px 16px;border-radius:8px;box-shadow:0 1px 3px #0002}
.traj h2{font-size:16px;margin:4px 0}.badge{padding:2px 8px;border-radius:10px;font-size:12px;color:#fff}
.success .badge{background:#1e8e3e}.failure .badge{background:#c5221f}.dropped .badge{background:#80868b}
.unscored .badge{background:#b06000}
.turns{display:flex;gap:12px;overflow-x:auto;padding:8px 0}
.turn{flex:0 0 360px;border:1px solid #dde;border-radius:6px;padding:8px;font-size:12px}
.shot{position:relative;width:100%}.shot img{width:100%;display:block}
.mark{position:absolute;border:2px solid #ff2d55;background:#ff2d5522}
.point{position:absolute;width:12px;height:12px;margin:-6px 0 0 -6px;border-radius:6px;background:#ff2d55}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:6px;margin:4px 0}
.hidden{display:none}
"""
_SCRIPT = """
function show(kind){document.querySelectorAll('.traj').forEach(function(t){
  t.classList.toggle('hidden', kind!=='all' && !t.classList.contains(kind));});}
"""


OUTCOMES = ("success", "failure", "unscored", "dropped")


def _outcome(traj: Trajectory) -> str:
    if traj.status == "dropped":
        return "dropped"
    score = traj.reward if traj.reward is not None else traj.info.task_reward
    if score is None:
        return "unscored"
    return "success" if score > 0 else "failure"


def _verdict(traj: Trajectory) -> tuple[str, str]:
    """(who scored the trajectory and what they said, their reason): "judge action_history:
    SUCCESS" with the judge's reply, "checker: reward 1.0" with its details, or "unscored"."""
    details = traj.reward_details or {}
    if "judge" in details:
        said = "unparseable reply" if details.get("unparseable") else (
            "SUCCESS" if (traj.reward or 0) > 0 else "NOT SUCCESS" if traj.reward is not None else "no verdict")
        return f"judge {details['judge']}: {said}", str(details.get("reason") or details.get("reply") or "")
    if traj.reward is not None:
        rest = {k: v for k, v in details.items() if k != "reason"}
        return f"reward {traj.reward:g}", str(details.get("reason") or (rest if rest else ""))
    return "unscored", ""


def _overlay(turn: Turn) -> str:
    obs = turn.observation
    size = obs.screenshot_size
    if not size or not size[0] or not size[1]:
        return ""
    w, h = float(size[0]), float(size[1])
    if obs.action_bbox:
        x, y, bw, bh = obs.action_bbox
        return (f'<div class="mark" style="left:{100 * x / w:.2f}%;top:{100 * y / h:.2f}%;'
                f'width:{100 * bw / w:.2f}%;height:{100 * bh / h:.2f}%"></div>')
    if obs.action_point:
        x, y = obs.action_point
        return f'<div class="point" style="left:{100 * x / w:.2f}%;top:{100 * y / h:.2f}%"></div>'
    return ""


def _turn_html(i: int, turn: Turn, image_href: str | None) -> str:
    action = turn.action.to_compact() if turn.action is not None else f"parse error: {turn.parse_error}"
    shot = (f'<div class="shot"><img src="{html.escape(image_href)}" loading="lazy">{_overlay(turn)}</div>'
            if image_href else "<div>(no screenshot)</div>")
    return (f'<div class="turn"><b>turn {i}</b> · v{turn.policy_version} · {html.escape(turn.decided_by)}'
            f'{shot}<div><b>action</b> <code>{html.escape(action)}</code></div>'
            f'<pre>{html.escape(turn.response_text)}</pre>'
            f'<div><b>feedback</b></div><pre>{html.escape(turn.feedback)}</pre></div>')


def render_run(trajectories: list[Trajectory], image_base: str, title: str) -> str:
    """The page's HTML. `image_base` is the relative folder holding the logged images."""
    counts = {k: sum(_outcome(t) == k for t in trajectories) for k in OUTCOMES}
    blocks = []
    for traj in trajectories:
        kind = _outcome(traj)
        turns = []
        for i, turn in enumerate(traj.turns):
            href = f"{image_base}/{turn.images[-1].digest}.{turn.images[-1].format}" if turn.images else None
            turns.append(_turn_html(i, turn, href))
        verdict, reason = _verdict(traj)
        reason = traj.drop_reason if kind == "dropped" else reason
        blocks.append(
            f'<section class="traj {kind}"><h2><span class="badge">{kind}</span> '
            f'{html.escape(traj.task_id)} · reward {traj.reward} · checker {traj.info.task_reward} · '
            f'{len(traj.turns)} turns</h2>'
            f'<div><b>goal</b> {html.escape(traj.goal)}</div>'
            f'<div class="verdict"><b>verdict</b> {html.escape(verdict)}</div>'
            f'<div><b>reason</b> <pre>{html.escape(str(reason or ""))}</pre></div>'
            f'<div class="turns">{"".join(turns)}</div></section>')
    buttons = "".join(f'<button onclick="show(\'{k}\')">{k} ({n})</button>' for k, n in
                      [("all", len(trajectories)), *counts.items()])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>"
            f"<header><b>{html.escape(title)}</b> {buttons}</header>{''.join(blocks)}</body></html>")


def view_run(run_dir: str | Path) -> Path:
    """Write `<run_dir>/viewer/index.html` from the run's trajectory log and return its path."""
    run_dir = Path(run_dir)
    log = run_dir / TRAJECTORY_LOG
    if not log.exists():
        raise FileNotFoundError(f"no trajectory log at {log}: is {run_dir} a webrl run folder?")
    out = run_dir / "viewer" / "index.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    image_base = os.path.relpath(log.parent / "images", out.parent)
    out.write_text(render_run(load_trajectories(log), image_base, f"webrl run {run_dir.name}"))
    return out
