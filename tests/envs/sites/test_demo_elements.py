"""The compact element records demonstrations and rollouts store (`compact_elements`): what the
decision heads read. tests/recipes/test_demos.py checks real oracle demos carry them."""
from webrl.envs.observation import compact_elements

CONTRACT_SELECT = {"id": 3, "tag": "select", "role": "combobox", "name": "Size", "type": "", "value": "M",
                   "placeholder": "", "href": "", "dom_id": "size", "checked": None,
                   "options": ["S", "M", "L"], "selected": "M", "bbox": [10.4, 20, 30, 40.6],
                   "in_viewport": True}
CONTRACT_LINK = {"id": 4, "tag": "a", "role": "link", "name": "Home", "type": "", "value": "",
                 "placeholder": "", "href": "http://127.0.0.1/x" * 20, "dom_id": "", "checked": None,
                 "options": [], "selected": "", "bbox": [0, 500, 50, 20], "in_viewport": False}


def test_compact_elements_keeps_what_the_heads_read():
    from webrl.policy.types import SoMElement

    select, link = compact_elements([CONTRACT_SELECT, CONTRACT_LINK])
    # bbox rounded to whole pixels; options kept for the select only; no href / value / dom_id
    assert select == {"id": 3, "bbox": [10, 20, 30, 41], "role": "combobox", "tag": "select", "name": "Size",
                      "in_viewport": True, "options": ["S", "M", "L"], "selected": "M"}
    assert link == {"id": 4, "bbox": [0, 500, 50, 20], "role": "link", "tag": "a", "name": "Home",
                    "in_viewport": False}
    assert SoMElement.from_dict(select) == SoMElement(3, (10.0, 20.0, 30.0, 41.0), ("S", "M", "L"), "combobox", "Size")
