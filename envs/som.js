// Set-of-Mark element collection, evaluated in the page as one function expression.
//
// Input opts: {maxElements, maxNameChars, discovery}. Output: {elements: [...], title, truncated: int (an upper
// bound on the candidates left unscanned once maxElements were kept),
// scrollX, scrollY, viewportWidth, viewportHeight, pageHeight} where each element follows the
// `WebEnv` spec card's element dicts (id, tag, role, name, type, value, placeholder, href, dom_id, checked,
// options, selected, bbox [x, y, w, h] in CSS pixels of the viewport, in_viewport).
// Side effect: sets data-webrl-id="N" on element N and removes stale marks, so that an
// action on id N resolves to [data-webrl-id="N"] for the current observation (Playwright's CSS
// engine pierces open shadow roots, so marks inside them resolve too; marks inside iframes are
// found by envs/execute.py, which looks through same-origin frames).
//
// Candidates. discovery "selectors": the SELECTOR matches of the document (native controls,
// ARIA widgets). "full": one TreeWalker pass over the document, every open shadow root and every
// same-origin iframe's document (boxes offset into top-viewport coordinates); a candidate is a
// SELECTOR match ("native") or an element a page made usable without saying so ("extra"): a
// pointer-event or hover listener (window.__webrlListeners, from listeners.js), an on<event>
// handler property, React handler props (own key __reactProps$… / __reactEventHandlers$…; React
// delegates to its root, so the target holds no listener), tabindex >= 0, the outermost element of
// a `cursor: pointer` run (listeners on React's root container, own key __reactContainer$…, are its
// dispatcher's, not the root's own), an element a delegated listener serves, or a cross-origin
// iframe (its document is unreadable: the frame's box is listed as one target for a click at a point).
//
// Delegation: a listener on the document or window names its targets only in its source
// (`closest('[data-action]')`); listeners.js reads those selectors out, and the elements matching
// them are extras. An extra holding a listener is a "container" for its descendants that match
// DELEGATE_ITEMS (role'd items, tabindex, even -1: a roving tabindex) or its own listener's
// selectors; a container that serves such descendants is not listed, they are.
//
// "full" keeps a candidate only when it is usable now: not disabled (unless its content still
// scrolls); when its box is in the viewport, not clipped out of sight there by an ancestor with
// overflow hidden / auto / scroll (or by its frame), and hit at the centre of its visible part by
// itself, a descendant or one of its labels. An extra under anything else is dropped; a native
// only under a fixed or sticky layer (a modal backdrop, a banner, a sticky header; see `inLayer`).
// Extras must also earn their place: one is dropped when it only wraps a visible candidate with
// the same box, or when it is large (a quarter of the viewport) and holds visible candidates (a
// delegation root, an app container). On a page where nothing is covered, clipped, disabled or
// delegated, "full" lists the natives "selectors" lists.
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
  // items of composite widgets (ARIA practices): a listener on their container serves them
  const DELEGATE_ITEMS = ['[tabindex]', ...['tab', 'treeitem', 'gridcell', 'option', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'radio', 'checkbox', 'switch', 'columnheader', 'rowheader', 'button', 'link']
    .map((r) => `[role="${r}"]`)].join(',');
  const CLIPPING = new Set(['hidden', 'auto', 'scroll', 'clip', 'overlay']);  // overflow values that clip
  const OPAQUE_FRAME_MIN_PX = 16;  // smaller cross-origin frames are pixels and beacons, not widgets
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
      const root = el.getRootNode();
      const text = by.split(/\s+/).map((id) => {
        const ref = (root.getElementById ? root : document).getElementById(id);
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

  const styleOf = (el) => el.ownerDocument.defaultView.getComputedStyle(el);
  const hasHandler = (el, listeners) => {
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

  // Delegation records: {selector, parent: the record above, serves: whether an element matched}.
  const validSelectors = (selectors) => selectors.filter((sel) => read(() => {
    document.createDocumentFragment().querySelector(sel);
    return true;
  }, false));
  const delegatedTo = (targets, listeners) => {
    if (!listeners || !listeners.delegateSelectors) return [];
    return validSelectors(targets.flatMap((t) => (t ? read(() => listeners.delegateSelectors(t), []) : [])));
  };
  const documentRecord = (doc, listeners) => {
    const selectors = delegatedTo([doc, doc.defaultView, doc.documentElement, doc.body], listeners);
    return selectors.length ? {selector: selectors.join(','), parent: null, serves: false} : null;
  };
  const servedBy = (el, record) => {
    for (let r = record; r; r = r.parent) {
      if (read(() => el.matches(r.selector), false)) { r.serves = true; return true; }
    }
    return false;
  };
  const isFrame = (el) => el.localName === 'iframe' || el.localName === 'frame';
  // Where a document's elements lie: offset (dx, dy) of its viewport in the top viewport, the
  // frame element and the frame above, the frame's content box (top coordinates), its registry.
  const topFrame = () => {
    const listeners = window.__webrlListeners;
    return {dx: 0, dy: 0, frameEl: null, parent: null, box: null, listeners,
            delegation: read(() => documentRecord(document, listeners), null)};
  };
  const frameOf = (el, frame, doc) => {
    const r = el.getBoundingClientRect(), s = styleOf(el);
    const padLeft = parseFloat(s.paddingLeft) || 0, padTop = parseFloat(s.paddingTop) || 0;
    const dx = frame.dx + r.left + el.clientLeft + padLeft, dy = frame.dy + r.top + el.clientTop + padTop;
    const box = {left: dx, top: dy, right: dx + el.clientWidth - padLeft - (parseFloat(s.paddingRight) || 0),
                 bottom: dy + el.clientHeight - padTop - (parseFloat(s.paddingBottom) || 0)};
    const listeners = read(() => doc.defaultView.__webrlListeners, null);
    return {dx, dy, frameEl: el, parent: frame, box, listeners,
            delegation: read(() => documentRecord(doc, listeners), null)};
  };

  const byWalk = () => {
    const found = [];
    const index = new Map();      // candidate element -> its index in `found`
    const pointer = new Map();    // element -> computed cursor is pointer (parents come first)
    const delegation = new Map(); // element -> the delegation record its descendants fall under
    const visit = (el, natives, frame) => {
      const parent = parentOf(el);
      const isPointer = read(() => styleOf(el).cursor === 'pointer', false);
      pointer.set(el, isPointer);
      const native = natives.has(el);
      const tag = el.localName;
      const inherited = parent ? delegation.get(parent) : frame.delegation;
      const served = Boolean(inherited) && servedBy(el, inherited);
      let container = null;
      if (!native && !NEVER_EXTRA.has(tag) && read(() => hasHandler(el, frame.listeners), false)) {
        const own = delegatedTo([el], frame.listeners);
        container = {selector: [DELEGATE_ITEMS, ...own].join(','), parent: inherited || null, serves: false};
      }
      if (container || inherited) delegation.set(el, container || inherited);
      const opaque = isFrame(el) && !read(() => el.contentDocument, null);
      if (!native) {
        if (NEVER_EXTRA.has(tag)) return;
        const tabindex = el.getAttribute('tabindex');
        const extra = container || served || opaque || (tabindex !== null && parseInt(tabindex, 10) >= 0)
          || (isPointer && !(parent && pointer.get(parent)));
        if (!extra) return;
      }
      let up = parent;
      while (up && !index.has(up)) up = parentOf(up);
      const p = up ? index.get(up) : -1;
      index.set(el, found.length);
      found.push({el, native, parent: p, depth: p < 0 ? 0 : found[p].depth + 1, frame, container, opaque});
    };
    const walk = (root, frame) => {
      for (const old of root.querySelectorAll('[data-webrl-id]')) old.removeAttribute('data-webrl-id');
      const natives = new Set(root.querySelectorAll(SELECTOR));
      const walker = (root.ownerDocument || root).createTreeWalker(root, NodeFilter.SHOW_ELEMENT);
      for (let el = walker.nextNode(); el; el = walker.nextNode()) {
        try { visit(el, natives, frame); } catch (_) { /* an element the page made unreadable: not a candidate */ }
        const shadow = read(() => el.shadowRoot, null);  // open roots only: a closed one reads as null
        if (shadow) walk(shadow, frame);
        const inner = isFrame(el) ? read(() => el.contentDocument, null) : null;  // null when cross-origin
        if (inner && inner.documentElement && read(() => isVisible(el, el.getBoundingClientRect()), false)) {
          const innerFrame = read(() => frameOf(el, frame, inner), null);
          if (innerFrame) walk(inner, innerFrame);
        }
      }
    };
    walk(document, topFrame());
    return found;
  };

  let candidates;
  try {
    candidates = full ? byWalk() : bySelector();
  } catch (_) {  // a page that broke the DOM API the walk uses: fall back to the selector list
    candidates = read(bySelector, []);
  }

  // -- the rules for extras
  const toTop = (rect, frame) => {  // a frame's element box in top-viewport coordinates
    if (!frame || (!frame.dx && !frame.dy)) return rect;
    const left = rect.left + frame.dx, top = rect.top + frame.dy;
    return {x: left, y: top, left, top, right: left + rect.width, bottom: top + rect.height,
            width: rect.width, height: rect.height};
  };
  const rects = new Map();  // index -> DOMRect (top coordinates), or null when the candidate is not visible
  const visibleRect = (i) => {
    if (!rects.has(i)) {
      const {el, frame} = candidates[i];
      const rect = read(() => el.getBoundingClientRect(), null);
      rects.set(i, rect && read(() => isVisible(el, rect), false) ? toTop(rect, frame) : null);
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
  // -- the usability rules of "full" (regions are {left, top, right, bottom} in top coordinates)
  const UNBOUNDED = {left: -Infinity, top: -Infinity, right: Infinity, bottom: Infinity};
  const intersect = (a, b) => ({left: Math.max(a.left, b.left), top: Math.max(a.top, b.top),
                                right: Math.min(a.right, b.right), bottom: Math.min(a.bottom, b.bottom)});
  const frameClips = new Map();  // frame -> the part of the top viewport where its content shows
  const frameClip = (frame) => {
    if (!frame || !frame.frameEl) return UNBOUNDED;
    if (!frameClips.has(frame)) frameClips.set(frame, intersect(frame.box, clipOf(frame.frameEl, frame.parent)));
    return frameClips.get(frame);
  };
  const ownClip = (el, frame, style) => {  // the padding box el clips its content to, or null
    const doc = el.ownerDocument;
    if (el === doc.documentElement || el === doc.body || style.display === 'inline' || style.display === 'contents') {
      return null;  // the root scrollers are the viewport's business (elements there are "offscreen")
    }
    const clipX = CLIPPING.has(style.overflowX), clipY = CLIPPING.has(style.overflowY);
    if (!clipX && !clipY) return null;
    const r = read(() => el.getBoundingClientRect(), null);
    if (!r) return null;
    const left = frame.dx + r.left + el.clientLeft, top = frame.dy + r.top + el.clientTop;
    return {left: clipX ? left : -Infinity, right: clipX ? left + el.clientWidth : Infinity,
            top: clipY ? top : -Infinity, bottom: clipY ? top + el.clientHeight : Infinity};
  };
  const contentClips = new Map();  // element -> what its clipping ancestors and its own overflow leave to its content
  const clipParent = (el, style) => {  // the nearest ancestor whose clipping applies to el
    let up = parentOf(el);
    if (style.position === 'absolute') {  // escapes ancestors below its containing block
      const containing = (e) => read(() => {
        const s = styleOf(e);
        return s.position !== 'static' || s.transform !== 'none';
      }, true);
      while (up && !containing(up)) up = parentOf(up);
    }
    return up;
  };
  const regionOf = (el, frame, style) => {  // what el's clipping ancestors leave visible of el
    if (style.position === 'fixed') return frameClip(frame);
    const up = clipParent(el, style);
    return up ? contentClips.get(up) : frameClip(frame);
  };
  const clipOf = (el, frame) => {  // iterative: pages nest thousands deep
    const chain = [];
    for (let e = parentOf(el); e && !contentClips.has(e); e = parentOf(e)) chain.push(e);
    for (let k = chain.length - 1; k >= 0; k--) {
      const e = chain[k], style = styleOf(e);
      const region = regionOf(e, frame, style), own = ownClip(e, frame, style);
      contentClips.set(e, own ? intersect(region, own) : region);
    }
    return regionOf(el, frame, styleOf(el));
  };
  const hitAt = (el, x, y, frame) => {  // the element at top point (x, y) in el's tree
    const root = el.getRootNode();
    const at = root.elementFromPoint ? root : el.ownerDocument;
    return at.elementFromPoint(x - (frame ? frame.dx : 0), y - (frame ? frame.dy : 0));
  };
  // A native counts as covered only under a fixed or sticky layer (a modal, a banner, a sticky
  // header: they stay until dismissed). A popup anchored in the flow (an autocomplete list, a
  // menu) closes as soon as the agent acts elsewhere; dropping the natives it covers would
  // reshuffle the list at every keystroke, so they stay (as "selectors" lists them).
  const inLayer = (hit) => {
    for (let e = hit; e; e = parentOf(e)) {
      const position = read(() => styleOf(e).position, 'static');
      if (position === 'fixed' || position === 'sticky') return true;
    }
    return false;
  };
  const coveredAt = (el, x, y, frame, native, own) => {
    const hit = hitAt(el, x, y, frame);
    return Boolean(hit) && !own(hit) && (!native || inLayer(hit));
  };
  const covered = (el, shown, frame, native) => {
    const left = Math.max(shown.left, 0), right = Math.min(shown.right, vw);
    const top = Math.max(shown.top, 0), bottom = Math.min(shown.bottom, vh);
    if (right <= left || bottom <= top) return false;  // not in the viewport: not hit-tested
    const x = (left + right) / 2, y = (top + bottom) / 2;
    const labels = read(() => Array.from(el.labels || []), []);
    if (coveredAt(el, x, y, frame, native, (h) => h === el || el.contains(h) || labels.some((l) => l.contains(h)))) {
      return true;
    }
    for (let f = frame; f && f.frameEl; f = f.parent) {  // the frames on the way must show the point too
      if (coveredAt(f.frameEl, x, y, f.parent, native, (h) => h === f.frameEl)) return true;
    }
    return false;
  };
  // Clipped out of sight: the part of the box in the viewport is hidden by clipping ancestors.
  // A box wholly outside the viewport is not judged (it is listed "offscreen", and a click
  // scrolls it into view, nested scrollers included).
  const clippedAway = (rect, shown) => {
    const inViewport = (r) => Math.min(r.right, vw) - Math.max(r.left, 0) >= 1
      && Math.min(r.bottom, vh) - Math.max(r.top, 0) >= 1;
    return inViewport(rect) && !inViewport(shown);
  };
  // A disabled control is not usable, unless its content still scrolls (a disabled textarea of
  // terms that must be scrolled through before the form enables itself).
  const disabled = (el) => (read(() => el.matches(':disabled'), false) || el.getAttribute('aria-disabled') === 'true')
    && !(el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1);
  const TOP = {dx: 0, dy: 0, frameEl: null, parent: null};  // for the selector candidates of a broken walk
  const usable = (i, rect) => {
    const {el, native, container, opaque} = candidates[i];
    const frame = candidates[i].frame || TOP;
    if (disabled(el) || (container && container.serves)) return false;
    if (opaque && (rect.width < OPAQUE_FRAME_MIN_PX || rect.height < OPAQUE_FRAME_MIN_PX)) return false;
    const shown = intersect(rect, clipOf(el, frame));
    if (clippedAway(rect, shown)) return false;
    if (!native && wrapsOthers(i, rect)) return false;
    return !covered(el, shown, frame, native);
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
    const {el} = candidates[i];
    try {  // one element whose getters throw costs that element, not the observation
      const tag = el.tagName.toLowerCase();
      if (tag === 'input' && (el.type || '').toLowerCase() === 'hidden') continue;
      if (tag === 'label' && !el.control) continue;
      const rect = visibleRect(i);
      if (!rect) continue;
      const parent = nestedParent(i);
      if (parent && kept.has(parent) && sameBox(kept.get(parent), rect)) continue;
      if (full && !usable(i, rect)) continue;
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
    topFrames: read(() => document.querySelectorAll('iframe, frame').length, 1),
  };
}
