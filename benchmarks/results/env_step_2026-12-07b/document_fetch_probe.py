import http.server, threading, time, re
from playwright.sync_api import sync_playwright

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path.startswith("/redir"):
            self.send_response(302); self.send_header("Location", "http://127.0.0.3:%d/outside.html" % PORT3); self.end_headers(); return
        body = b"<html><head><script src='/a.js'></script><link rel=stylesheet href='/b.css'></head><body>hi <a id=l href='/redir.js'>x</a></body></html>" if self.path.endswith(".html") or self.path == "/" else b"/*x*/"
        self.send_response(200); self.send_header("Content-Type", "text/html" if self.path.endswith(".html") else "text/plain"); self.end_headers(); self.wfile.write(body)
s1 = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H); PORT = s1.server_address[1]
s3 = http.server.ThreadingHTTPServer(("127.0.0.3", 0), H); PORT3 = s3.server_address[1]
got3 = []
class H3(H):
    def do_GET(self):
        got3.append(self.path); super().do_GET()
s3.RequestHandlerClass = H3
for s in (s1, s3): threading.Thread(target=s.serve_forever, daemon=True).start()

with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/lib/chromium/chromium", args=["--no-sandbox"])
    ctx = b.new_context()
    routed = []
    allowed = f"127.0.0.1:{PORT}"
    # playwright route: only requests NOT to the allowed host
    ctx.route(re.compile(r"^https?://(?!" + re.escape(allowed) + r"(?:[/?#]|$))"), lambda r: (routed.append(r.request.url), r.abort("blockedbyclient")))
    page = ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    paused = []
    def on_paused(ev):
        url = ev["request"]["url"]
        paused.append((ev.get("resourceType"), url, ev.get("redirectedRequestId")))
        if allowed in url:
            cdp.send("Fetch.continueRequest", {"requestId": ev["requestId"]})
        else:
            cdp.send("Fetch.failRequest", {"requestId": ev["requestId"], "errorReason": "BlockedByClient"})
    cdp.on("Fetch.requestPaused", on_paused)
    cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "resourceType": "Document", "requestStage": "Request"}]})
    page.goto(f"http://{allowed}/index.html")
    print("after goto: paused", paused, "routed", routed)
    try:
        page.goto(f"http://{allowed}/redir.js")
    except Exception as e:
        print("redir goto raised:", str(e).splitlines()[0])
    print("paused", paused)
    print("routed", routed, "outside server got", got3, "page url", page.url)
    b.close()
