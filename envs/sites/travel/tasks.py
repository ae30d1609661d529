"""Travel tasks: generators (levels 0-2), checkers on `TravelState`, oracles.

Kinds and the oracle's path (steps):
  level 0  pick_flight (1: "select the Aerolux flight at 09:15" on a results page),
           pick_best (1: cheapest / shortest / earliest / latest flight on the page)
  level 1  filter_pick (2-3: nonstop filter, airline filter or sort, then select)
  level 2  search_book (11-15: from + suggestion, to + suggestion, date, passengers, cabin,
           search, optional nonstop filter, select, passenger form, confirm)

Targets are unique by construction (superlatives only where no tie). Cities are split into
train and test; the checker compares the booked flight id (route, date and departure),
passenger count, cabin and the normalised passenger fields, so a wrong date fails.
"""
from __future__ import annotations

import datetime as dt

from webrl.actions import Action
from webrl.envs.tools import Tool, ToolParam
from webrl.envs.sites.common import (CheckResult, click, ensure_selected, ensure_value, find, normalize,
                                     query_url, scroll_down, url_path, url_query)
from webrl.envs.sites.shop.tasks import FIRST, LAST
from webrl.envs.sites.travel.world import (CABINS, CITIES, SORTS, TODAY, city_split, filter_sort, flights_for)

SUPERLATIVE = {"cheapest": ("price", lambda f: f.price), "shortest": ("duration", lambda f: f.duration),
               "earliest": ("departure", lambda f: f.depart), "latest": ("departure", lambda f: -f.depart)}


def _route(rng, split):
    codes = [c for c in CITIES if city_split(c) == split]
    origin = rng.choice(codes)
    destination = rng.choice([c for c in codes if c != origin])
    date = TODAY + dt.timedelta(days=rng.randint(3, 150))
    return origin, destination, date.isoformat()


def _results_path(origin, destination, date, pax="1", cabin="economy"):
    return query_url("/travel/flights", **{"from": origin, "to": destination, "date": date, "pax": pax, "cabin": cabin})


def _unique_best(flights, word):
    if not flights:
        return None
    key = SUPERLATIVE[word][1]
    ordered = sorted(flights, key=key)
    if len(ordered) > 1 and key(ordered[0]) == key(ordered[1]):
        return None
    return ordered[0]


def gen_pick_flight(rng, split, seed):
    origin, destination, date = _route(rng, split)
    f = rng.choice(flights_for(origin, destination, date))
    goal = rng.choice(("Select the {a} flight that departs at {t}.", "Choose the {t} departure with {a}.")).format(
        a=f.airline_name, t=f.depart_time)
    return goal, _results_path(origin, destination, date), {"kind": "pick_flight", "flight": f.id}


def gen_pick_best(rng, split, seed):
    for _ in range(100):
        origin, destination, date = _route(rng, split)
        word = rng.choice(list(SUPERLATIVE))
        best = _unique_best(flights_for(origin, destination, date), word)
        if best is not None:
            what = {"cheapest": "the cheapest flight", "shortest": "the flight with the shortest travel time",
                    "earliest": "the earliest departure", "latest": "the last flight of the day"}[word]
            return f"Select {what}.", _results_path(origin, destination, date), {"kind": "pick_flight", "flight": best.id}
    raise RuntimeError("no unique flight")


def _constrained(rng, flights):
    """(filters, word, best flight, phrase) with a unique best, or None."""
    nonstop = rng.random() < 0.5
    airline = rng.choice(sorted({f.airline_name for f in flights})) if not nonstop or rng.random() < 0.3 else ""
    word = rng.choice(list(SUPERLATIVE))
    pool = filter_sort(flights, nonstop=nonstop, airline=airline)
    best = _unique_best(pool, word)
    if best is None or len(pool) == len(flights) and not (word in ("cheapest", "shortest")):
        return None
    phrase = f"the {word} " + ("nonstop " if nonstop else "") + (f"{airline} " if airline else "") + "flight"
    return {"nonstop": nonstop, "airline": airline, "sort": SUPERLATIVE[word][0]}, word, best, phrase


def gen_filter_pick(rng, split, seed):
    for _ in range(200):
        origin, destination, date = _route(rng, split)
        found = _constrained(rng, flights_for(origin, destination, date))
        if found is not None:
            filters, word, best, phrase = found
            how = "Show only nonstop flights and select" if filters["nonstop"] else "Select"
            phrase = phrase.replace("nonstop ", "") if filters["nonstop"] else phrase
            goal = f"{how} {phrase}" + (", sorting the list first." if word in ("cheapest", "shortest") and not filters["nonstop"] and not filters["airline"] else ".")
            return goal, _results_path(origin, destination, date), {"kind": "filter_pick", "flight": best.id, **filters}
    raise RuntimeError("no constrained flight")


def _date_phrase(rng, date: str) -> str:
    d = dt.date.fromisoformat(date)
    return rng.choice((f"{d.day} {d:%B} {d.year}", f"{d:%B} {d.day}", f"{d:%A} {d.day} {d:%B}", date))


def _booking_steps(pax: str, cabin: str, filters: dict) -> int:
    """The oracle's path: two cities (type + suggestion each), date, passengers and cabin when
    not the defaults, search, filters, select, three passenger fields, confirm."""
    return 4 + 1 + (pax != "1") + (cabin != "economy") + 1 + filters["nonstop"] + bool(filters["airline"]) + 1 + 3 + 1


def gen_search_book(rng, split, seed):
    for _ in range(200):
        origin, destination, date = _route(rng, split)
        found = _constrained(rng, flights_for(origin, destination, date))
        if found is None:
            continue
        filters, word, best, phrase = found
        pax, cabin = rng.choice(("1", "1", "2", "3", "4")), rng.choice(("economy", "economy", "premium", "business"))
        if _booking_steps(pax, cabin, filters) > 15:  # level 2 is five to fifteen steps
            continue
        first, last = rng.choice(FIRST), rng.choice(LAST)
        person = {"first_name": first, "last_name": last, "email": f"{first[0].lower()}{last.lower()}@mail.example"}
        who = f"{pax} adults" if pax != "1" else "one adult"
        cabin_text = "" if cabin == "economy" else f" in {CABINS[cabin][0].lower()}"
        goal = (f"Book {phrase} from {CITIES[origin][0]} to {CITIES[destination][0]} on {_date_phrase(rng, date)} "
                f"for {who}{cabin_text}. Lead passenger: {first} {last}, {person['email']}.")
        return goal, "/travel/", {"kind": "search_book", "flight": best.id, "from": origin, "to": destination,
                                  "date": date, "pax": pax, "cabin": cabin, "person": person, **filters}
    raise RuntimeError("no bookable flight")


GENERATORS = {0: (gen_pick_flight, gen_pick_best), 1: (gen_filter_pick,), 2: (gen_search_book,)}


# -- checkers --------------------------------------------------------------------------------
def check_selected(params, state, answer):
    sel = state.travel.selected
    return CheckResult(bool(sel) and sel[-1] == params["flight"], {"selected": sel[-1:] or None})


def check_booking(params, state, answer):
    for b in state.travel.bookings:
        if (b["flight_id"] == params["flight"] and str(b["passengers"]) == params["pax"] and b["cabin"] == params["cabin"]
                and all(normalize(b[k]) == normalize(v) for k, v in params["person"].items())):
            return CheckResult(True, {"booking": b["ref"]})
    return CheckResult(False, {"bookings": state.travel.bookings})


CHECKERS = {"pick_flight": check_selected, "filter_pick": check_selected, "search_book": check_booking}


# -- oracles ---------------------------------------------------------------------------------
def _select_flight(params, obs):
    el = find(obs, dom_id=f"select-{params['flight']}")
    return click(el) if el is not None else scroll_down()


def oracle_pick_flight(params, obs):
    if url_path(obs).startswith("/travel/book/"):
        return Action.stop()
    return _select_flight(params, obs)


def _filter_step(params, obs, use_sort: bool = True):
    """Apply the task's filters (and, at level 1, its sort), then select the flight."""
    q = url_query(obs)
    if params.get("nonstop") and q.get("nonstop") != "1":
        el = find(obs, dom_id="nonstop")
        return click(el) if el is not None else scroll_down()
    if params.get("airline") and q.get("airline") != params["airline"]:
        return ensure_selected(find(obs, dom_id="airline"), params["airline"]) or scroll_down()
    if use_sort and q.get("sort", "departure") != params["sort"] and params["sort"] != "departure":
        return ensure_selected(find(obs, dom_id="sort"), SORTS[params["sort"]]) or scroll_down()
    return _select_flight(params, obs)


def oracle_filter_pick(params, obs):
    if url_path(obs).startswith("/travel/book/"):
        return Action.stop()
    return _filter_step(params, obs)


def _city_step(obs, dom_id, code):
    """Type the city name, then click its suggestion; None once the field holds it."""
    name = CITIES[code][0]
    box = find(obs, dom_id=dom_id)
    if box is None:
        return scroll_down()
    if box.get("value") == f"{name} ({code})":
        return None
    option = find(obs, dom_id=f"{dom_id}-option-{code}")
    if option is not None:
        return click(option)
    return Action.type_text(name, element=int(box["id"]))


def oracle_search_book(params, obs):
    path = url_path(obs)
    if path.startswith("/travel/booking/"):
        return Action.stop()
    if path.startswith("/travel/book/"):
        for name, value in params["person"].items():
            act = ensure_value(find(obs, dom_id=name), value)
            if act is not None:
                return act
        el = find(obs, dom_id="confirm-booking")
        return click(el) if el is not None else scroll_down()
    if path == "/travel/flights":
        return _filter_step(params, obs, use_sort=False)
    steps = (lambda: _city_step(obs, "from", params["from"]), lambda: _city_step(obs, "to", params["to"]),
             lambda: ensure_value(find(obs, dom_id="depart"), params["date"]),
             lambda: ensure_selected(find(obs, dom_id="passengers"), f"{params['pax']} adult" + ("" if params["pax"] == "1" else "s")),
             lambda: ensure_selected(find(obs, dom_id="cabin"), CABINS[params["cabin"]][0]))
    for step in steps:
        act = step()
        if act is not None:
            return act
    el = find(obs, dom_id="search-flights")
    return click(el) if el is not None else scroll_down()


ORACLES = {"pick_flight": oracle_pick_flight, "filter_pick": oracle_filter_pick, "search_book": oracle_search_book}


# -- tools (webrl.envs.tools; shown only with WebEnvConfig.tools="task") -------------------------
TOOLS = (Tool("find_flights", "List one day's flights between two cities (economy, 1 passenger) as JSON with "
              "their booking page URLs",
              params=(ToolParam("origin", description="city name or code"),
                      ToolParam("destination", description="city name or code"),
                      ToolParam("date", description="e.g. 2026-06-14")),
              kind="http", url="/travel/api/flights?origin={origin}&destination={destination}&date={date}"),)
