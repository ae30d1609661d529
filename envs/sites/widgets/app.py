"""Widgets routes (Flask blueprint, mounted at /widgets): the control page built from the
episode's layout, the event endpoint the page's script reports to, and link targets."""
from __future__ import annotations

import random

from flask import Blueprint, abort, jsonify, render_template, request

from webrl.envs.sites.server import current_state
from webrl.envs.sites.state import STORE
from webrl.envs.sites.widgets.layout import finish_layout, new_control

blueprint = Blueprint("widgets", __name__, url_prefix="/widgets", template_folder="templates",
                      static_folder="static")


def demo_layout(seed: int) -> dict:
    """A page for someone browsing without a task: one control of each kind."""
    rng, used = random.Random(seed), set()
    kinds = ("text", "select", "radio", "checkbox", "slider", "tabs", "button", "link")
    controls = [new_control(rng, k, used) for k in kinds]
    for c in controls:
        if c["kind"] == "tabs":
            c["panels"] = {o: new_control(rng, "button", used)["label"] for o in c["options"]}
    return finish_layout(rng, controls, len(controls), used)


def _layout(state) -> dict:
    layout = state.params.get("layout")
    if layout is None:
        layout = state.params.setdefault("layout", demo_layout(state.seed))
    return layout


@blueprint.get("/")
def page():
    state = current_state()
    return render_template("widgets/page.html", layout=_layout(state), seed=state.seed)


@blueprint.post("/api/event")
def event():
    """{"type": "click"|"value"|"submit", "id": control id, "value": str, "values": {...},
    "seq": int}. Values arrive out of order from concurrent fetches: the highest seq wins."""
    data = request.get_json(force=True, silent=True) or {}
    state = current_state()
    with STORE.lock:  # concurrent fetches of one page: keep the seq check and the write together
        return _record(state, data)


def _record(state, data: dict):
    w = state.widgets
    seqs = state.params.setdefault("_seq", {})
    kind, cid, seq = data.get("type"), str(data.get("id", "")), int(data.get("seq", 0))
    if kind == "click":
        w.clicks.append(cid)
    elif kind == "value":
        if seq >= seqs.get(cid, -1):
            seqs[cid] = seq
            w.values[cid] = str(data.get("value", ""))
    elif kind == "submit":
        w.clicks.append(cid)
        snapshot = {str(k): str(v) for k, v in (data.get("values") or {}).items()}
        w.submissions.append(snapshot)
        w.values.update(snapshot)
    else:
        abort(400)
    return jsonify(ok=True)


@blueprint.get("/go/<cid>")
def follow(cid: str):
    state = current_state()
    controls = {c["id"]: c for c in _layout(state)["controls"] if c["kind"] == "link"}
    if cid not in controls:
        abort(404)
    state.widgets.links.append(cid)
    return render_template("widgets/linked.html", label=controls[cid]["label"])
