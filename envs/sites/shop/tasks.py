"""Shop tasks: generators (levels 0-2), checkers on `ShopState`, oracles on live observations.

Kinds and the oracle's path (steps):
  level 0  open_product (1: click the named product on a listing), open_category (1),
           sort_listing (1: pick a sort order)
  level 1  search_open (3: type, search, open), add_variant (2-4: size, colour, quantity, add),
           best_in_category (2-3: brand filter, sort, open the first)
  level 2  buy_filtered (7-11: category, brand, max price, sort, open, variants, add; DeepShop
           style "cheapest X from B under $P, size S, 2 of them"), checkout (12-15: search,
           open, variants, add, checkout form, place order)

Superlatives are generated only where the answer is unique (no tie on the sort key). The
target product always belongs to the task's split; the checker compares exact ids, variants,
quantities and (normalised) form fields, so a wrong size, quantity or postcode fails.
"""
from __future__ import annotations

import random
from typing import Optional

from webrl.actions import Action
from webrl.envs.tools import Tool, ToolParam
from webrl.envs.sites.common import (CheckResult, click, ensure_selected, ensure_value, find, normalize, query_url,
                                     scroll_down, split_of, url_path, url_query)
from webrl.envs.sites.shop.catalog import (CATEGORIES, SORTS, Product, build_catalog, catalog_index,
                                           filter_products, sort_products)

FIRST = ("Ana", "Ben", "Chloe", "Daniel", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas",
         "Kira", "Liam", "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sami", "Tara")
LAST = ("Silva", "Meyer", "Okafor", "Novak", "Larsen", "Costa", "Tanaka", "Dubois", "Rossi",
        "Kowalski", "Haddad", "Moreau", "Jensen", "Varga", "Lindqvist", "Ortega")
STREETS = ("Maple Street", "Harbour Road", "Station Lane", "Elm Avenue", "King's Way", "Mill Road")
CITIES = (("Bristol", "BS1 4DJ"), ("Leeds", "LS2 7HY"), ("Porto", "4050-123"), ("Ghent", "9000"),
          ("Aarhus", "8000"), ("Lyon", "69002"), ("Graz", "8010"), ("Malmo", "211 20"))
SUPERLATIVES = {"price_asc": ("cheapest", lambda p: p.price), "price_desc": ("most expensive", lambda p: -p.price),
                "rating": ("highest-rated", lambda p: -p.rating), "reviews": ("most reviewed", lambda p: -p.reviews)}


def _products(split: str, category: str = "") -> list[Product]:
    return [p for p in build_catalog() if p.split == split and (not category or p.category == category)]


def _unique_best(candidates: list[Product], sort: str) -> Optional[Product]:
    if not candidates:
        return None
    key = SUPERLATIVES[sort][1]
    ordered = sorted(candidates, key=key)
    if len(ordered) > 1 and key(ordered[0]) == key(ordered[1]):
        return None
    return sort_products(candidates, sort)[0]


def _variant_phrase(p: Product, size: str, colour: str) -> str:
    return (f"size {size}, " if size else "") + f"in {colour}"


# -- generators: (rng, split, seed) -> (goal, start_path, params) -----------------------------
def gen_open_product(rng, split, seed):
    slug = rng.choice(list(CATEGORIES))
    page1 = sort_products(filter_products(list(build_catalog()), category=slug), "featured", seed)[:12]
    choices = [p for p in page1 if p.split == split] or [p for p in _products(split) if p.category == slug][:1]
    p = rng.choice(choices)
    start = f"/shop/c/{slug}" if p in page1 else query_url("/shop/search", q=p.name)
    goal = rng.choice(("Open the product page for the {n}.", "Show me the details of the {n}.",
                       "Click on the {n} to see its page.")).format(n=p.name)
    return goal, start, {"kind": "open_product", "pid": p.id}


def _split_categories(split):
    return [c for c in CATEGORIES if split_of(c, "shop-category") == split] or list(CATEGORIES)


def gen_open_category(rng, split, seed):
    slug = rng.choice(_split_categories(split))
    goal = rng.choice(("Go to the {c} category.", "Browse the {c} section of the store.",
                       "Show me all {c}.")).format(c=CATEGORIES[slug][0])
    return goal, "/shop/", {"kind": "open_category", "category": slug}


def gen_sort_listing(rng, split, seed):
    slug = rng.choice(_split_categories(split))
    sort = rng.choice([s for s in SORTS if s != "featured"])
    phr = {"price_asc": "by price, lowest first", "price_desc": "by price, highest first",
           "rating": "by customer rating", "reviews": "so the most reviewed come first"}[sort]
    goal = f"Sort these {CATEGORIES[slug][0].lower()} {phr}."
    return goal, f"/shop/c/{slug}", {"kind": "sort_listing", "category": slug, "sort": sort}


def _typo(rng, word: str) -> str:
    i = rng.randrange(1, len(word) - 1)
    return word[:i] + word[i + 1:] if rng.random() < 0.5 else word[:i] + rng.choice("aeiou") + word[i + 1:]


def gen_search_open(rng, split, seed):
    p = rng.choice(_products(split))
    words = p.name.split()
    query = " ".join(words[1:]) if rng.random() < 0.5 else p.name
    if rng.random() < 0.5:
        query = query.lower()
    long_words = [i for i, w in enumerate(query.split()) if len(w) >= 5]
    if long_words and rng.random() < 0.4:
        parts = query.split()
        k = rng.choice(long_words)
        parts[k] = _typo(rng, parts[k])
        query = " ".join(parts)
    hits = sort_products(filter_products(list(build_catalog()), query=query), "featured", seed)
    if p not in hits[:12]:
        query = p.name
    goal = f'Search the store for "{query}" and open the page of the {p.name}.'
    return goal, "/shop/", {"kind": "search_open", "pid": p.id, "query": query}


def _variant(rng, p: Product):
    return (rng.choice(p.sizes) if p.sizes else ""), rng.choice(p.colours)


def gen_add_variant(rng, split, seed):
    p = rng.choice(_products(split))
    size, colour = _variant(rng, p)
    qty = rng.choice((1, 1, 2, 3))
    many = f"{qty} of " if qty > 1 else ""
    goal = f"Add {many}the {p.name} ({_variant_phrase(p, size, colour)}) to my cart."
    return goal, f"/shop/p/{p.id}", {"kind": "add_variant", "pid": p.id, "size": size, "colour": colour, "qty": qty}


def gen_best_in_category(rng, split, seed):
    for _ in range(200):
        slug, sort = rng.choice(list(CATEGORIES)), rng.choice(list(SUPERLATIVES))
        brands = sorted({p.brand for p in build_catalog() if p.category == slug})
        brand = rng.choice(brands) if rng.random() < 0.5 else ""
        cands = filter_products(list(build_catalog()), category=slug, brand=brand)
        best = _unique_best(cands, sort)
        if best is not None and best.split == split:
            what = f"{brand} product" if brand else "product"
            goal = f"Open the {SUPERLATIVES[sort][0]} {what} in {CATEGORIES[slug][0]}."
            return goal, f"/shop/c/{slug}", {"kind": "best_in_category", "pid": best.id, "category": slug,
                                             "brand": brand, "sort": sort}
    raise RuntimeError("no unique best product found")


def gen_buy_filtered(rng, split, seed):
    for _ in range(500):
        slug, sort = rng.choice(list(CATEGORIES)), rng.choice(list(SUPERLATIVES))
        brands = sorted({p.brand for p in build_catalog() if p.category == slug})
        brand = rng.choice(brands) if rng.random() < 0.7 else ""
        max_price = rng.choice((None, 30, 50, 75, 100, 150, 200, 250)) if sort != "price_asc" else rng.choice((None, 50, 100, 200))
        cands = filter_products(list(build_catalog()), category=slug, brand=brand, max_price=max_price)
        best = _unique_best(cands, sort)
        if best is None or best.split != split or len(cands) < 2:
            continue
        size, colour = _variant(rng, best)
        qty = rng.choice((1, 2, 2, 3))
        noun = CATEGORIES[slug][0].lower()
        parts = [f"the {SUPERLATIVES[sort][0]} {noun}"] + ([f"from {brand}"] if brand else []) + \
                ([f"under ${max_price}"] if max_price else [])
        goal = (f"I need {qty} of {' '.join(parts)}. " if qty > 1 else f"I need {' '.join(parts)}. ") + \
               f"Add {'them' if qty > 1 else 'it'} to my cart, {_variant_phrase(best, size, colour)}."
        return goal, "/shop/", {"kind": "buy_filtered", "pid": best.id, "category": slug, "brand": brand,
                                "max_price": max_price, "sort": sort, "size": size, "colour": colour, "qty": qty}
    raise RuntimeError("no unique filtered product found")


def gen_checkout(rng, split, seed):
    p = rng.choice(_products(split))
    size, colour = _variant(rng, p)
    qty = rng.choice((1, 1, 2))
    first, last = rng.choice(FIRST), rng.choice(LAST)
    city, postal = rng.choice(CITIES)
    fields = {"full_name": f"{first} {last}", "email": f"{first.lower()}.{last.lower()}@example.com",
              "address": f"{rng.randint(2, 180)} {rng.choice(STREETS)}", "city": city, "postal_code": postal}
    shipping = rng.choice(("standard", "express")) if qty == 1 else "standard"
    many, it = (f"{qty} of ", "them") if qty > 1 else ("", "it")
    goal = (f"Buy {many}the {p.name} ({_variant_phrase(p, size, colour)}) and ship {it} to {fields['full_name']}, "
            f"{fields['address']}, {city} {postal}. Email: {fields['email']}."
            + (" Use express shipping." if shipping == "express" else ""))
    return goal, "/shop/", {"kind": "checkout", "pid": p.id, "size": size, "colour": colour, "qty": qty,
                            "fields": fields, "shipping": shipping, "query": p.name}


GENERATORS = {0: (gen_open_product, gen_open_category, gen_sort_listing),
              1: (gen_search_open, gen_add_variant, gen_best_in_category),
              2: (gen_buy_filtered, gen_checkout)}


# -- checkers: (params, SessionState, answer) -> CheckResult ----------------------------------
def check_viewed(params, state, answer):
    viewed = state.shop.viewed
    return CheckResult(bool(viewed) and viewed[-1] == params["pid"], {"last_viewed": viewed[-1:] or None})


def check_category(params, state, answer):
    last = state.shop.listings[-1] if state.shop.listings else {}
    ok = last.get("category") == params["category"] and not last.get("q") and not state.shop.viewed
    return CheckResult(ok, {"last_listing": last})


def check_sorted(params, state, answer):
    last = state.shop.listings[-1] if state.shop.listings else {}
    ok = last.get("category") == params["category"] and last.get("sort") == params["sort"]
    return CheckResult(ok, {"last_listing": last})


def check_cart(params, state, answer):
    want = {(params["pid"], params["size"], params["colour"]): params["qty"]}
    return CheckResult(state.shop.cart == want, {"cart": {f"{k}": v for k, v in state.shop.cart.items()}})


def check_order(params, state, answer):
    want_line = [(params["pid"], params["size"], params["colour"], params["qty"])]
    for order in state.shop.orders:
        fields_ok = all(normalize(order["fields"].get(k, "")) == normalize(v) for k, v in params["fields"].items())
        if [tuple(x) for x in order["lines"]] == want_line and fields_ok and order["shipping"] == params["shipping"]:
            return CheckResult(True, {"order": order["id"]})
    return CheckResult(False, {"orders": state.shop.orders})


CHECKERS = {"open_product": check_viewed, "search_open": check_viewed, "best_in_category": check_viewed,
            "open_category": check_category, "sort_listing": check_sorted, "add_variant": check_cart,
            "buy_filtered": check_cart, "checkout": check_order}


# -- oracles: (params, observation) -> Action ------------------------------------------------
def _click_or_scroll(el):
    return click(el) if el is not None else scroll_down()


def _product_page_step(params, obs) -> Action:
    for dom_id, value in (("size", params["size"]), ("colour", params["colour"])):
        if value:
            act = ensure_selected(find(obs, dom_id=dom_id), value)
            if act is not None:
                return act
    act = ensure_value(find(obs, dom_id="quantity"), str(params["qty"]))
    return act or _click_or_scroll(find(obs, dom_id="add-to-cart"))


def _open_listed(params, obs) -> Action:
    link = find(obs, dom_id=f"product-{params['pid']}")
    if link is not None:
        return click(link)
    nxt = find(obs, dom_id="page-next")
    return click(nxt) if nxt is not None else scroll_down()


def oracle_open_product(params, obs):
    if url_path(obs) == f"/shop/p/{params['pid']}":
        return Action.stop()
    return _open_listed(params, obs)


def oracle_open_category(params, obs):
    if url_path(obs) == f"/shop/c/{params['category']}":
        return Action.stop()
    return _click_or_scroll(find(obs, dom_id=f"cat-{params['category']}"))


def oracle_sort_listing(params, obs):
    if url_query(obs).get("sort") == params["sort"]:
        return Action.stop()
    return ensure_selected(find(obs, dom_id="sort"), SORTS[params["sort"]]) or Action.stop()


def _search_step(query, obs) -> Action:
    box = find(obs, dom_id="search-input")
    if box is not None and box.get("value", "") != query:
        return Action.type_text(query, element=int(box["id"]))
    return _click_or_scroll(find(obs, dom_id="search-button"))


def oracle_search_open(params, obs):
    path = url_path(obs)
    if path == f"/shop/p/{params['pid']}":
        return Action.stop()
    if path == "/shop/search" and url_query(obs).get("q") == params["query"]:
        return _open_listed(params, obs)
    return _search_step(params["query"], obs)


def oracle_add_variant(params, obs):
    if url_path(obs) == "/shop/cart":
        return Action.stop()
    return _product_page_step(params, obs)


def _listing_step(params, obs, sort) -> Action:
    """On the category listing: apply brand / max price filters and the sort, then open."""
    q = url_query(obs)
    if params.get("brand") and q.get("brand") != params["brand"]:
        return ensure_selected(find(obs, dom_id="brand"), params["brand"]) or scroll_down()
    max_price = params.get("max_price")
    if max_price and q.get("max_price") != str(max_price):
        typed = ensure_value(find(obs, dom_id="max-price"), str(max_price))
        return typed or _click_or_scroll(find(obs, dom_id="apply-filters"))
    if q.get("sort", "featured") != sort:
        return ensure_selected(find(obs, dom_id="sort"), SORTS[sort]) or scroll_down()
    return _open_listed(params, obs)


def oracle_best_in_category(params, obs):
    if url_path(obs) == f"/shop/p/{params['pid']}":
        return Action.stop()
    return _listing_step(params, obs, params["sort"])


def oracle_buy_filtered(params, obs):
    path = url_path(obs)
    if path == "/shop/cart":
        return Action.stop()
    if path == f"/shop/p/{params['pid']}":
        return _product_page_step(params, obs)
    if path == f"/shop/c/{params['category']}":
        return _listing_step(params, obs, params["sort"])
    return _click_or_scroll(find(obs, dom_id=f"cat-{params['category']}"))


def oracle_checkout(params, obs):
    path = url_path(obs)
    if path.startswith("/shop/order/"):
        return Action.stop()
    if path == "/shop/checkout":
        for name, value in params["fields"].items():
            act = ensure_value(find(obs, dom_id=name), value)
            if act is not None:
                return act
        label = {"standard": "Standard", "express": "Express"}[params["shipping"]]
        sel = find(obs, dom_id="shipping")
        if sel is not None and not sel.get("selected", "").startswith(label):
            return Action.select(int(sel["id"]), next(o for o in sel["options"] if o.startswith(label)))
        return _click_or_scroll(find(obs, dom_id="place-order"))
    if path == "/shop/cart":
        return _click_or_scroll(find(obs, dom_id="checkout"))
    if path == f"/shop/p/{params['pid']}":
        return _product_page_step(params, obs)
    if path == "/shop/search" and url_query(obs).get("q") == params["query"]:
        return _open_listed(params, obs)
    return _search_step(params["query"], obs)


ORACLES = {"open_product": oracle_open_product, "open_category": oracle_open_category,
           "sort_listing": oracle_sort_listing, "search_open": oracle_search_open,
           "add_variant": oracle_add_variant, "best_in_category": oracle_best_in_category,
           "buy_filtered": oracle_buy_filtered, "checkout": oracle_checkout}


# -- tools (webrl.envs.tools; shown only with WebEnvConfig.tools="task") -------------------------
TOOLS = (Tool("search_catalog", "Search the shop's catalogue; returns JSON of up to 10 matching products "
              "(name, brand, category, price, rating) with their page URLs",
              params=(ToolParam("query", description="words of the product's name"),),
              kind="http", url="/shop/api/search?q={query}"),)
