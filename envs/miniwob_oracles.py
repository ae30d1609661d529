"""Scripted MiniWoB++ solvers: `ORACLES[task](observation) -> Action | None`.

Each solver reads the live observation (goal, step, and `elements` as the observation
contract defines them: Set-of-Mark ids with tag / role / name / type / value / checked /
options / selected) and returns the next action. Targets are found by accessible name, role,
tag or DOM id at run time — never by a fixed Set-of-Mark id — so a solver keeps working when
the layout, order or count of elements changes with the seed. Solvers are stateless: what is
already done is read back from the page (input values, checked boxes, selected options) or,
where the page shows nothing (which accordion section is open), from the step index.

They serve three purposes: the "every registered env has a reward-1 oracle" test, scripted
demonstrations for SFT warm-up, and a check that the env's action execution is faithful.
None returns when the observation does not contain what the solver expects. The element
lookup they share (`find`, `quoted`, `fill_then_submit`, ...) is `webrl.envs.miniwob_lookup`.
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from webrl.actions import Action
from webrl.envs.miniwob_lookup import (Observation, click, fill, fill_then_submit, find, named_button, quoted,
                                        submit_button, text_inputs)

ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2, "4th": 3, "5th": 4}


def solve_click_named_button(obs: Observation) -> Optional[Action]:
    """click-button / unicode-test / click-dialog-2: 'Click ... "NAME" ...' names a button."""
    names = quoted(obs["goal"])
    return click(named_button(obs["elements"], names[-1])) if names else None


def solve_click_button_words(obs: Observation) -> Optional[Action]:
    """click-test-2 / click-test-transfer: 'Click button ONE.'"""
    match = re.search(r"Click button (\w+)", obs["goal"])
    return click(find(obs["elements"], name=match.group(1), role="button")) if match else None


def solve_click_button_sequence(obs: Observation) -> Optional[Action]:
    """'Click button ONE, then click button TWO.' The page shows no trace of the first click,
    so the step index says which half is done."""
    order = re.findall(r"button (\w+)", obs["goal"])
    if len(order) != 2:
        return None
    return click(find(obs["elements"], name=order[min(int(obs.get("step", 0)), 1)], role="button"))


def solve_click_test(obs: Observation) -> Optional[Action]:
    """'Click the button.' — the only button."""
    return click(find(obs["elements"], role="button"))


def solve_click_dialog(obs: Observation) -> Optional[Action]:
    """'Close the dialog box by clicking the "x".'"""
    return click(named_button(obs["elements"], "x"))


def _choices(obs: Observation, kind: str) -> Optional[Action]:
    """Check the named boxes / radio ('Select a, b and c and click Submit.'), then Submit."""
    match = re.search(r"Select (.*) and click Submit\.", obs["goal"])
    if match is None:
        return None
    words = [w for w in re.split(r",\s*|\s+and\s+", match.group(1).strip()) if w]
    wanted = set() if words == ["nothing"] else set(words)
    for element in obs["elements"]:
        if element.get("type") == kind and bool(element.get("checked")) != (element.get("name") in wanted):
            return click(element)
    return click(submit_button(obs["elements"]))


def solve_click_checkboxes(obs: Observation) -> Optional[Action]:
    """click-checkboxes / -large / -transfer."""
    return _choices(obs, "checkbox")


def solve_click_option(obs: Observation) -> Optional[Action]:
    return _choices(obs, "radio")


def solve_click_tab(obs: Observation) -> Optional[Action]:
    """'Click on Tab #2.'"""
    match = re.search(r"(Tab #\d+)", obs["goal"])
    return click(find(obs["elements"], name=match.group(1), role="tab")) if match else None


def solve_click_widget(obs: Observation) -> Optional[Action]:
    """'Click on a "checkbox" widget.' (radio | checkbox | text | textarea | button)."""
    kind = quoted(obs["goal"])[0] if quoted(obs["goal"]) else ""
    by_kind = {"radio": dict(type="radio"), "checkbox": dict(type="checkbox"),
               "text": dict(tag="input", type="text"), "textarea": dict(tag="textarea"),
               "button": dict(tag="button")}
    return click(find(obs["elements"], **by_kind[kind])) if kind in by_kind else None


def solve_enter_text(obs: Observation) -> Optional[Action]:
    """enter-text / enter-text-dynamic: 'Enter "abc" into the text field and press Submit.'
    enter-text-2: 'Type "ABC" in all lower case letters ...'."""
    words = quoted(obs["goal"])
    if not words:
        return None
    target = words[0].lower() if "lower case" in obs["goal"] else words[0]
    target = target.upper() if "upper case" in obs["goal"] else target
    fields = text_inputs(obs["elements"])
    return fill_then_submit(obs["elements"], [(fields[0] if fields else None, target)],
                            submit_button(obs["elements"]))


def solve_enter_password(obs: Observation) -> Optional[Action]:
    """'Enter the password "pw" into both text fields and press submit.'"""
    words, elements = quoted(obs["goal"]), obs["elements"]
    fields = [e for e in elements if e.get("type") == "password"]
    if not words or len(fields) != 2:
        return None
    return fill_then_submit(elements, [(f, words[0]) for f in fields], submit_button(elements))


def solve_login_user(obs: Observation) -> Optional[Action]:
    """'Enter the username "u" and the password "p" into the text fields and press login.'"""
    words, elements = quoted(obs["goal"]), obs["elements"]
    if len(words) < 2:
        return None
    user = find(elements, dom_id="username") or find(elements, tag="input", type="text")
    password = find(elements, dom_id="password") or find(elements, type="password")
    return fill_then_submit(elements, [(user, words[0]), (password, words[1])],
                            submit_button(elements, "Login"))


def solve_focus_text(obs: Observation) -> Optional[Action]:
    """focus-text: 'Focus into the textbox.'; focus-text-2: 'Focus into the 2nd input textbox.'"""
    fields = text_inputs(obs["elements"])
    match = re.search(r"(\d)(?:st|nd|rd|th) input", obs["goal"])
    index = int(match.group(1)) - 1 if match else 0
    return click(fields[index]) if index < len(fields) else None


def solve_choose_from_list(obs: Observation) -> Optional[Action]:
    """choose-list: 'Select NAME from the list and click Submit.'"""
    match = re.search(r"Select (.+?) from the (?:scroll )?list", obs["goal"])
    select = find(obs["elements"], tag="select")
    if match is None or select is None:
        return None
    if select.get("selected") != match.group(1):
        return Action.select(int(select["id"]), match.group(1))
    return click(submit_button(obs["elements"]))


def solve_click_collapsible(obs: Observation) -> Optional[Action]:
    """'Expand the section below and click submit.' Step 0 opens the section (its header is
    an accordion tab named 'Section #N'); later steps click Submit."""
    if int(obs.get("step", 0)) == 0:
        header = next((e for e in obs["elements"] if e.get("role") == "tab"
                       and (e.get("name") or "").startswith("Section")), None)
        return click(header)
    return click(submit_button(obs["elements"]))


def solve_copy_paste(obs: Observation) -> Optional[Action]:
    """copy-paste: the one textarea; copy-paste-2: 'Copy the text from the 2nd text area ...'."""
    areas = [e for e in obs["elements"] if e.get("tag") == "textarea"]
    match = re.search(r"(\d(?:st|nd|rd|th)) text area", obs["goal"])
    index = ORDINALS.get(match.group(1), 0) if match else 0
    field = find(obs["elements"], dom_id="answer-input") or find(obs["elements"], tag="input", type="text")
    if index >= len(areas):
        return None
    return fill_then_submit(obs["elements"], [(field, areas[index].get("value", ""))],
                            submit_button(obs["elements"]))


def solve_sign_agreement(obs: Observation) -> Optional[Action]:
    """'Click the cancel button.' or 'Scroll to the bottom of the textarea, enter the name "N"
    then press "Agree"|"Cancel"'. The page shows nothing of the scroll (disabled fields are
    not in the element list), so step 0 scrolls and later steps fill and press."""
    goal, elements = obs["goal"], obs["elements"]
    if goal.startswith("Click the cancel button"):
        return click(find(elements, name="Cancel", role="button"))
    words = quoted(goal)
    area = find(elements, tag="textarea")
    if len(words) != 2 or area is None:
        return None
    if int(obs.get("step", 0)) == 0:  # the form stays disabled until the text is scrolled through
        return Action.scroll("down", 10.0, element=int(area["id"]))
    name_field = find(elements, dom_id="name") or find(elements, tag="input", type="text")
    return fill_then_submit(elements, [(name_field, words[0])], find(elements, name=words[1], role="button"))


def solve_use_spinner(obs: Observation) -> Optional[Action]:
    """'Select -7 with the spinner and hit Submit.' The spinner ignores typed keys, so the
    solver steps with its arrow buttons (jQuery UI puts the up arrow before the down arrow)."""
    match = re.search(r"Select (-?\d+) with the spinner", obs["goal"])
    spinner = find(obs["elements"], role="spinbutton") or find(obs["elements"], dom_id="spinner")
    arrows = [e for e in obs["elements"] if e.get("tag") == "a" and e.get("role") == "button"]
    if match is None or spinner is None or len(arrows) != 2:
        return None
    try:
        current = int(spinner.get("value") or 0)
    except ValueError:
        return None
    target = int(match.group(1))
    if current != target:
        return click(arrows[0] if current < target else arrows[1])
    return click(submit_button(obs["elements"]))


def solve_enter_date(obs: Observation) -> Optional[Action]:
    """'Enter 05/20/2010 as the date and hit submit.' A date input takes the digits in its
    field order (mm dd yyyy) and reports its value as ISO 2010-05-20."""
    match = re.search(r"(\d\d)/(\d\d)/(\d{4})", obs["goal"])
    field = find(obs["elements"], tag="input", type="date")
    if match is None or field is None:
        return None
    month, day, year = match.groups()
    if field.get("value") != f"{year}-{month}-{day}":
        return fill(field, month + day + year)
    return click(submit_button(obs["elements"]))


def solve_enter_time(obs: Observation) -> Optional[Action]:
    """'Enter 9:37 PM as the time and press submit.' A time input takes hh mm AM/PM keys and
    reports its value as 24-hour 21:37."""
    match = re.search(r"(\d{1,2}):(\d\d) ?(AM|PM)", obs["goal"])
    field = find(obs["elements"], tag="input", type="time")
    if match is None or field is None:
        return None
    hour, minute, half = int(match.group(1)), match.group(2), match.group(3)
    hour24 = hour % 12 + (12 if half == "PM" else 0)
    if field.get("value") != f"{hour24:02d}:{minute}":
        return fill(field, f"{hour:02d}{minute}{half}")
    return click(submit_button(obs["elements"]))


def solve_click_link(obs: Observation) -> Optional[Action]:
    """'Click on the link "Eget".' Links are styled spans; names differ in case ("eget" is a decoy)."""
    names = quoted(obs["goal"])
    if not names:
        return None
    hits = [e for e in obs["elements"] if e.get("name") == names[0]]
    return click(hits[0]) if hits else None


def solve_navigate_tree(obs: Observation) -> Optional[Action]:
    """'... click on the folder or file named "NAME".' Click the item once it is shown; until then
    open folders depth first. All folders start collapsed, and opening one lists its children's
    expanders (unnamed `div`s) right after its own, so clicking the k-th expander at step k opens
    every folder exactly once in pre-order (the page shows no difference between an open empty
    folder and a closed one, hence the step index). A file of another name is never clicked: that
    ends the episode."""
    names = quoted(obs["goal"])
    if not names:
        return None
    elements = obs["elements"]
    items = [e for e in elements if e.get("tag") in ("li", "span") and e.get("name") == names[0]]
    if items:
        return click(items[0])
    expanders = [e for e in elements if e.get("tag") == "div" and not e.get("name")]
    step = int(obs.get("step", 0))
    return click(expanders[step]) if step < len(expanders) else None


def solve_email_inbox(obs: Observation) -> Optional[Action]:
    """'Find the email by NAME and reply to them with the text "T".' | '... forward that email to
    WHO.' | '... click the trash icon to delete it.' | '... click the star icon to mark it as
    important.' Always through the opened email: list (or search) -> email -> action. Read from
    the page which view is open (its controls' DOM ids) and what is typed; the trash and star
    icons are unnamed spans, trash before star in the email's action bar."""
    goal, elements = obs["goal"], obs["elements"]
    match = re.match(r"Find the email by (.+?) and (.*)$", goal)
    if match is None:
        return None
    sender, task = match.group(1).strip(), match.group(2)
    by_id = {e.get("dom_id"): e for e in elements if e.get("dom_id")}
    if "reply-text" in by_id or "forward-text" in by_id:  # the compose view: type, then send
        reply = "reply-text" in by_id
        if reply:
            text, box = (quoted(goal) or [None])[0], by_id["reply-text"]
        else:
            to = re.search(r"forward that email to (.+?)\.?$", task)
            text = to.group(1) if to else None
            box = next((e for e in elements if e.get("tag") == "input" and not e.get("dom_id")), None)
        if text is None or box is None:
            return None
        if box.get("value", "") != text:
            return fill(box, text)
        send = by_id.get("send-reply" if reply else "send-forward")
        return click(send) if send is not None else Action(kind="wait")  # its icon may still be loading
    if "close-email" in by_id:
        if task.startswith("reply"):
            return click(find(elements, name="Reply"))
        if task.startswith("forward"):
            return click(find(elements, name="Forward"))
        icons = [e for e in elements if e.get("tag") == "span" and not e.get("name") and not e.get("dom_id")]
        if len(icons) < 2:
            return Action(kind="wait")  # the icons are CSS images, unlisted until they load
        return click(icons[0] if "trash" in task else icons[1])
    threads = [e for e in elements if e.get("tag") == "div" and (e.get("name") or "").startswith(sender + " ")]
    if threads:
        return click(threads[0])
    field = by_id.get("search-input")
    if field is not None and field.get("value", "") != sender:
        return fill(field, sender)
    if "open-search" in by_id:
        return click(by_id["open-search"])
    return Action(kind="wait")  # between views (seen under load): look again


ORACLES: dict[str, Callable[[Observation], Optional[Action]]] = {
    "click-button": solve_click_named_button,
    "unicode-test": solve_click_named_button,
    "click-dialog-2": solve_click_named_button,
    "click-test-2": solve_click_button_words,
    "click-test-transfer": solve_click_button_words,
    "click-button-sequence": solve_click_button_sequence,
    "click-test": solve_click_test,
    "click-dialog": solve_click_dialog,
    "click-checkboxes": solve_click_checkboxes,
    "click-checkboxes-large": solve_click_checkboxes,
    "click-checkboxes-transfer": solve_click_checkboxes,
    "click-option": solve_click_option,
    "click-tab": solve_click_tab,
    "click-widget": solve_click_widget,
    "enter-text": solve_enter_text,
    "enter-text-2": solve_enter_text,
    "enter-text-dynamic": solve_enter_text,
    "enter-password": solve_enter_password,
    "login-user": solve_login_user,
    "focus-text": solve_focus_text,
    "focus-text-2": solve_focus_text,
    "choose-list": solve_choose_from_list,
    "click-collapsible": solve_click_collapsible,
    "copy-paste": solve_copy_paste,
    "copy-paste-2": solve_copy_paste,
    "sign-agreement": solve_sign_agreement,
    "use-spinner": solve_use_spinner,
    "enter-date": solve_enter_date,
    "enter-time": solve_enter_time,
    "click-link": solve_click_link,
    "navigate-tree": solve_navigate_tree,
    "email-inbox": solve_email_inbox,
}
