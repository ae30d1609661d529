"""Travel routes (Flask blueprint, mounted at /travel): the flight search form (autocomplete
city fields, a date picker, passenger and cabin dropdowns), results with sorting and
filters, the booking form with validation, and the confirmation page. `/travel/api/flights` is
the JSON behind the `find_flights` tool (`webrl.envs.tools`): city names or codes, a date in any
form the search form takes."""
from __future__ import annotations

import datetime as dt
import hashlib
import re

from flask import Blueprint, abort, jsonify, redirect, render_template, request, url_for

from webrl.envs.sites.server import current_state
from webrl.envs.sites.travel.world import (AIRLINES, CABINS, CITIES, LAST_DAY, SORTS, TODAY, city_label,
                                           filter_sort, flight_by_id, flights_for, parse_date, resolve_city)

blueprint = Blueprint("travel", __name__, url_prefix="/travel", template_folder="templates",
                      static_folder="static")
BOOKING_FIELDS = ("first_name", "last_name", "email")


def _cities_json():
    return [{"code": c, "name": n, "country": k} for c, (n, k, *_r) in sorted(CITIES.items(), key=lambda x: x[1][0])]


@blueprint.get("/")
def home():
    return render_template("travel/home.html", form={"pax": "1", "cabin": "economy"}, errors=[],
                           cities=_cities_json(), cabins=CABINS, today=TODAY.isoformat(), last=LAST_DAY.isoformat())


@blueprint.get("/search")
def search():
    args = request.args
    form = {k: args.get(k, "") for k in ("from", "to", "date", "pax", "cabin")}
    origin, destination, date = resolve_city(form["from"]), resolve_city(form["to"]), parse_date(form["date"])
    errors = []
    if origin is None:
        errors.append(f"We couldn't find a city called “{form['from']}”. Pick one from the list." if form["from"]
                      else "Enter a departure city.")
    if destination is None:
        errors.append(f"We couldn't find a city called “{form['to']}”. Pick one from the list." if form["to"]
                      else "Enter a destination city.")
    if origin and origin == destination:
        errors.append("Departure and destination must be different.")
    if date is None:
        errors.append("Enter a departure date as YYYY-MM-DD.")
    elif not TODAY < date <= LAST_DAY:
        errors.append(f"Choose a date between {TODAY + dt.timedelta(days=1):%d %B} and {LAST_DAY:%d %B %Y}.")
    if form["pax"] not in [str(n) for n in range(1, 7)] or form["cabin"] not in CABINS:
        errors.append("Choose passengers and cabin.")
    if errors:
        return render_template("travel/home.html", form=form, errors=errors, cities=_cities_json(), cabins=CABINS,
                               today=TODAY.isoformat(), last=LAST_DAY.isoformat()), 400
    return redirect(url_for("travel.results", **{"from": origin, "to": destination, "date": date.isoformat(),
                                                 "pax": form["pax"], "cabin": form["cabin"]}))


def _query():
    args = request.args
    q = {"from": args.get("from", ""), "to": args.get("to", ""), "date": args.get("date", ""),
         "pax": args.get("pax", "1"), "cabin": args.get("cabin", "economy")}
    if q["from"] not in CITIES or q["to"] not in CITIES or parse_date(q["date"]) is None:
        abort(404)
    if q["pax"] not in [str(n) for n in range(1, 7)] or q["cabin"] not in CABINS:
        abort(400)
    return q


@blueprint.get("/api/flights")
def api_flights():
    """Flights of one day between two cities (economy, 1 passenger), departure order, each with
    its booking page URL; 404 with a reason when a city or the date is not understood."""
    args = request.args
    origin, destination, date = resolve_city(args.get("origin", "")), resolve_city(args.get("destination", "")), \
        parse_date(args.get("date", ""))
    if origin is None or destination is None or date is None:
        bad = [k for k, v in (("origin", origin), ("destination", destination), ("date", date)) if v is None]
        return jsonify(error=f"not understood: {bad}"), 404
    flights = filter_sort(flights_for(origin, destination, date.isoformat()), sort="departure")
    return jsonify(origin=origin, destination=destination, date=date.isoformat(), flights=[
        {"airline": f.airline_name, "number": f.number, "depart": f"{f.depart // 60:02d}:{f.depart % 60:02d}",
         "duration_min": f.duration, "stops": f.stops, "price_eur": f.price,
         "url": url_for("travel.book", fid=f.id, pax="1", cabin="economy", _external=True)} for f in flights])


@blueprint.get("/flights")
def results():
    q = _query()
    sort = request.args.get("sort", "departure")
    sort = sort if sort in SORTS else "departure"
    nonstop, airline = request.args.get("nonstop") == "1", request.args.get("airline", "")
    flights = flights_for(q["from"], q["to"], q["date"])
    shown = filter_sort(flights, nonstop=nonstop, airline=airline, sort=sort)
    current_state().travel.searches.append(dict(q, sort=sort, nonstop=str(nonstop), airline=airline))
    date = dt.date.fromisoformat(q["date"])
    return render_template("travel/results.html", q=q, flights=shown, total=len(flights), sort=sort, sorts=SORTS,
                           nonstop=nonstop, airline=airline, airlines=sorted({f.airline_name for f in flights}),
                           origin=city_label(q["from"]), destination=city_label(q["to"]),
                           date_text=f"{date:%a %d %b %Y}", cabin=CABINS[q["cabin"]][0], pax=int(q["pax"]))


@blueprint.route("/book/<fid>", methods=["GET", "POST"])
def book(fid: str):
    flight = flight_by_id(fid)
    pax, cabin = request.values.get("pax", "1"), request.values.get("cabin", "economy")
    if flight is None or cabin not in CABINS or pax not in [str(n) for n in range(1, 7)]:
        abort(404)
    state = current_state()
    form, errors = {k: "" for k in BOOKING_FIELDS}, {}
    if request.method == "GET":
        state.travel.selected.append(fid)
    else:
        form = {k: request.form.get(k, "").strip() for k in BOOKING_FIELDS}
        for k, label in zip(BOOKING_FIELDS, ("First name", "Last name", "Email")):
            if not form[k]:
                errors[k] = f"{label} is required."
        if form["email"] and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]{2,}", form["email"], re.I):
            errors["email"] = "Enter a valid email address."
        if not errors:
            ref = "TR" + hashlib.sha256(f"{state.sid}:{len(state.travel.bookings)}".encode()).hexdigest()[:6].upper()
            state.travel.bookings.append({"ref": ref, "flight_id": fid, "passengers": int(pax), "cabin": cabin, **form})
            return redirect(url_for("travel.confirmation", ref=ref))
    return render_template("travel/book.html", f=flight, pax=int(pax), cabin=cabin, cabin_name=CABINS[cabin][0],
                           total=flight.fare(cabin) * int(pax), form=form, errors=errors,
                           origin=city_label(flight.origin), destination=city_label(flight.destination))


@blueprint.get("/booking/<ref>")
def confirmation(ref: str):
    found = [b for b in current_state().travel.bookings if b["ref"] == ref]
    if not found:
        abort(404)
    b = found[0]
    f = flight_by_id(b["flight_id"])
    return render_template("travel/confirmation.html", b=b, f=f, origin=city_label(f.origin),
                           destination=city_label(f.destination), cabin_name=CABINS[b["cabin"]][0],
                           total=f.fare(b["cabin"]) * b["passengers"], airlines=AIRLINES)
