"""The in-page scripts `webrl.envs.execute` runs, each through `evaluate_with_timeout`.

They replace `page.mouse` / `page.keyboard` / plain `page.evaluate`, which wait forever on a page
whose main thread is stuck in a script (`webrl.envs.execute` says why): marking the element under
a point (`POINT_JS`), finding, focusing and marking the field to type into or press keys in
(`FOCUS_JS`), the frame path to a marked element inside same-origin iframes (`FRAME_PATH_JS`),
and scrolling the scrollable ancestor of a target (`SCROLL_JS`). The comment above each script
says what it marks and returns.
"""

# Marks the element under (x, y) with data-webrl-point=<mark>; returns its box offset.
POINT_JS = """({x, y, mark}) => {
  const el = document.elementFromPoint(x, y);
  if (!el) return null;
  for (const old of document.querySelectorAll(`[data-webrl-point="${mark}"]`)) old.removeAttribute('data-webrl-point');
  el.setAttribute('data-webrl-point', mark);
  const r = el.getBoundingClientRect();
  const text = (el.innerText || el.value || el.getAttribute('aria-label') || '').replace(/\\s+/g, ' ').trim();
  return {tag: el.tagName.toLowerCase(), name: text.slice(0, 60), dx: x - r.left, dy: y - r.top};
}"""

# Resolves the field to type into (element id, else the focused element), focuses and marks it.
FOCUS_JS = """({id, needEditable}) => {
  const TEXT = ['text', 'search', 'email', 'url', 'tel', 'password', 'number', 'date', 'time',
                'datetime-local', 'month', 'week', ''];
  const editable = (e) => !!e && ((e.tagName === 'TEXTAREA' && !e.readOnly && !e.disabled)
    || (e.tagName === 'INPUT' && TEXT.includes((e.getAttribute('type') || '').toLowerCase())
        && !e.readOnly && !e.disabled) || e.isContentEditable);
  const frames = [];  // data-webrl-frame marks of the frames from the top document to el's
  const enter = (frame) => {
    const i = Array.prototype.indexOf.call(frame.ownerDocument.querySelectorAll('iframe, frame'), frame);
    frame.setAttribute('data-webrl-frame', String(i));
    frames.push(String(i));
    return frame.contentDocument;
  };
  const find = (doc) => {  // the marked element in doc or, depth first, in its same-origin frames
    const own = doc.querySelector(`[data-webrl-id="${id}"]`);
    if (own) return own;
    for (const frame of doc.querySelectorAll('iframe, frame')) {
      let inner = null;
      try { inner = frame.contentDocument; } catch (_) { inner = null; }
      if (!inner) continue;
      const depth = frames.length;
      const found = find(enter(frame));
      if (found) return found;
      frames.length = depth;
    }
    return null;
  };
  let el = id === null ? document.activeElement : find(document);
  while (id === null && el && (el.tagName === 'IFRAME' || el.tagName === 'FRAME') && el.contentDocument) {
    el = enter(el).activeElement;  // focus inside a same-origin frame
  }
  if (!el) return {ok: false, why: 'missing'};
  if (id !== null && needEditable && !editable(el)) {
    const inner = el.control || el.querySelector('input, textarea, [contenteditable=""], [contenteditable="true"]');
    if (editable(inner)) el = inner;
  }
  const tag = el.tagName.toLowerCase();
  if (needEditable && !editable(el)) return {ok: false, why: id === null && (el === el.ownerDocument.body || tag === 'html') ? 'nofocus' : 'noteditable', tag};
  for (const old of el.ownerDocument.querySelectorAll('[data-webrl-focus]')) old.removeAttribute('data-webrl-focus');
  if (id !== null) el.focus();
  el.setAttribute('data-webrl-focus', '1');
  const text = 'value' in el && typeof el.value === 'string' ? el.value : (el.textContent || '');
  return {ok: true, tag, hasText: text.length > 0, frames};
}"""

# The data-webrl-frame marks of the same-origin frames, from the top document down, whose
# document holds `selector` ([] for the top document, null when no document does). som.js marks
# elements inside same-origin iframes; Playwright's CSS engine enters shadow roots, not frames.
FRAME_PATH_JS = """(selector) => {
  const search = (doc) => {
    if (doc.querySelector(selector)) return [];
    const frames = doc.querySelectorAll('iframe, frame');
    for (let i = 0; i < frames.length; i++) {
      let inner = null;
      try { inner = frames[i].contentDocument; } catch (_) { inner = null; }
      const path = inner && search(inner);
      if (path) { frames[i].setAttribute('data-webrl-frame', String(i)); return [String(i), ...path]; }
    }
    return null;
  };
  try { return search(document); } catch (_) { return null; }
}"""

# Scrolls the nearest scrollable ancestor of the target (element id, point, or none = page).
SCROLL_JS = """({id, x, y, dx, dy}) => {
  let el = id !== null ? document.querySelector(`[data-webrl-id="${id}"]`)
         : (x !== null ? document.elementFromPoint(x, y) : null);
  const root = document.scrollingElement || document.documentElement;
  const canScroll = (e) => {
    if (e === root) return true;
    const s = getComputedStyle(e);
    const overflow = dy !== 0 ? s.overflowY : s.overflowX;
    const room = dy !== 0 ? e.scrollHeight > e.clientHeight : e.scrollWidth > e.clientWidth;
    return room && (overflow === 'auto' || overflow === 'scroll' || overflow === 'overlay');
  };
  while (el && el !== root && !canScroll(el)) el = el.parentElement;
  if (!el) el = root;
  const before = [el.scrollLeft, el.scrollTop];
  el.scrollBy({left: dx, top: dy, behavior: 'instant'});
  return {moved: el.scrollLeft !== before[0] || el.scrollTop !== before[1], top: Math.round(el.scrollTop),
          height: el.scrollHeight, page: el === root};
}"""
