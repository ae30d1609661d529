"""Checkers on constructed server states: the exact target passes, every near miss fails.
Pure state tests, no browser and no server."""
import pytest

from webrl.envs.sites.common import answer_matches, normalize
from webrl.envs.sites.shop import tasks as shop
from webrl.envs.sites.state import SessionState
from webrl.envs.sites.travel import tasks as travel
from webrl.envs.sites.travel.world import flights_for
from webrl.envs.sites.widgets import tasks as widgets
from webrl.envs.sites.wiki import tasks as wiki

CART = {"kind": "add_variant", "pid": 1010, "size": "M", "colour": "Navy", "qty": 2}
FIELDS = {"full_name": "Ana Silva", "email": "ana.silva@example.com", "address": "12 Mill Road",
          "city": "Porto", "postal_code": "4050-123"}
ORDER = {"kind": "checkout", "pid": 1010, "size": "M", "colour": "Navy", "qty": 1, "fields": FIELDS,
         "shipping": "express"}


def _shop(cart=None, orders=None, viewed=None):
    state = SessionState(sid="t", site="shop")
    state.shop.cart.update(cart or {})
    state.shop.orders.extend(orders or [])
    state.shop.viewed.extend(viewed or [])
    return state


@pytest.mark.parametrize("cart, ok", [
    ({(1010, "M", "Navy"): 2}, True),
    ({(1010, "L", "Navy"): 2}, False),                            # wrong size
    ({(1010, "M", "Black"): 2}, False),                           # wrong colour
    ({(1010, "M", "Navy"): 1}, False),                            # wrong quantity
    ({(1010, "M", "Navy"): 3}, False),
    ({(1011, "M", "Navy"): 2}, False),                            # wrong product
    ({(1010, "M", "Navy"): 2, (1020, "", "Red"): 1}, False),      # an extra line
    ({}, False),
])
def test_shop_cart_checker(cart, ok):
    assert shop.check_cart(CART, _shop(cart=cart), None).success is ok


def _order(**changes):
    fields = dict(FIELDS, **changes.pop("fields", {}))
    order = {"id": "NW1", "lines": [(1010, "M", "Navy", 1)], "fields": fields, "shipping": "express"}
    order.update(changes)
    return order


@pytest.mark.parametrize("order, ok", [
    (_order(), True),
    (_order(fields={"full_name": "  ana   SILVA "}), True),            # case and spaces do not matter
    (_order(fields={"postal_code": "4050-124"}), False),               # one digit off
    (_order(fields={"city": "Lisbon"}), False),
    (_order(fields={"email": "ana.silva@example.org"}), False),
    (_order(shipping="standard"), False),
    (_order(lines=[(1010, "M", "Navy", 2)]), False),                   # quantity
    (_order(lines=[(1010, "S", "Navy", 1)]), False),                   # size
    (_order(lines=[(1010, "M", "Navy", 1), (1011, "", "Red", 1)]), False),
])
def test_shop_order_checker(order, ok):
    assert shop.check_order(ORDER, _shop(orders=[order]), None).success is ok


def test_shop_viewed_checker_wants_the_target_last():
    params = {"kind": "open_product", "pid": 1010}
    assert shop.check_viewed(params, _shop(viewed=[1003, 1010]), None).success
    assert not shop.check_viewed(params, _shop(viewed=[1010, 1003]), None).success
    assert not shop.check_viewed(params, _shop(), None).success


def _booking(**changes):
    b = {"ref": "TR1", "flight_id": "LIS-OSL-20260714-2", "passengers": 2, "cabin": "economy",
         "first_name": "Ana", "last_name": "Silva", "email": "asilva@mail.example"}
    b.update(changes)
    return b


BOOK = {"kind": "search_book", "flight": "LIS-OSL-20260714-2", "pax": "2", "cabin": "economy",
        "person": {"first_name": "Ana", "last_name": "Silva", "email": "asilva@mail.example"}}


@pytest.mark.parametrize("booking, ok", [
    (_booking(), True),
    (_booking(flight_id="LIS-OSL-20260715-2"), False),   # the next day
    (_booking(flight_id="LIS-OSL-20260714-3"), False),   # another flight that day
    (_booking(passengers=1), False),
    (_booking(cabin="premium"), False),
    (_booking(last_name="Silvia"), False),
])
def test_travel_booking_checker(booking, ok):
    state = SessionState(sid="t", site="travel")
    state.travel.bookings.append(booking)
    assert travel.check_booking(BOOK, state, None).success is ok


def test_flight_ids_encode_route_date_and_slot():
    flights = flights_for("LIS", "OSL", "2026-07-14")
    assert [f.id for f in flights] == [f"LIS-OSL-20260714-{k}" for k in range(len(flights))]
    assert len({f.depart for f in flights}) == len(flights)  # departure times are distinct
    assert flights_for("LIS", "OSL", "2026-07-14") == flights  # pure function of the query


@pytest.mark.parametrize("expected, answer, ok", [
    ("1,204,310", "1204310", True),
    ("1,204,310", "The population is 1,204,310 people.", True),
    ("1,204,310", "1,204,311", False),
    ("1,204,310", "1,204,310 or 1,300,000", False),          # hedging with two numbers fails
    ("2,114 m", "2114", True),
    ("2,114 m", "2,114 metres", True),
    ("2,114 m", "2,141 m", False),
    ("Varnholm", "varnholm", True),
    ("Varnholm", "Varnholme", False),
    ("the Amber Sea", "Amber Sea", True),
    ("the Amber Sea", "the Amber", False),
    ("Ana Silva", "Ana", False),
    ("1737", None, False),
])
def test_wiki_answer_match(expected, answer, ok):
    assert answer_matches(expected, answer) is ok
    params = {"kind": "answer", "answer": expected, "path": ["x"]}
    assert wiki.check_answer(params, SessionState(sid="t"), answer).success is ok


def test_normalize_by_hand():
    assert normalize("  Café  Déjà-vu, 1,000 ") == "cafe deja vu 1000"
    assert normalize("3.5 stars.") == "3.5 stars"


def _widgets(values=None, clicks=(), submissions=(), links=()):
    state = SessionState(sid="t", site="widgets")
    state.widgets.values.update(values or {})
    state.widgets.clicks.extend(clicks)
    state.widgets.submissions.extend(submissions)
    state.widgets.links.extend(links)
    return state


def test_widget_checkers_reject_near_misses():
    click = {"kind": "click_button", "targets": [["c1", ""]]}
    assert widgets.check_click(click, _widgets(clicks=["c1"]), None).success
    assert not widgets.check_click(click, _widgets(clicks=["c2"]), None).success
    assert not widgets.check_click(click, _widgets(clicks=["c2", "c1"]), None).success  # clicked a wrong one too
    text = {"kind": "type_text", "targets": [["c0", "ocean"]]}
    assert widgets.check_values(text, _widgets({"c0": "ocean"}), None).success
    assert not widgets.check_values(text, _widgets({"c0": "oceans"}), None).success
    assert not widgets.check_values(text, _widgets({"c0": "Ocean"}), None).success
    slider = {"kind": "slider", "targets": [["c3", "7"]]}
    assert not widgets.check_values(slider, _widgets({"c3": "6"}), None).success
    form = {"kind": "submit_values", "targets": [["c0", "ocean"], ["c2", "true"]], "submit": "c5"}
    good = {"c0": "ocean", "c2": "true", "c4": "x"}
    assert widgets.check_submitted(form, _widgets(clicks=["c5"], submissions=[good]), None).success
    assert not widgets.check_submitted(form, _widgets(clicks=["c5"], submissions=[dict(good, c2="false")]), None).success
    assert not widgets.check_submitted(form, _widgets(values=good), None).success          # never submitted
    link = {"kind": "click_link", "targets": [["c4", ""]]}
    assert widgets.check_link(link, _widgets(links=["c4"]), None).success
    assert not widgets.check_link(link, _widgets(links=["c1"]), None).success
