// Set-of-Mark element collection, evaluated in the page as one function expression.
//
// Input opts: {maxElements, maxNameChars}. Output: {elements: [...], title, truncated: int (an upper
// bound on the candidates left unscanned once maxElements were kept),
// scrollX, scrollY, viewportWidth, viewportHeight, pageHeight} where each element follows the
// `WebEnv` spec card's element dicts (id, tag, role, name, type, value, placeholder, href, dom_id, checked,
// options, selected, bbox [x, y, w, h] in CSS pixels of the viewport, in_viewport).
// Side effect: sets data-webrl-id="N" on element N and removes stale marks, so that an
// action on id N resolves to [data-webrl-id="N"] for the current observation.
(opts) => {
  const SELECTOR = [
    'a', 'button', 'input', 'select', 'textarea', 'summary', 'label[for]', '[onclick]',
    '[contenteditable=""]', '[contenteditable="true"]', '[contenteditable="plaintext-only"]',
    ...['button', 'link', 'checkbox', 'radio', 'tab', 'option', 'menuitem', 'slider',
        'combobox'].map((r) => `[role="${r}"]`),
  ].join(',');
  const maxElements = opts.maxElements;
  const maxName = opts.maxNameChars;
  const vw = window.innerWidth, vh = window.innerHeight;

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
        const text = Array.from(el.labels).map((l) => l.innerText || l.textContent).join(' ');
        if (collapse(text)) return text;
      }
      return el.getAttribute('title') || el.getAttribute('placeholder') || el.name || '';
    }
    const text = el.innerText || el.textContent || '';
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

  for (const old of document.querySelectorAll('[data-webrl-id]')) old.removeAttribute('data-webrl-id');

  const kept = new Map();  // element -> DOMRect, for the nested-duplicate rule
  const elements = [];
  let truncated = 0;
  const candidates = document.querySelectorAll(SELECTOR);
  for (let i = 0; i < candidates.length; i++) {
    const el = candidates[i];
    if (elements.length >= maxElements) { truncated = candidates.length - i; break; }
    const tag = el.tagName.toLowerCase();
    if (tag === 'input' && (el.type || '').toLowerCase() === 'hidden') continue;
    if (tag === 'label' && !el.control) continue;
    const rect = el.getBoundingClientRect();
    if (!isVisible(el, rect)) continue;
    const parent = el.parentElement && el.parentElement.closest(SELECTOR);
    if (parent && kept.has(parent) && sameBox(kept.get(parent), rect)) continue;
    kept.set(el, rect);
    const id = elements.length;
    el.setAttribute('data-webrl-id', String(id));
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
    const x = Math.round(rect.left), y = Math.round(rect.top);
    const w = Math.round(rect.width), h = Math.round(rect.height);
    elements.push({
      id, tag, role: implicitRole(el, tag), name: clip(accessibleName(el, tag)), type,
      value: String(value).slice(0, 1000), placeholder: clip(el.getAttribute('placeholder')),
      href: tag === 'a' && el.href ? String(el.href) : '', dom_id: el.id || '', checked,
      options, selected, bbox: [x, y, w, h],
      in_viewport: rect.right > 0 && rect.bottom > 0 && rect.left < vw && rect.top < vh,
    });
  }
  return {
    elements, truncated, title: document.title || '', scrollX: window.scrollX, scrollY: window.scrollY,
    viewportWidth: vw, viewportHeight: vh,
    pageHeight: document.documentElement ? document.documentElement.scrollHeight : vh,
  };
}
