"""benchmarks/synthesis.py: the coherence rules on hand-built sandbox session states, the
equal-size cut of the oracle demos, the share tables (no browser, no training)."""
import math

import pytest

from tests.benchmarks.helpers import load_benchmark

from webrl.envs.sites.shop.catalog import catalog_index
from webrl.envs.sites.state import SessionState
from webrl.types import Trajectory, Turn

bench = load_benchmark("synthesis")


def _product():
    pid, product = next(iter(catalog_index().items()))
    return pid, product


def test_quoted_names_in_goal_order():
    assert bench.quoted('Add "Blue Mug" to the cart, choosing Size "M" and Colour "Red".') == ["Blue Mug", "M", "Red"]
    assert bench.quoted('Add "Blue Mug" to the cart, choosing Size "M".') == ["Blue Mug", "M"]
    assert bench.quoted("Open the cart.") == []


def test_item_needs_the_named_product_page_and_the_recorded_visit():
    pid, product = _product()
    state = SessionState(sid="s", site="shop")
    goal = f'Open the page of "{product.name}".'
    assert bench.coherent_item("shop", goal, f"/shop/p/{pid}", state)[0] is False  # the session saw no visit
    state.shop.viewed.append(pid)
    assert bench.coherent_item("shop", goal, f"/shop/p/{pid}", state)[0] is True
    ok, why = bench.coherent_item("shop", 'Open the page of "Some Other Thing".', f"/shop/p/{pid}", state)
    assert not ok and product.name in why
    assert bench.coherent_item("shop", goal, "/shop/p/999999", state)[0] is False  # no such product


def test_navigation_is_checked_against_the_world_page_name():
    state = SessionState(sid="s", site="shop")
    assert bench.coherent_navigation("shop", 'Open the "Running Shoes" page.', "/shop/c/running-shoes", state)[0]
    # the synthesizer named the link with its live badge ("Cart 0"): not the cart page's name
    assert not bench.coherent_navigation("shop", 'Open the "Cart 0" page.', "/shop/cart", state)[0]
    assert bench.coherent_navigation("wiki", 'Open the "Rivers" page.', "/wiki/category/river", state)[0]


def test_action_needs_the_cart_line_with_the_chosen_variant():
    pid, product = _product()
    size, colour = (product.sizes[0] if product.sizes else ""), product.colours[0]
    goal = f'Add "{product.name}" to the cart, choosing ' + (f'Size "{size}" and ' if size else "") + \
        f'Colour "{colour}".'
    state = SessionState(sid="s", site="shop")
    assert not bench.coherent_action("shop", goal, "/shop/cart", state)[0]
    state.shop.cart[(pid, size, product.colours[1] if len(product.colours) > 1 else "x")] = 1  # other colour
    assert not bench.coherent_action("shop", goal, "/shop/cart", state)[0]
    state.shop.cart[(pid, size, colour)] = 1
    assert bench.coherent_action("shop", goal, "/shop/cart", state)[0]


def test_filter_search_and_form_read_the_session_state():
    state = SessionState(sid="s", site="shop")
    goal = 'On the "Running Shoes · Northwind Market" page, set "Sort by" to "Price: low to high".'
    state.shop.listings.append({"q": "", "category": "running-shoes", "brand": "", "sort": "featured"})
    assert not bench.coherent_filter("shop", goal, "/shop/c/running-shoes", state)[0]
    state.shop.listings.append({"q": "", "category": "running-shoes", "brand": "", "sort": "price_asc"})
    assert bench.coherent_filter("shop", goal, "/shop/c/running-shoes", state)[0]
    assert not bench.coherent_filter("shop", 'set "Brand" to "Nobrand"', "/shop/", state)[0]
    form = 'Fill in "Minimum price" with "20", "Maximum price" with "100" and press "Apply".'
    state.shop.listings.append({"min_price": "20", "max_price": "100"})
    assert bench.coherent_form("shop", form, "/shop/c/running-shoes", state)[0]
    assert bench.coherent_form("travel", form, "/travel/", state) == (False, "no_rule")
    travel = SessionState(sid="t", site="travel")
    assert bench.coherent_filter("travel", 'set "PASSENGERS" to "2 adults"', "/travel/", travel)[0]
    assert not bench.coherent_filter("travel", 'set "PASSENGERS" to "9 adults"', "/travel/", travel)[0]


def test_search_needs_the_recorded_query():
    from webrl.envs.sites.wiki.world import build_world

    slug, article = next(iter(build_world().items()))
    state = SessionState(sid="w", site="wiki")
    state.wiki.visited.append(slug)
    goal = f'Search for "{article.title}" and open its page.'
    assert not bench.coherent_search("wiki", goal, f"/wiki/page/{slug}", state)[0]
    state.wiki.searches.append(article.title.lower())
    assert bench.coherent_search("wiki", goal, f"/wiki/page/{slug}", state)[0]


def _traj(task_id, n):
    return Trajectory(task_id=task_id, turns=[Turn(response_text=f"{task_id}:{i}") for i in range(n)])


def test_first_turns_cuts_the_last_episode_to_the_exact_count():
    kept = bench.first_turns([_traj("a", 2), _traj("b", 3), _traj("c", 4)], 6)
    assert [(t.task_id, len(t.turns)) for t in kept] == [("a", 2), ("b", 3), ("c", 1)]  # 2 + 3 + 1 = 6
    assert [(t.task_id, len(t.turns)) for t in bench.first_turns([_traj("a", 2)], 5)] == [("a", 2)]  # too few


def test_share_by_site_and_category():
    V = bench.Verdict
    verdicts = [V("1", "shop", "item", True, True, ""), V("2", "shop", "action", True, False, ""),
                V("3", "wiki", "item", False, True, "")]
    by_site = bench.share(verdicts, "site")
    assert by_site["shop"] == {"n": 2, "executable": 1.0, "coherent": 0.5, "both": 0.5}
    assert by_site["all"]["both"] == pytest.approx(1 / 3)
    assert bench.share(verdicts, "category")["item"]["executable"] == 0.5
    assert math.isnan(bench.share([], "site")["all"]["executable"])
    table = bench.confirmation_table(verdicts)
    assert "| shop | 2 | 1.00 | 0.50 | 0.50 |" in table and "| item | 2 | 0.50 | 1.00 | 0.50 |" in table
