"""The Wiki's world: fictional countries, cities, rivers and mountains with facts, tables and
links between them, generated from a world seed.

Articles are the entities split into train and test (`split_of` on the title). Facts are
stored as display strings ("1,204,310", "2,114 m") exactly as the pages show them; answers
are matched after normalisation (common.answer_matches).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache

from webrl.envs.sites.common import split_of

SYLLABLES = ("var", "hol", "kes", "tra", "mor", "lin", "dra", "vel", "sun", "ath", "bri", "cor",
             "dun", "el", "fen", "gal", "hal", "ir", "jor", "kal", "lor", "mar", "nor", "ost",
             "pel", "quin", "ros", "sel", "tor", "ul", "ven", "wyn", "yar", "zel", "ber", "cas")
CITY_SUFFIX = ("holm", "burg", "ford", "stad", "mouth", "vik", "grad", "ton", "heim", "mere", "port")
COUNTRY_SUFFIX = ("ia", "land", "onia", "avia", "ora")
DISTRICTS = ("Old Town", "Harbour", "Northgate", "Riverside", "Eastfield", "Hillcrest", "Market Quarter",
             "Westend", "Lakeside", "University Quarter", "Southbank", "Castle Hill", "Greenway", "Docklands")
CURRENCIES = ("crown", "mark", "florin", "ducat", "thaler", "real", "lira", "dinar", "shilling", "guilder")
SEAS = ("the Amber Sea", "the Northern Gulf", "the Strait of Oro", "the Western Ocean", "Lake Miren")
PEOPLE = ("Ana Silva", "Ben Meyer", "Chloe Okafor", "Daniel Novak", "Elif Larsen", "Farid Costa",
          "Grace Tanaka", "Hugo Dubois", "Ines Rossi", "Jonas Kowalski", "Kira Haddad", "Liam Moreau",
          "Maya Jensen", "Noah Varga", "Olga Lindqvist", "Pedro Ortega", "Rosa Meyer", "Sami Costa")


@dataclass
class Article:
    slug: str
    title: str
    kind: str                       # country | city | river | mountain
    facts: dict[str, str]           # infobox label -> display value
    links: dict[str, str] = field(default_factory=dict)   # infobox label -> linked slug
    table: list[dict[str, str]] = field(default_factory=list)
    table_title: str = ""
    sections: list[tuple[str, str]] = field(default_factory=list)

    @property
    def split(self) -> str:
        return split_of(self.title, "wiki")


def _name(rng: random.Random, suffixes, used: set[str]) -> str:
    while True:
        name = (rng.choice(SYLLABLES) + rng.choice(SYLLABLES) + rng.choice(suffixes)).capitalize()
        if name not in used and len(name) <= 12:
            used.add(name)
            return name


def slugify(title: str) -> str:
    return title.lower().replace(" ", "-")


def _language(country: str) -> str:
    if country.endswith("ia"):
        return country + "n"
    if country.endswith("a"):
        return country + "n"
    return country[:-4] + "ish" if country.endswith("land") else country + "ese"


def _num(n: int) -> str:
    return f"{n:,}"


def _build(rng: random.Random) -> dict[str, Article]:
    used: set[str] = set()
    arts: dict[str, Article] = {}
    countries = [_name(rng, COUNTRY_SUFFIX, used) for _ in range(14)]
    for ci, country in enumerate(countries):
        cities = [_name(rng, CITY_SUFFIX, used) for _ in range(5)]
        rows = []
        for k, city in enumerate(cities):
            pop = rng.randint(20, 3000) * 1000 + rng.randint(0, 999)
            districts = rng.sample(DISTRICTS, 4)
            pops = rng.sample(range(3000, pop // 3), 4)
            areas = rng.sample(range(4, 90), 4)
            table = [{"District": d, "Population": _num(p), "Area (km²)": str(a)} for d, p, a in zip(districts, pops, areas)]
            facts = {"Country": country, "Population": _num(pop), "Area": f"{rng.randint(30, 900)} km²",
                     "Elevation": f"{rng.randint(2, 1800):,} m", "Founded": str(rng.randint(800, 1850)),
                     "Mayor": rng.choice(PEOPLE)}
            arts[slugify(city)] = Article(slugify(city), city, "city", facts, {"Country": slugify(country)},
                                          table, f"Districts of {city}")
            rows.append({"City": city, "Population": _num(pop), "Role": "Capital" if k == 0 else "City"})
        facts = {"Capital": cities[0], "Population": _num(sum(int(r["Population"].replace(",", "")) for r in rows) * 3),
                 "Area": f"{rng.randint(20, 400) * 1000:,} km²", "Currency": f"{country} {rng.choice(CURRENCIES)}",
                 "Official language": _language(country),
                 "Independence": str(rng.randint(1200, 1990))}
        arts[slugify(country)] = Article(slugify(country), country, "country", facts, {"Capital": slugify(cities[0])},
                                         rows, f"Largest cities of {country}")
    city_slugs = [a.slug for a in arts.values() if a.kind == "city"]
    mountains = []
    for _ in range(22):
        name = "Mount " + _name(rng, ("", "a", "or", "en"), used)
        country = rng.choice(countries)
        facts = {"Country": country, "Elevation": f"{rng.randint(1200, 6500):,} m",
                 "Range": _name(rng, (" Range", " Alps", " Highlands"), used),
                 "First ascent": str(rng.randint(1780, 1990)), "First climbed by": rng.choice(PEOPLE)}
        arts[slugify(name)] = Article(slugify(name), name, "mountain", facts, {"Country": slugify(country)})
        mountains.append(name)
    for _ in range(22):
        name = _name(rng, ("", "a", "e"), used) + " River"
        through = rng.sample(city_slugs, 3)
        source = rng.choice(mountains)
        facts = {"Length": f"{rng.randint(80, 2900):,} km", "Source": source, "Mouth": rng.choice(SEAS),
                 "Discharge": f"{rng.randint(40, 9000):,} m³/s"}
        table = [{"City": arts[s].title, "Distance from source": f"{d:,} km"}
                 for s, d in zip(through, sorted(rng.sample(range(10, 2000), 3)))]
        arts[slugify(name)] = Article(slugify(name), name, "river", facts, {"Source": slugify(source)},
                                      table, f"Cities on the {name}")
        for s in through:
            arts[s].facts.setdefault("River", name)
            arts[s].links.setdefault("River", slugify(name))
    for a in arts.values():
        a.sections = _sections(rng, a, arts)
    return arts


def _sections(rng: random.Random, a: Article, arts: dict[str, Article]) -> list[tuple[str, str]]:
    f = a.facts
    if a.kind == "city":
        return [("History", f"{a.title} was founded in {f['Founded']} as a market town and grew into one of the main "
                            f"cities of [[{f['Country']}]]."),
                ("Geography", f"The city lies at an elevation of {f['Elevation']}" +
                 (f" on the banks of the [[{f['River']}]]." if "River" in f else ".")),
                ("Government", f"The current mayor is {f['Mayor']}.")]
    if a.kind == "country":
        return [("History", f"{a.title} declared independence in {f['Independence']}."),
                ("Economy", f"The currency is the {f['Currency']}. The capital, [[{f['Capital']}]], is the largest city.")]
    if a.kind == "mountain":
        return [("Geography", f"{a.title} is a peak of the {f['Range']} in [[{f['Country']}]]."),
                ("Climbing history", f"It was first climbed in {f['First ascent']} by {f['First climbed by']}.")]
    return [("Course", f"The {a.title} rises on [[{f['Source']}]] and flows into {f['Mouth']}.")]


@lru_cache(maxsize=2)
def build_world(world_seed: int = 0) -> dict[str, Article]:
    return _build(random.Random(f"wiki-world-{world_seed}"))


def by_title(world: dict[str, Article]) -> dict[str, Article]:
    return {a.title: a for a in world.values()}
