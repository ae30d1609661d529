"""The sandbox sites' HTTP server: one Flask app with a blueprint per site, served by
werkzeug's threaded WSGI server on 127.0.0.1, started lazily once per process.

    /shop/  /travel/  /wiki/  /widgets/     the four sites
    /__session?sid=S&next=/shop/            sets the `webrl_sid` cookie, redirects to next
    /                                       an index of the sites (for people browsing)

Every episode gets its own `SessionState` (state.py), created by `SiteTask.setup` in-process
and selected by the cookie, so BrowserContexts running side by side never see each other's
carts or bookings. A request without a known cookie gets a fresh anonymous session (someone
browsing with `webrl sites`).
"""
from __future__ import annotations

import os
import secrets
import threading
from typing import Optional

from flask import Flask, g, redirect, render_template_string, request
from werkzeug.serving import WSGIRequestHandler, make_server

from webrl.envs.sites.state import COOKIE_NAME, STORE, SessionState

_SERVER_LOCK = threading.Lock()
_SERVER: Optional[dict] = None

_INDEX = """<!doctype html><html><head><meta charset="utf-8"><title>webrl sandbox sites</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:system-ui,sans-serif;max-width:640px;margin:40px auto;padding:0 16px}
a{display:block;padding:12px;margin:8px 0;border:1px solid #ccd;border-radius:8px;
text-decoration:none;color:#124}</style></head><body><h1>webrl sandbox sites</h1>
{% for name, title in sites %}<a href="/{{ name }}/">{{ title }}</a>{% endfor %}</body></html>"""


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (thousands of episode requests)."""

    def log_request(self, *args, **kwargs) -> None:
        return None


def current_state() -> SessionState:
    """This request's session state (created anonymously when the cookie is unknown)."""
    if "webrl_state" not in g:
        sid = request.cookies.get(COOKIE_NAME)
        state = STORE.get(sid)
        if state is None:
            sid = secrets.token_hex(16)
            state = STORE.put(SessionState(sid=sid))
            g.webrl_new_sid = sid
        g.webrl_state = state
    return g.webrl_state


def create_app() -> Flask:
    from webrl.envs.sites.shop.app import blueprint as shop
    from webrl.envs.sites.travel.app import blueprint as travel
    from webrl.envs.sites.widgets.app import blueprint as widgets
    from webrl.envs.sites.wiki.app import blueprint as wiki

    app = Flask(__name__)
    app.config["TEMPLATES_AUTO_RELOAD"] = False
    for bp in (shop, travel, wiki, widgets):
        app.register_blueprint(bp)

    @app.get("/")
    def index():
        sites = [("shop", "Shop — an online store"), ("travel", "Travel — flight search"),
                 ("wiki", "Wiki — an encyclopedia"), ("widgets", "Widgets — form controls")]
        return render_template_string(_INDEX, sites=sites)

    @app.get("/__session")
    def session_cookie():
        sid = request.args.get("sid", "")
        target = request.args.get("next", "/")
        if not target.startswith("/"):
            target = "/"
        response = redirect(target)
        if STORE.get(sid) is not None:
            response.set_cookie(COOKIE_NAME, sid, samesite="Lax")
        return response

    @app.get("/favicon.ico")
    def favicon():
        return "", 204

    @app.after_request
    def remember_new_session(response):
        sid = g.get("webrl_new_sid")
        if sid:
            response.set_cookie(COOKIE_NAME, sid, samesite="Lax")
        response.headers["Cache-Control"] = "no-store"
        return response

    return app


# What observations show in place of the server's real origin (`SiteTask.url_alias`): the
# server binds a free port, and a prompt whose URL digits change from run to run changes a
# policy's greedy choice wherever two actions are close.
SHOWN_ORIGIN = "http://sandbox.test"  # .test: a name reserved for testing, never a real host


def ensure_server(port: Optional[int] = None) -> str:
    """Start the server once per process (a daemon thread) and return its base URL,
    e.g. "http://127.0.0.1:41234". Port: `port`, else $WEBRL_SITES_PORT, else a free one."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            port = port if port is not None else int(os.environ.get("WEBRL_SITES_PORT", "0"))
            server = make_server("127.0.0.1", port, create_app(), threaded=True,
                                 request_handler=_QuietHandler)
            thread = threading.Thread(target=server.serve_forever, name="webrl-sites", daemon=True)
            thread.start()
            _SERVER = {"server": server, "thread": thread,
                       "url": f"http://127.0.0.1:{server.server_port}"}
        return _SERVER["url"]


def stop_server() -> None:
    """Shut the server down (tests, `webrl sites` on Ctrl-C)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is not None:
            _SERVER["server"].shutdown()
            _SERVER["thread"].join(timeout=5)
            _SERVER = None
