"""Widgets tasks: one page of form controls, generated per task, for one-step tasks and the
first rungs of a curriculum (few elements: 3-5 controls at level 0).

Kinds and the oracle's path (steps):
  level 0  click_button, click_link, type_text, set_checkbox, choose_radio, choose_option,
           open_tab (1 each)
  level 1  fill_submit (2), tab_button (2), slider (2-4: click, then arrow keys),
           two_checks_save (3), select_type_submit (3)
  level 2  form (6-9: several text fields, a dropdown, radio buttons, a checkbox, submit)

The page reports every click and value change to the server (`WidgetsState`); checkers read
that state. Chance for a level-0 click task with N controls is about 1/N (the page lists
3-5 controls, radio groups and tabs count once per option).
"""
from __future__ import annotations

import random

from webrl.actions import Action
from webrl.envs.tools import Tool, ToolParam
from webrl.envs.skills import SkillStep, Target
from webrl.envs.sites.common import CheckResult, click, ensure_selected, ensure_value, find, scroll_down
from webrl.envs.sites.widgets.layout import (TEXT_VALUES, finish_layout, in_split,
                                             new_control)

SUBMIT_LABELS = ("Submit", "Send", "Save changes", "Continue", "Done", "Register")


def _pick_option(rng, control, split, avoid=""):
    options = [o for o in in_split(control["options"], split, "widgets-option") if o != avoid]
    if not options:
        raise ValueError(f"no {split} option in {control['label']!r}: build the control with split={split!r}")
    return rng.choice(options)


def _value(rng, split):
    return rng.choice(in_split(TEXT_VALUES, split, "widgets-value"))


def _submit(rng, used):
    label = rng.choice([s for s in SUBMIT_LABELS if s not in used])
    used.add(label)
    return {"kind": "button", "label": label, "options": [], "initial": "", "panels": {},
            "submit": True, "last": True}


def _target_phrase(control, value) -> str:
    """How a goal asks for one control's value (used by the multi-control tasks)."""
    kind, label = control["kind"], control["label"]
    if kind == "text":
        return f'type "{value}" in "{label}"'
    if kind == "checkbox":
        return f'{"check" if value == "true" else "uncheck"} "{label}"'
    return f'choose "{value}" for {label}'


# -- generators ------------------------------------------------------------------------------
def _l0(rng, split, kind, total):
    used: set[str] = set()
    c = new_control(rng, kind, used, split)
    target = {"button": "", "link": "", "text": _value(rng, split), "checkbox": "",
              "radio": "", "select": "", "tabs": ""}[kind]
    if kind == "checkbox":
        target = "false" if c["initial"] == "true" else "true"
    elif kind in ("radio", "select"):
        target = _pick_option(rng, c, split)
    elif kind == "tabs":
        target = _pick_option(rng, c, split, avoid=c["initial"])
    layout = finish_layout(rng, [c], total, used)
    return c, target, layout


def gen_level0(rng, split, seed):
    kind = rng.choice(("button", "link", "text", "checkbox", "radio", "select", "tabs"))
    c, target, layout = _l0(rng, split, kind, rng.randint(3, 5))
    label = c["label"]
    goal = {"button": rng.choice(('Click the "{l}" button.', 'Press "{l}".')),
            "link": rng.choice(('Follow the "{l}" link.', 'Open the "{l}" page.')),
            "text": rng.choice(('Type "{v}" into the "{l}" field.', 'Enter "{v}" as {l}.')),
            "checkbox": 'Check the "{l}" box.' if target == "true" else 'Uncheck the "{l}" box.',
            "radio": rng.choice(('Select "{v}" for {l}.', 'Choose the "{v}" option under {l}.')),
            "select": rng.choice(('Choose "{v}" from the {l} dropdown.', 'Set {l} to "{v}".')),
            "tabs": rng.choice(('Open the "{v}" tab.', 'Switch to the "{v}" tab.'))}[kind]
    kinds = {"button": "click_button", "link": "click_link", "text": "type_text", "checkbox": "set_checkbox",
             "radio": "choose_radio", "select": "choose_option", "tabs": "open_tab"}
    params = {"kind": kinds[kind], "layout": layout, "targets": [[c["id"], target]]}
    return goal.format(l=label, v=target), "/widgets/", params


def gen_fill_submit(rng, split, seed):
    used: set[str] = set()
    c, value, sub = new_control(rng, "text", used, split), _value(rng, split), _submit(rng, used)
    layout = finish_layout(rng, [c, sub], rng.randint(3, 5), used, ("button", "link", "checkbox", "text"))
    goal = f'Enter "{value}" in the "{c["label"]}" field, then press "{sub["label"]}".'
    return goal, "/widgets/", {"kind": "submit_values", "layout": layout, "targets": [[c["id"], value]],
                               "submit": sub["id"]}


def gen_tab_button(rng, split, seed):
    used: set[str] = set()
    tabs = new_control(rng, "tabs", used, split)
    tab = _pick_option(rng, tabs, split, avoid=tabs["initial"])
    for option in tabs["options"]:
        tabs["panels"][option] = new_control(rng, "button", used, split if option == tab else "")["label"]
    layout = finish_layout(rng, [tabs], rng.randint(3, 4), used)
    k = tabs["options"].index(tab)
    goal = f'In the "{tab}" tab, click "{tabs["panels"][tab]}".'
    return goal, "/widgets/", {"kind": "tab_button", "layout": layout, "tab": tab,
                               "button": f"{tabs['id']}-btn-{k}", "tab_dom": f"{tabs['id']}-{k}"}


def gen_slider(rng, split, seed):
    used: set[str] = set()
    c = new_control(rng, "slider", used, split)
    value = str(rng.choice((2, 3, 4, 6, 7, 8)))
    layout = finish_layout(rng, [c], rng.randint(3, 4), used)
    goal = rng.choice(('Set the "{l}" slider to {v}.', 'Move the {l} slider to {v}.')).format(l=c["label"], v=value)
    return goal, "/widgets/", {"kind": "slider", "layout": layout, "targets": [[c["id"], value]]}


def gen_two_checks(rng, split, seed):
    used: set[str] = set()
    boxes = [new_control(rng, "checkbox", used, split) for _ in range(2)]
    sub = _submit(rng, used)
    layout = finish_layout(rng, boxes + [sub], rng.randint(4, 6), used, ("checkbox", "button", "link"))
    targets = [[b["id"], "false" if b["initial"] == "true" else "true"] for b in boxes]
    phrases = [_target_phrase(b, t) for b, (_, t) in zip(boxes, targets)]
    goal = f'{phrases[0].capitalize()} and {phrases[1]}, then click "{sub["label"]}".'
    return goal, "/widgets/", {"kind": "submit_values", "layout": layout, "targets": targets, "submit": sub["id"]}


def gen_select_type(rng, split, seed):
    used: set[str] = set()
    sel, text, sub = new_control(rng, "select", used, split), new_control(rng, "text", used, split), _submit(rng, used)
    option, value = _pick_option(rng, sel, split), _value(rng, split)
    layout = finish_layout(rng, [sel, text, sub], rng.randint(4, 6), used)
    goal = (f'Choose "{option}" for {sel["label"]} and type "{value}" in "{text["label"]}", '
            f'then press "{sub["label"]}".')
    return goal, "/widgets/", {"kind": "submit_values", "layout": layout,
                               "targets": [[sel["id"], option], [text["id"], value]], "submit": sub["id"]}


def gen_form(rng, split, seed):
    used: set[str] = set()
    texts = [new_control(rng, "text", used, split) for _ in range(rng.randint(2, 4))]
    sel, radio = new_control(rng, "select", used, split), new_control(rng, "radio", used, split)
    box = new_control(rng, "checkbox", used, split)
    sub = _submit(rng, used)
    wanted = [(t, _value(rng, split)) for t in texts]
    wanted += [(sel, _pick_option(rng, sel, split)), (radio, _pick_option(rng, radio, split))]
    if rng.random() < 0.7:
        wanted.append((box, "false" if box["initial"] == "true" else "true"))
    layout = finish_layout(rng, texts + [sel, radio, box, sub], len(texts) + 4 + rng.randint(1, 2), used,
                           ("button", "link", "checkbox"))
    targets = [[c["id"], v] for c, v in wanted]
    by_id = {c["id"]: c for c in layout["controls"]}
    phrases = [_target_phrase(by_id[cid], v) for cid, v in targets]
    goal = f'Fill in the {layout["title"].lower()} form: {", ".join(phrases)}; then press "{sub["label"]}".'
    return goal, "/widgets/", {"kind": "submit_values", "layout": layout, "targets": targets, "submit": sub["id"]}


GENERATORS = {0: (gen_level0,), 1: (gen_fill_submit, gen_tab_button, gen_slider, gen_two_checks, gen_select_type),
              2: (gen_form,)}


# -- checkers --------------------------------------------------------------------------------
def _values_ok(values: dict, targets) -> bool:
    return all(str(values.get(cid, "")).strip() == str(want) for cid, want in targets)


def check_click(params, state, answer):
    cid = params["targets"][0][0]
    return CheckResult(set(state.widgets.clicks) == {cid}, {"clicks": list(state.widgets.clicks)})


def check_link(params, state, answer):
    cid = params["targets"][0][0]
    return CheckResult(set(state.widgets.links) == {cid}, {"links": list(state.widgets.links)})


def check_values(params, state, answer):
    ok = _values_ok(state.widgets.values, params["targets"])
    return CheckResult(ok, {"values": dict(state.widgets.values)})


def check_submitted(params, state, answer):
    subs = state.widgets.submissions
    ok = bool(subs) and _values_ok(subs[-1], params["targets"]) and set(state.widgets.clicks) == {params["submit"]}
    return CheckResult(ok, {"last_submission": subs[-1] if subs else None, "clicks": list(state.widgets.clicks)})


def check_tab_button(params, state, answer):
    ok = set(state.widgets.clicks) == {params["button"]}
    return CheckResult(ok, {"clicks": list(state.widgets.clicks)})


CHECKERS = {"click_button": check_click, "click_link": check_link, "type_text": check_values,
            "set_checkbox": check_values, "choose_radio": check_values, "choose_option": check_values,
            "open_tab": check_values, "slider": check_values, "submit_values": check_submitted,
            "tab_button": check_tab_button}


# -- oracles ---------------------------------------------------------------------------------
def _control(params, cid):
    return next(c for c in params["layout"]["controls"] if c["id"] == cid)


def _set_value(params, obs, cid, want):
    """One action towards control `cid` holding `want`, or None when it already does."""
    c = _control(params, cid)
    if c["kind"] == "text":
        return ensure_value(find(obs, dom_id=cid), want)
    if c["kind"] == "select":
        return ensure_selected(find(obs, dom_id=cid), want)
    if c["kind"] == "checkbox":
        el = find(obs, dom_id=cid)
        if el is None:
            return scroll_down()
        return None if bool(el.get("checked")) == (want == "true") else click(el)
    if c["kind"] in ("radio", "tabs"):
        k = c["options"].index(want)
        el = find(obs, dom_id=f"{cid}-{k}")
        if el is None:
            return scroll_down()
        done = el.get("checked") if c["kind"] == "radio" else find(obs, dom_id=f"{cid}-panel-{k}-link") is not None
        return None if done else click(el)
    if c["kind"] == "slider":
        el = find(obs, dom_id=cid)
        if el is None:
            return scroll_down()
        value = int(float(el.get("value") or 0))
        if value == int(want):
            return None
        if str(value) == c["initial"]:
            return click(el)
        return Action("press", text="ArrowRight" if value < int(want) else "ArrowLeft")
    raise ValueError(f"no value to set on a {c['kind']}")


def oracle_click(params, obs):
    if find(obs, dom_id="toast-dismiss") is not None:
        return Action.stop()
    el = find(obs, dom_id=params["targets"][0][0])
    return click(el) if el is not None else scroll_down()


def oracle_link(params, obs):
    if "/widgets/go/" in obs.get("url", ""):
        return Action.stop()
    return oracle_click(params, obs)


def oracle_values(params, obs):
    for cid, want in params["targets"]:
        act = _set_value(params, obs, cid, want)
        if act is not None:
            return act
    return Action.stop()


def oracle_submit(params, obs):
    if find(obs, dom_id="toast-dismiss") is not None:
        return Action.stop()
    act = oracle_values(params, obs)
    if act.kind != "stop":
        return act
    el = find(obs, dom_id=params["submit"])
    return click(el) if el is not None else scroll_down()


def oracle_tab_button(params, obs):
    if find(obs, dom_id="toast-dismiss") is not None:
        return Action.stop()
    el = find(obs, dom_id=params["button"])
    if el is not None:
        return click(el)
    tab = find(obs, dom_id=params["tab_dom"])
    return click(tab) if tab is not None else scroll_down()


ORACLES = {"click_button": oracle_click, "click_link": oracle_link, "type_text": oracle_values,
           "set_checkbox": oracle_values, "choose_radio": oracle_values, "choose_option": oracle_values,
           "open_tab": oracle_values, "slider": oracle_values, "submit_values": oracle_submit,
           "tab_button": oracle_tab_button}


# -- tools (webrl.envs.tools; shown only with WebEnvConfig.tools="task") -------------------------
TOOLS = (Tool("fill_field", "Type text into the field with this label, then move the focus on (a macro)",
              params=(ToolParam("field", description="the field's label"), ToolParam("text")),
              kind="macro", steps=(SkillStep("type", Target(name="{field}"), text="{text}"),
                                   SkillStep("press", text="Tab"))),)
