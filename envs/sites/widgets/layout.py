"""Widget pages: a page is a list of controls (dicts, JSON-able) generated from a seed.

Control dict: {"id": "c3", "kind": KIND, "label": str, "options": [str], "initial": str,
"panels": {tab: button label}} with KIND one of button, link, text, checkbox, radio, select,
tabs, slider. Labels and option words are the entities split into train and test
(`split_of`): the control a task targets is always labelled from the task's split, the
distractors from either split.
"""
from __future__ import annotations

import random

from webrl.envs.sites.common import split_of

BUTTONS = ("Save", "Cancel", "Submit", "Delete", "Next", "Back", "Apply", "Reset", "Download",
           "Share", "Subscribe", "Continue", "Confirm", "Edit", "Archive", "Print", "Refresh",
           "Upload", "Send", "Close", "Preview", "Publish", "Retry", "Export", "Import",
           "Copy link", "Save draft", "Add item", "Remove item", "Sign in", "Sign up", "Log out",
           "Show more", "Load more", "Accept", "Decline", "Start trial", "Book now", "Follow",
           "Like", "Reply", "Report", "Mute", "Pin", "Undo", "Redo", "Zoom in", "Zoom out",
           "Play", "Pause", "Skip", "Shuffle", "Mark as read", "Invite", "Join", "Rename")
LINKS = ("Privacy policy", "Terms of service", "Help center", "Contact us", "About us", "Careers",
         "Blog", "Pricing", "Documentation", "Status page", "Press kit", "Cookie settings",
         "Accessibility", "Sitemap", "Community forum", "Release notes", "Security", "Partners",
         "Investors", "Gift cards", "Store locator", "Returns", "Shipping info", "FAQ",
         "Tutorials", "Newsletter archive", "Developers", "Affiliates", "Events", "Support")
TEXT_FIELDS = ("First name", "Last name", "City", "Nickname", "Company", "Job title",
               "Favourite colour", "Promo code", "Username", "Street", "Country", "Team name",
               "Project name", "Pet's name", "Display name", "School", "Hobby", "Message")
TEXT_VALUES = ("ocean", "maple", "lantern", "harbor", "velvet", "copper", "meadow", "falcon",
               "orchid", "pebble", "saffron", "thunder", "willow", "amber", "cobalt", "juniper",
               "marble", "nectar", "quartz", "rowan", "sierra", "tango", "umber", "violet",
               "zephyr", "birch", "cedar", "delta", "ember", "fjord", "glade", "hazel", "indigo",
               "jasper", "kestrel", "lotus", "mango", "nova", "opal", "prairie", "river", "summit")
CHECKBOXES = ("Email me updates", "Remember me", "I agree to the terms", "Enable notifications",
              "Dark mode", "Show prices with tax", "Send SMS alerts", "Make profile public",
              "Auto-play videos", "Use metric units", "Weekly digest", "Two-factor authentication",
              "Hide offline contacts", "Compact view", "Show tips", "Sync contacts",
              "Save payment details", "Allow cookies", "Beta features", "Large text", "Show avatars",
              "Play sounds", "Mute mentions", "Hide read items", "Open links in new tab",
              "Share usage data", "Show seconds", "Start on login", "Private mode", "Auto-save")
RADIOS = (("Size", ("Small", "Medium", "Large", "X-Large")),
          ("Delivery", ("Standard", "Express", "Pickup")), ("Plan", ("Free", "Basic", "Pro", "Team")),
          ("Payment", ("Card", "PayPal", "Bank transfer")), ("Theme", ("Light", "Dark", "System")),
          ("Frequency", ("Daily", "Weekly", "Monthly")), ("Priority", ("Low", "Normal", "High", "Urgent")),
          ("Seat", ("Window", "Aisle", "Middle")), ("Level", ("Beginner", "Intermediate", "Advanced")),
          ("Contact method", ("Email", "Phone", "Post")), ("Crust", ("Thin", "Classic", "Deep pan")))
SELECTS = (("Country", ("Portugal", "Norway", "Japan", "Canada", "Kenya", "Chile", "Poland", "Egypt")),
           ("Month", ("January", "March", "May", "July", "September", "November")),
           ("Currency", ("Euro", "Dollar", "Yen", "Krone", "Peso", "Rand")),
           ("Department", ("Sales", "Support", "Finance", "Legal", "Marketing", "Research")),
           ("Language", ("English", "Spanish", "German", "French", "Italian", "Dutch")),
           ("Topping", ("Cheese", "Mushroom", "Olive", "Pepper", "Onion", "Pineapple")),
           ("Font", ("Arial", "Georgia", "Verdana", "Courier", "Tahoma")))
TABS = (("Overview", "Details", "Reviews", "Shipping"), ("Profile", "Security", "Billing", "Alerts"),
        ("Inbox", "Sent", "Drafts", "Spam"), ("Today", "Week", "Month"), ("General", "Privacy", "Advanced"),
        ("Photos", "Videos", "Music", "Files"))
SLIDERS = ("Volume", "Brightness", "Zoom", "Temperature", "Speed", "Budget", "Contrast", "Bass",
           "Treble", "Opacity", "Saturation", "Balance", "Sensitivity", "Font size", "Tip", "Difficulty")
TITLES = ("Account settings", "Newsletter sign-up", "Support ticket", "Order preferences",
          "Profile editor", "Event registration", "Notification centre", "Team workspace",
          "Booking options", "Feedback form", "Display settings", "Project setup")


# Kinds whose label is the entity a task targets (text fields: the typed value is).
SPLIT_BY_LABEL = ("button", "link", "checkbox", "slider")


def in_split(values, split: str, salt: str) -> list:
    return [v for v in values if split_of(v if isinstance(v, str) else v[0], salt) == split]


def new_control(rng: random.Random, kind: str, used: set[str], split: str = "") -> dict:
    """A control of `kind` whose label is unused on the page (from `split` when given)."""
    pools = {"button": BUTTONS, "link": LINKS, "text": TEXT_FIELDS, "checkbox": CHECKBOXES,
             "radio": RADIOS, "select": SELECTS, "tabs": TABS, "slider": SLIDERS}
    label_of = lambda item: item if isinstance(item, str) else (item[0] if kind != "tabs" else "/".join(item))  # noqa: E731
    pool = [x for x in pools[kind] if label_of(x) not in used]
    if split and kind in SPLIT_BY_LABEL:
        pool = [x for x in pool if split_of(label_of(x), f"widgets-{kind}") == split] or pool
    elif split and kind in ("radio", "select", "tabs"):  # some option (not the initial tab) in the split
        pool = [x for x in pool if in_split(x[1] if kind != "tabs" else x[1:], split, "widgets-option")]
    item = rng.choice(pool)
    label = label_of(item)
    used.add(label)
    control = {"kind": kind, "label": label, "options": [], "initial": "", "panels": {}}
    if kind in ("radio", "select"):
        control["options"] = list(item[1])
        control["initial"] = "" if kind == "select" else ""
    elif kind == "tabs":
        control["options"] = list(item)
        control["label"] = "Sections"
        control["initial"] = item[0]
    elif kind == "checkbox":
        control["initial"] = rng.choice(("true", "false"))
    elif kind == "slider":
        control["initial"] = str(rng.choice((0, 10)))
    return control


def finish_layout(rng: random.Random, controls: list[dict], total: int, used: set[str],
                  kinds: tuple[str, ...] = ("button", "link", "text", "checkbox", "radio", "select")) -> dict:
    """Add distractors up to `total` controls, shuffle, number the ids; returns the page."""
    controls = list(controls)
    while len(controls) < total:
        controls.append(new_control(rng, rng.choice(kinds), used))
    rng.shuffle(controls)
    fixed = [c for c in controls if c.get("last")]
    controls = [c for c in controls if not c.get("last")] + fixed
    for i, c in enumerate(controls):
        c.setdefault("id", f"c{i}")
    return {"title": rng.choice(TITLES), "controls": controls}
