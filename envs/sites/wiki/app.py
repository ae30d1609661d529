"""Wiki routes (Flask blueprint, mounted at /wiki): main page, search (tolerant of case and
small typos), category lists and articles with infoboxes, tables and links. `/wiki/api/search?q=`
is the JSON behind the `search_articles` tool (`webrl.envs.tools`): titles, URLs and infobox
facts, so a tool user can answer a fact question without opening the article (a side effect the
tools benchmark counts)."""
from __future__ import annotations

import re

from flask import Blueprint, abort, jsonify, render_template, request, url_for
from markupsafe import Markup, escape

from webrl.envs.sites.common import fuzzy_score, normalize
from webrl.envs.sites.server import current_state
from webrl.envs.sites.wiki.world import build_world, by_title, slugify

blueprint = Blueprint("wiki", __name__, url_prefix="/wiki", template_folder="templates", static_folder="static")
API_RESULTS = 5
KINDS = {"country": "Countries", "city": "Cities", "river": "Rivers", "mountain": "Mountains"}


@blueprint.app_template_filter("wikilinks")
def wikilinks(text: str) -> Markup:
    """"[[Title]]" -> a link to the article (text escaped first)."""
    titles = by_title(build_world())
    def link(m):
        title = m.group(1)
        if title in titles:
            return f'<a href="/wiki/page/{titles[title].slug}">{title}</a>'
        return title
    return Markup(re.sub(r"\[\[([^\]]+)\]\]", link, str(escape(text))))


def plain(text: str) -> str:
    return re.sub(r"\[\[([^\]]+)\]\]", r"\1", text)


def search_articles(query: str) -> list:
    world = build_world()
    scored = []
    for a in world.values():
        exact = normalize(a.title) == normalize(query)
        score = fuzzy_score(query, a.title) or (fuzzy_score(query, f"{a.title} {KINDS[a.kind]}") and 1)
        if exact or score:
            scored.append((not exact, -score, a.title, a))
    return [a for *_k, a in sorted(scored, key=lambda x: x[:3])]


@blueprint.get("/")
def main_page():
    state = current_state()
    arts = sorted(build_world().values(), key=lambda a: a.slug)
    featured = arts[(state.seed * 31 + 7) % len(arts)]
    return render_template("wiki/main.html", featured=featured, plain=plain, kinds=KINDS,
                           count=len(arts), query="")


@blueprint.get("/search")
def search():
    q = request.args.get("q", "").strip()
    current_state().wiki.searches.append(q)
    results = search_articles(q) if q else []
    return render_template("wiki/search.html", results=results[:20], q=q, query=q, plain=plain, kinds=KINDS)


@blueprint.get("/api/search")
def api_search():
    q = request.args.get("q", "").strip()
    results = search_articles(q)[:API_RESULTS] if q else []
    return jsonify(query=q, results=[{"title": a.title, "kind": a.kind, "facts": {k: plain(v) for k, v in a.facts.items()},
                                      "url": url_for("wiki.article", slug=a.slug, _external=True)} for a in results])


@blueprint.get("/category/<kind>")
def category(kind: str):
    if kind not in KINDS:
        abort(404)
    arts = sorted((a for a in build_world().values() if a.kind == kind), key=lambda a: a.title)
    return render_template("wiki/category.html", arts=arts, title=KINDS[kind], kinds=KINDS, query="")


@blueprint.get("/page/<slug>")
def article(slug: str):
    a = build_world().get(slug)
    if a is None:
        abort(404)
    current_state().wiki.visited.append(slug)
    linked = {label: build_world()[s] for label, s in a.links.items()}
    see_also = sorted({m for _h, text in a.sections for m in re.findall(r"\[\[([^\]]+)\]\]", text)} |
                      ({row["City"] for row in a.table} if a.kind in ("country", "river") else set()))
    titles = by_title(build_world())
    return render_template("wiki/article.html", a=a, linked=linked, kinds=KINDS, query="",
                           see_also=[titles[t] for t in see_also if t in titles and t != a.title],
                           city_links={row.get("City"): slugify(row.get("City", "")) for row in a.table})
