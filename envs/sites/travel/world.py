"""The Travel site's world: cities, airlines and the flights between any two cities on any
day, all a pure function of (origin, destination, date).

The site's calendar is fixed: "today" is 2026-06-01 and flights can be searched from
2026-06-02 to 2026-12-31. Cities are the entities split into train and test: a task's origin
and destination both come from its split.
"""
from __future__ import annotations

import datetime as dt
import math
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from webrl.envs.sites.common import split_of

TODAY = dt.date(2026, 6, 1)
LAST_DAY = dt.date(2026, 12, 31)
CITIES = {  # code: (name, country, lat, lon)
    "LIS": ("Lisbon", "Portugal", 38.7, -9.1), "OPO": ("Porto", "Portugal", 41.1, -8.6),
    "MAD": ("Madrid", "Spain", 40.4, -3.7), "BCN": ("Barcelona", "Spain", 41.4, 2.2),
    "SVQ": ("Seville", "Spain", 37.4, -6.0), "VLC": ("Valencia", "Spain", 39.5, -0.4),
    "PAR": ("Paris", "France", 48.9, 2.4), "LYS": ("Lyon", "France", 45.8, 4.8),
    "NCE": ("Nice", "France", 43.7, 7.3), "ROM": ("Rome", "Italy", 41.9, 12.5),
    "MIL": ("Milan", "Italy", 45.5, 9.2), "NAP": ("Naples", "Italy", 40.9, 14.3),
    "BER": ("Berlin", "Germany", 52.5, 13.4), "MUC": ("Munich", "Germany", 48.1, 11.6),
    "HAM": ("Hamburg", "Germany", 53.6, 10.0), "VIE": ("Vienna", "Austria", 48.2, 16.4),
    "ZRH": ("Zurich", "Switzerland", 47.4, 8.5), "GVA": ("Geneva", "Switzerland", 46.2, 6.1),
    "AMS": ("Amsterdam", "Netherlands", 52.4, 4.9), "BRU": ("Brussels", "Belgium", 50.8, 4.4),
    "DUB": ("Dublin", "Ireland", 53.3, -6.3), "EDI": ("Edinburgh", "United Kingdom", 55.9, -3.2),
    "OSL": ("Oslo", "Norway", 59.9, 10.8), "BGO": ("Bergen", "Norway", 60.4, 5.3),
    "STO": ("Stockholm", "Sweden", 59.3, 18.1), "CPH": ("Copenhagen", "Denmark", 55.7, 12.6),
    "HEL": ("Helsinki", "Finland", 60.2, 24.9), "TLL": ("Tallinn", "Estonia", 59.4, 24.8),
    "RIX": ("Riga", "Latvia", 56.9, 24.1), "WAW": ("Warsaw", "Poland", 52.2, 21.0),
    "KRK": ("Krakow", "Poland", 50.1, 19.9), "PRG": ("Prague", "Czechia", 50.1, 14.4),
    "BUD": ("Budapest", "Hungary", 47.5, 19.0), "ATH": ("Athens", "Greece", 37.98, 23.7),
}
AIRLINES = {"AX": "Aerolux", "NW": "Nordwind", "SI": "Solair", "AP": "Alpina", "CW": "Celtic Wings",
            "HE": "Helio Air"}
CABINS = {"economy": ("Economy", 1.0), "premium": ("Premium economy", 1.6), "business": ("Business", 2.8)}
SORTS = {"departure": "Departure time", "price": "Price (lowest first)", "duration": "Duration (shortest first)"}


@dataclass(frozen=True)
class Flight:
    id: str
    origin: str
    destination: str
    date: str
    airline: str
    number: str
    depart: int   # minutes after midnight
    duration: int  # minutes
    stops: int
    price: int    # per passenger, economy, euros

    @property
    def hue(self) -> int:
        return {"AX": 210, "NW": 150, "SI": 30, "AP": 0, "CW": 120, "HE": 280}[self.airline]

    @property
    def airline_name(self) -> str:
        return AIRLINES[self.airline]

    @property
    def depart_time(self) -> str:
        return f"{self.depart // 60:02d}:{self.depart % 60:02d}"

    @property
    def arrive_time(self) -> str:
        t = self.depart + self.duration
        return f"{t // 60 % 24:02d}:{t % 60:02d}" + (" +1" if t >= 24 * 60 else "")

    @property
    def duration_text(self) -> str:
        return f"{self.duration // 60}h {self.duration % 60:02d}m"

    @property
    def stops_text(self) -> str:
        return "Nonstop" if self.stops == 0 else f"{self.stops} stop{'s' if self.stops > 1 else ''}"

    def fare(self, cabin: str) -> int:
        return int(round(self.price * CABINS[cabin][1]))


def city_split(code: str) -> str:
    return split_of(CITIES[code][0], "travel")


def city_label(code: str) -> str:
    return f"{CITIES[code][0]} ({code})"


def resolve_city(text: str) -> Optional[str]:
    """"Lisbon (LIS)", "lisbon", "LIS" -> "LIS"; None when nothing matches exactly."""
    text = (text or "").strip()
    m = re.search(r"\(([A-Za-z]{3})\)\s*$", text)
    if m and m.group(1).upper() in CITIES:
        return m.group(1).upper()
    for code, (name, *_rest) in CITIES.items():
        if text.lower() in (name.lower(), code.lower()):
            return code
    return None


MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")


WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def parse_date(text: str) -> Optional[dt.date]:
    """YYYY-MM-DD, DD/MM/YYYY, "14 June 2026", "June 14, 2026", and the goals' year-less forms
    "June 14" / "Sunday 14 June" (a leading weekday is ignored; the year is the first one that
    puts the day on or after TODAY, as every task's date is)."""
    text = (text or "").strip().lower().replace(",", " ")
    parts = text.split()
    if parts and parts[0] in WEEKDAYS:
        parts = parts[1:]
    if len(parts) == 2 and (parts[0] in MONTHS) != (parts[1] in MONTHS):
        month, day = (parts[0], parts[1]) if parts[0] in MONTHS else (parts[1], parts[0])
        try:
            date = dt.date(TODAY.year, MONTHS.index(month) + 1, int(day))
            return date if date >= TODAY else date.replace(year=TODAY.year + 1)
        except ValueError:
            return None
    text = " ".join(parts)
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return dt.date.fromisoformat(text)
        m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", text)
        if m:
            return dt.date(int(m.group(3)), int(m.group(2)), int(m.group(1)))
        parts = text.split()
        if len(parts) == 3 and parts[1] in MONTHS:
            return dt.date(int(parts[2]), MONTHS.index(parts[1]) + 1, int(parts[0]))
        if len(parts) == 3 and parts[0] in MONTHS:
            return dt.date(int(parts[2]), MONTHS.index(parts[0]) + 1, int(parts[1]))
    except ValueError:
        return None
    return None


def _distance_km(a: str, b: str) -> float:
    (_, _, la1, lo1), (_, _, la2, lo2) = CITIES[a], CITIES[b]
    x = math.radians(lo2 - lo1) * math.cos(math.radians((la1 + la2) / 2))
    return 6371 * math.hypot(x, math.radians(la2 - la1))


@lru_cache(maxsize=4096)
def flights_for(origin: str, destination: str, date: str, world_seed: int = 0) -> tuple[Flight, ...]:
    """6-9 flights with distinct departure times, sorted by departure."""
    rng = random.Random(f"flights:{world_seed}:{origin}:{destination}:{date}")
    km = _distance_km(origin, destination)
    departs = sorted(rng.sample(range(6 * 12, 22 * 12), rng.randint(6, 9)))
    flights = []
    for k, slot in enumerate(departs):
        code = rng.choice(list(AIRLINES))
        stops = rng.choices((0, 1, 2), (0.45, 0.4, 0.15))[0]
        duration = int(45 + km / 13.0) + stops * rng.randint(60, 160) + rng.randint(-10, 20)
        price = int(40 + km * rng.uniform(0.07, 0.13) * (1.25 if stops == 0 else 1.0) + rng.randint(0, 60))
        ymd = date.replace("-", "")
        flights.append(Flight(f"{origin}-{destination}-{ymd}-{k}", origin, destination, date, code,
                              f"{code} {rng.randint(100, 9899)}", slot * 5, 5 * round(duration / 5), stops, price))
    return tuple(flights)


def flight_by_id(fid: str) -> Optional[Flight]:
    m = re.fullmatch(r"([A-Z]{3})-([A-Z]{3})-(\d{8})-(\d+)", fid or "")
    if not m or m.group(1) not in CITIES or m.group(2) not in CITIES:
        return None
    ymd = m.group(3)
    flights = flights_for(m.group(1), m.group(2), f"{ymd[:4]}-{ymd[4:6]}-{ymd[6:]}")
    k = int(m.group(4))
    return flights[k] if k < len(flights) else None


def filter_sort(flights, *, nonstop: bool = False, airline: str = "", sort: str = "departure") -> list[Flight]:
    out = [f for f in flights if (not nonstop or f.stops == 0) and (not airline or f.airline_name == airline)]
    key = {"price": lambda f: (f.price, f.depart), "duration": lambda f: (f.duration, f.depart)}.get(sort, lambda f: f.depart)
    return sorted(out, key=key)
