"""The sites as HTTP applications (Flask test client, no browser): search tolerance, filters,
validation errors, full flows ending in the state the checkers read, per-cookie isolation and
seeded pages."""
import re

import pytest

from webrl.envs.sites.server import create_app
from webrl.envs.sites.shop.catalog import build_catalog, catalog_index
from webrl.envs.sites.source import make_task
from webrl.envs.sites.state import STORE, SessionState
from webrl.envs.sites.travel.world import parse_date


@pytest.fixture(scope="module")
def app():
    return create_app()


def client_for(app, site, seed=0, params=None, sid=None):
    sid = sid or f"test-{site}-{seed}-{id(params)}"
    STORE.put(SessionState(sid=sid, site=site, seed=seed, params=dict(params or {})))
    client = app.test_client()
    assert client.get(f"/__session?sid={sid}&next=/{site}/").status_code == 302
    return client, STORE.get(sid)


def product_ids(html: bytes) -> list[int]:
    return [int(x) for x in re.findall(rb'id="product-(\d+)"', html)]


def test_catalogue_has_at_least_200_products():
    products = build_catalog()
    assert len(products) >= 200 and len({p.name for p in products}) == len(products)


def test_search_tolerates_case_plurals_and_typos(app):
    client, _ = client_for(app, "shop")
    target = catalog_index()[1000]
    exact = product_ids(client.get("/shop/search", query_string={"q": target.name}).data)
    assert target.id in exact
    noun = target.name.split()[-1]
    typo = noun[:2] + noun[3:]                      # one letter dropped
    for query in (target.name.upper(), target.name.lower() + "s",
                  " ".join(target.name.split()[:-1] + [typo])):
        assert target.id in product_ids(client.get("/shop/search", query_string={"q": query}).data), query
    assert b"No products match" in client.get("/shop/search?q=zzzzqqq").data


def test_filters_sort_and_pagination(app):
    client, state = client_for(app, "shop")
    page1 = client.get("/shop/c/t-shirts?sort=price_asc").data
    page2 = client.get("/shop/c/t-shirts?sort=price_asc&page=2").data
    ids1, ids2 = product_ids(page1), product_ids(page2)
    assert len(ids1) == 12 and ids2 and not set(ids1) & set(ids2)   # 24 t-shirts, 12 a page
    prices = [catalog_index()[i].price for i in ids1 + ids2]
    assert prices == sorted(prices)
    brand = catalog_index()[ids1[0]].brand
    filtered = product_ids(client.get("/shop/c/t-shirts", query_string={"brand": brand, "max_price": "30",
                                                                        "min_rating": "3"}).data)
    assert filtered and all(catalog_index()[i].brand == brand and catalog_index()[i].price <= 30
                            and catalog_index()[i].rating >= 3 for i in filtered)
    assert state.shop.listings[-1]["brand"] == brand


def test_cart_and_checkout_validation_then_order(app):
    client, state = client_for(app, "shop")
    p = next(p for p in build_catalog() if p.sizes)
    response = client.post("/shop/cart/add", data={"product_id": p.id, "colour": p.colours[0], "quantity": "1"},
                           follow_redirects=True)
    assert b"Please choose a size." in response.data and not state.shop.cart
    client.post("/shop/cart/add", data={"product_id": p.id, "size": p.sizes[0], "colour": p.colours[0],
                                        "quantity": "2"})
    assert state.shop.cart == {(p.id, p.sizes[0], p.colours[0]): 2}
    bad = client.post("/shop/checkout", data={"full_name": "Ana Silva", "email": "not-an-email",
                                              "address": "", "city": "Porto", "postal_code": "4050"})
    assert b"Enter a valid email address." in bad.data and b"Street address is required." in bad.data
    assert not state.shop.orders and state.shop.cart                     # nothing placed, cart kept
    good = client.post("/shop/checkout", data={"full_name": "Ana Silva", "email": "ana@example.com",
                                               "address": "1 Mill Road", "city": "Porto", "postal_code": "4050",
                                               "shipping": "express"}, follow_redirects=True)
    assert b"Thank you for your order" in good.data
    assert state.shop.orders[0]["lines"] == [(p.id, p.sizes[0], p.colours[0], 2)] and not state.shop.cart


def test_travel_search_validation_and_booking(app):
    client, state = client_for(app, "travel")
    bad = client.get("/travel/search", query_string={"from": "Atlantis", "to": "Oslo", "date": "2026-07-01",
                                                     "pax": "1", "cabin": "economy"})
    assert bad.status_code == 400 and "find a city called “Atlantis”".encode() in bad.data
    past = client.get("/travel/search", query_string={"from": "Lisbon", "to": "Oslo", "date": "2026-05-01",
                                                      "pax": "1", "cabin": "economy"})
    assert past.status_code == 400 and b"Choose a date between" in past.data
    ok = client.get("/travel/search", query_string={"from": "Lisbon (LIS)", "to": "oslo", "date": "14 July 2026",
                                                    "pax": "2", "cabin": "business"})
    assert ok.status_code == 302 and "from=LIS" in ok.location and "date=2026-07-14" in ok.location
    results = client.get(ok.location).data
    fid = re.findall(rb'id="select-([A-Z0-9-]+)"', results)[0].decode()
    client.get(f"/travel/book/{fid}?pax=2&cabin=business")
    assert state.travel.selected == [fid]
    missing = client.post(f"/travel/book/{fid}", data={"pax": "2", "cabin": "business", "first_name": "Ana"})
    assert b"Last name is required." in missing.data and not state.travel.bookings
    client.post(f"/travel/book/{fid}", data={"pax": "2", "cabin": "business", "first_name": "Ana",
                                             "last_name": "Silva", "email": "a@b.example"})
    assert state.travel.bookings[0]["flight_id"] == fid and state.travel.bookings[0]["passengers"] == 2


def test_date_parsing_by_hand():
    assert str(parse_date("2026-07-14")) == str(parse_date("14/07/2026")) == str(parse_date("July 14, 2026")) \
        == "2026-07-14"
    assert parse_date("31 June 2026") is None and parse_date("soon") is None
    # the goals' year-less phrases (travel/tasks.py _date_phrase): the year that puts the day on or after
    # TODAY (2026-06-01), so 14 July is 2026 and 3 March is 2027
    assert str(parse_date("July 14")) == str(parse_date("Tuesday 14 July")) == "2026-07-14"
    assert str(parse_date("March 3")) == "2027-03-03" and parse_date("July 32") is None


def test_wiki_search_and_article(app):
    from webrl.envs.sites.wiki.world import build_world

    client, state = client_for(app, "wiki")
    article = next(a for a in build_world().values() if a.kind == "city")
    typo = article.title[:3] + article.title[4:]        # one letter dropped, lower case
    assert f'id="result-{article.slug}"'.encode() in client.get("/wiki/search", query_string={"q": typo.lower()}).data
    page = client.get(f"/wiki/page/{article.slug}").data.decode()
    assert 'class="infobox"' in page and article.facts["Population"] in page and 'class="wikitable"' in page
    assert f'href="/wiki/page/{article.links["Country"]}"' in page
    assert state.wiki.visited == [article.slug]


def test_widget_events_keep_the_newest_value(app):
    task = make_task("widgets", 0, "train", 5, start_server=False)
    client, state = client_for(app, "widgets", params=task.spec.params)
    client.post("/widgets/api/event", json={"type": "value", "id": "c0", "value": "late", "seq": 3})
    client.post("/widgets/api/event", json={"type": "value", "id": "c0", "value": "early", "seq": 2})
    assert state.widgets.values["c0"] == "late"          # an older report arriving late is ignored
    client.post("/widgets/api/event", json={"type": "click", "id": "c1", "seq": 4})
    assert state.widgets.clicks == ["c1"]


def test_cookies_isolate_sessions(app):
    a, state_a = client_for(app, "shop", sid="iso-a")
    b, state_b = client_for(app, "shop", sid="iso-b")
    p = next(p for p in build_catalog() if not p.sizes)
    a.post("/shop/cart/add", data={"product_id": p.id, "colour": p.colours[0], "quantity": "1"})
    assert state_a.shop.cart and not state_b.shop.cart
    assert b'class="badge">0<' in b.get("/shop/").data and b'class="badge">1<' in a.get("/shop/").data


@pytest.mark.parametrize("site, path", [("widgets", "/widgets/"), ("shop", "/shop/"), ("wiki", "/wiki/")])
def test_same_seed_same_page_different_seed_different_page(app, site, path):
    def page(seed):
        task = make_task(site, 0, "train", seed, start_server=False)
        client, _ = client_for(app, site, seed=seed, params=task.spec.params, sid=f"seed-{site}-{seed}-{id(task)}")
        return client.get(path).data
    assert page(7) == page(7)
    assert page(7) != page(8)
