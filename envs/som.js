// Set-of-Mark element collection, evaluated in the page as one function expression.
//
// Input opts: {maxElements, maxNameChars, discovery}. Output: {elements: [...], title, truncated: int (an upper
// bound on the candidates left unscanned once maxElements were kept),
// scrollX, scrollY, viewportWidth, viewportHeight, pageHeight} where each element follows the
// `WebEnv` spec card's element dicts (id, tag, role, name, type, value, placeholder, href, dom_id, checked,
// options, selected, bbox [x, y, w, h] in CSS pixels of the viewport, in_viewport).
// Side effect: sets data-webrl-id="N" on element N and removes stale marks, so that an
// action on id N resolves to [data-webrl-id="N"] for the current observation (Playwright's CSS
// engine pierces open shadow roots, so marks inside them resolve too).
//
// Candidates. discovery "selectors": the SELECTOR matches of the document (native controls,
// ARIA widgets). "full": one TreeWalker pass over the document and every open shadow root;
// a candidate is a SELECTOR match ("native") or an element a page made usable without saying
// so ("extra"): a pointer-event listener (window.__webrlListeners, from listeners.js), an
// on<event> handler property, React handler props (own key __reactProps$… /
// __reactEventHandlers$…; React delegates to its root, so the target holds no listener),
// tabindex >= 0, or the outermost element of a `cursor: pointer` run (listeners on React's root
// container, own key __reactContainer$…, are its dispatcher's, not the root's own). Extras must earn their
// place: one is dropped when it is covered at its centre by an element outside itself, when it
// only wraps a visible candidate with the same box, or when it is large (a quarter of the
// viewport) and holds visible candidates (a delegation root, an app container). Natives keep
// today's rules, so a page whose candidates are all natives gets today's list.
(opts) => {
  const SELECTOR = [
    'a', 'button', 'input', 'select', 'textarea', 'summary', 'label[for]', '[onclick]',
    '[contenteditable=""]', '[contenteditable="true"]', '[contenteditable="plaintext-only"]',
    ...['button', 'link', 'checkbox', 'radio', 'tab', 'option', 'menuitem', 'slider',
        'combobox'].map((r) => `[role="${r}"]`),
  ].join(',');
  const HANDLER_PROPERTIES = ['onclick', 'ondblclick', 'onmousedown', 'onmouseup', 'onpointerdown', 'onpointerup',
                              'oncontextmenu', 'ontouchstart'];
  const REACT_HANDLERS = ['onClick', 'onDoubleClick', 'onMouseDown', 'onMouseUp', 'onPointerDown', 'onPointerUp',
                          'onContextMenu', 'onTouchStart'];
  const NEVER_EXTRA = new Set(['html', 'head', 'body', 'script', 'style', 'noscript', 'template', 'meta', 'link',
                               'title', 'slot']);
  const DESCENDANTS_CHECKED = 64;  // per extra, for the wrapper / container rules
  const maxElements = opts.maxElements;
  const maxName = opts.maxNameChars;
  const full = opts.discovery === 'full';
  const vw = window.innerWidth, vh = window.innerHeight;
  const read = (get, fallback) => { try { return get(); } catch (_) { return fallback; } };

  const collapse = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const clip = (s) => { s = collapse(s); return s.length > maxName ? s.slice(0, maxName) : s; };

  const implicitRole = (el, tag) => {
    const explicit = el.getAttribute('role');
    if (explicit) return explicit.trim().split(/\s+/)[0];
    if (tag === 'a') return el.hasAttribute('href') ? 'link' : 'generic';
    if (tag === 'button' || tag === 'summary') return 'button';
    if (tag === 'select') return (el.multiple || el.size > 1) ? 'listbox' : 'combobox';
    if (tag === 'textarea') return 'textbox';
    if (tag === 'label') return 'label';
    if (tag === 'input') {
      const t = (el.type || 'text').toLowerCase();
      if (['button', 'submit', 'reset', 'image'].includes(t)) return 'button';
      if (t === 'checkbox' || t === 'radio') return t;
      if (t === 'range') return 'slider';
      if (t === 'number') return 'spinbutton';
      if (t === 'search') return 'searchbox';
      return 'textbox';
    }
    if (el.isContentEditable) return 'textbox';
    return 'generic';
  };

  const accessibleName = (el, tag) => {
    const label = el.getAttribute('aria-label');
    if (label && collapse(label)) return label;
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const text = by.split(/\s+/).map((id) => {
        const ref = document.getElementById(id);
        return ref ? ref.textContent : '';
      }).join(' ');
      if (collapse(text)) return text;
    }
    if (tag === 'input' || tag === 'textarea' || tag === 'select') {
      const t = (el.type || '').toLowerCase();
      if (['button', 'submit', 'reset'].includes(t)) return el.value || t;
      if (t === 'image') return el.alt || el.value || 'image';
      if (el.labels && el.labels.length) {
        const text = Array.from(el.labels).map((l) => read(() => l.innerText, '') || l.textContent).join(' ');
        if (collapse(text)) return text;
      }
      return el.getAttribute('title') || el.getAttribute('placeholder') || el.name || '';
    }
    const text = read(() => el.innerText, '') || read(() => el.textContent, '') || '';
    if (collapse(text)) return text;
    const img = el.querySelector && el.querySelector('img[alt]');
    return (img && img.alt) || el.getAttribute('title') || '';
  };

  const isVisible = (el, rect) => {
    if (rect.width <= 0 || rect.height <= 0) return false;
    if (el.checkVisibility) return el.checkVisibility({visibilityProperty: true});
    const style = getComputedStyle(el);
    return style.display !== 'none' && style.visibility !== 'hidden';
  };

  const sameBox = (a, b) => Math.abs(a.x - b.x) < 1 && Math.abs(a.y - b.y) < 1
    && Math.abs(a.width - b.width) < 1 && Math.abs(a.height - b.height) < 1;

  // -- candidates: [{el, native, parent: index of the nearest candidate ancestor or -1, depth}]
  const bySelector = () => {
    for (const old of document.querySelectorAll('[data-webrl-id]')) old.removeAttribute('data-webrl-id');
    return Array.from(document.querySelectorAll(SELECTOR), (el) => ({el, native: true, parent: -1, depth: 0}));
  };

  const listeners = window.__webrlListeners;
  const hasHandler = (el) => {
    for (const name of HANDLER_PROPERTIES) if (el[name]) return true;
    let reactRoot = false;  // React's root container: its listeners dispatch for the whole app
    for (const key of Object.keys(el)) {
      if (key.startsWith('__reactContainer$')) reactRoot = true;
      if (!key.startsWith('__reactProps$') && !key.startsWith('__reactEventHandlers$')) continue;
      const props = el[key];
      if (props && REACT_HANDLERS.some((h) => typeof props[h] === 'function')) return true;
    }
    return !reactRoot && Boolean(listeners && listeners.has(el));
  };
  const parentOf = (el) => el.parentElement || (el.parentNode && el.parentNode.host) || null;

  const byWalk = () => {
    const found = [];
    const index = new Map();     // candidate element -> its index in `found`
    const pointer = new Map();   // element -> computed cursor is pointer (parents come first)
    const visit = (el, natives) => {
      const parent = parentOf(el);
      const isPointer = read(() => getComputedStyle(el).cursor === 'pointer', false);
      pointer.set(el, isPointer);
      const native = natives.has(el);
      if (!native) {
        const tag = el.localName;
        if (NEVER_EXTRA.has(tag)) return;
        const tabindex = el.getAttribute('tabindex');
        const extra = read(() => hasHandler(el), false) || (tabindex !== null && parseInt(tabindex, 10) >= 0)
          || (isPointer && !(parent && pointer.get(parent)));
        if (!extra) return;
      }
      let up = parent;
      while (up && !index.has(up)) up = parentOf(up);
      const p = up ? index.get(up) : -1;
      index.set(el, found.length);
      found.push({el, native, parent: p, depth: p < 0 ? 0 : found[p].depth + 1});
    };
    const walk = (root) => {
      for (const old of root.querySelectorAll('[data-webrl-id]')) old.removeAttribute('data-webrl-id');
      const natives = new Set(root.querySelectorAll(SELECTOR));
      const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT);
      for (let el = walker.nextNode(); el; el = walker.nextNode()) {
        try { visit(el, natives); } catch (_) { /* an element the page made unreadable: not a candidate */ }
        const shadow = read(() => el.shadowRoot, null);  // open roots only: a closed one reads as null
        if (shadow) walk(shadow);
      }
    };
    walk(document);
    return found;
  };

  let candidates;
  try {
    candidates = full ? byWalk() : bySelector();
  } catch (_) {  // a page that broke the DOM API the walk uses: fall back to the selector list
    candidates = read(bySelector, []);
  }

  // -- the rules for extras
  const rects = new Map();  // index -> DOMRect, or null when the candidate is not visible
  const visibleRect = (i) => {
    if (!rects.has(i)) {
      const el = candidates[i].el;
      const rect = read(() => el.getBoundingClientRect(), null);
      rects.set(i, rect && read(() => isVisible(el, rect), false) ? rect : null);
    }
    return rects.get(i);
  };
  const large = (rect) => rect.width * rect.height >= 0.25 * vw * vh;
  const wrapsOthers = (i, rect) => {  // descendants follow their ancestor in walk order
    const depth = candidates[i].depth;
    for (let j = i + 1; j < candidates.length && j <= i + DESCENDANTS_CHECKED && candidates[j].depth > depth; j++) {
      const inner = visibleRect(j);
      if (inner && (large(rect) || sameBox(rect, inner))) return true;
    }
    return false;
  };
  const covered = (el, rect) => {
    const left = Math.max(rect.left, 0), right = Math.min(rect.right, vw);
    const top = Math.max(rect.top, 0), bottom = Math.min(rect.bottom, vh);
    if (right <= left || bottom <= top) return false;  // not in the viewport: not hit-tested
    const root = el.getRootNode();
    const hit = (root.elementFromPoint ? root : document).elementFromPoint((left + right) / 2, (top + bottom) / 2);
    return Boolean(hit) && hit !== el && !el.contains(hit);
  };
  const nestedParent = (i) => {  // a native's nearest native ancestor (as "selectors"), an extra's nearest candidate
    const c = candidates[i];
    if (!full) return c.el.parentElement && c.el.parentElement.closest(SELECTOR);
    let p = c.parent;
    while (c.native && p >= 0 && !candidates[p].native) p = candidates[p].parent;
    return p >= 0 ? candidates[p].el : null;
  };
  const px = (v) => (Number.isFinite(v) ? Math.max(-1e7, Math.min(1e7, Math.round(v))) : 0);

  const describe = (el, tag, rect, id) => {
    const type = tag === 'input' ? (el.type || 'text').toLowerCase() : '';
    let value = '';
    if (tag === 'input' || tag === 'textarea') value = type === 'password' ? '*'.repeat(el.value.length) : el.value;
    let options = [], selected = '';
    if (tag === 'select') {
      options = Array.from(el.options).map((o) => clip(o.label || o.text));
      const chosen = el.selectedOptions && el.selectedOptions[0];
      selected = chosen ? clip(chosen.label || chosen.text) : '';
      value = selected;
    }
    let checked = null;
    if (type === 'checkbox' || type === 'radio') checked = el.checked;
    else if (el.hasAttribute('aria-checked')) checked = el.getAttribute('aria-checked') === 'true';
    return {
      id, tag, role: implicitRole(el, tag), name: clip(accessibleName(el, tag)), type,
      value: String(value).slice(0, 1000), placeholder: clip(el.getAttribute('placeholder')),
      href: tag === 'a' && el.href ? String(el.href) : '', dom_id: el.id || '', checked,
      options, selected, bbox: [px(rect.left), px(rect.top), px(rect.width), px(rect.height)],
      in_viewport: rect.right > 0 && rect.bottom > 0 && rect.left < vw && rect.top < vh,
    };
  };

  const kept = new Map();  // element -> DOMRect, for the nested-duplicate rule
  const elements = [];
  let truncated = 0;
  for (let i = 0; i < candidates.length; i++) {
    if (elements.length >= maxElements) { truncated = candidates.length - i; break; }
    const {el, native} = candidates[i];
    try {  // one element whose getters throw costs that element, not the observation
      const tag = el.tagName.toLowerCase();
      if (tag === 'input' && (el.type || '').toLowerCase() === 'hidden') continue;
      if (tag === 'label' && !el.control) continue;
      const rect = visibleRect(i);
      if (!rect) continue;
      const parent = nestedParent(i);
      if (parent && kept.has(parent) && sameBox(kept.get(parent), rect)) continue;
      if (!native && (wrapsOthers(i, rect) || covered(el, rect))) continue;
      const element = describe(el, tag, rect, elements.length);
      el.setAttribute('data-webrl-id', String(element.id));
      kept.set(el, rect);
      elements.push(element);
    } catch (_) { /* skipped */ }
  }
  return {
    elements, truncated, title: read(() => document.title, '') || '', scrollX: window.scrollX, scrollY: window.scrollY,
    viewportWidth: vw, viewportHeight: vh,
    pageHeight: document.documentElement ? document.documentElement.scrollHeight : vh,
  };
}
