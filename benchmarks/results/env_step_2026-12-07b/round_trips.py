import time, statistics
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/lib/chromium/chromium", args=["--no-sandbox"])
    page = b.new_page()
    page.set_content("<html><body><p id=x>hi</p><script>window.__w={a:1}</script></body></html>")
    fn = "(arg) => ({calm: true, stamp: [performance.timeOrigin, window.__w.a, arg.t]})"
    def wff():
        h = page.wait_for_function(f"(arg) => ({{value: ({fn})(arg)}})", arg={"t": 1}, timeout=1000)
        try: return h.json_value()["value"]
        finally: h.dispose()
    def loc():
        return page.locator(":root").evaluate(f"(_, arg) => ({fn})(arg)", {"t": 1}, timeout=1000)
    def ev():
        return page.evaluate(fn, {"t": 1})
    for name, f in (("wait_for_function+json+dispose", wff), ("locator.evaluate", loc), ("page.evaluate", ev)) * 2:
        ts = []
        for _ in range(200):
            t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
        print(f"{name:<34} median {1000*statistics.median(ts):.2f} ms")
    # stuck page: does locator.evaluate time out?
    page.evaluate("() => { setTimeout(() => { const t = Date.now(); while (Date.now() - t < 5000) {} }, 0); }")
    time.sleep(0.2)
    t = time.perf_counter()
    try:
        loc(); print("no timeout?!")
    except Exception as e:
        print("stuck page:", type(e).__name__, f"after {time.perf_counter()-t:.2f} s")
    b.close()
