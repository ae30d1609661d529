// Listener registry, installed as an init script in every document before page scripts run.
//
// Wraps EventTarget.prototype.addEventListener / removeEventListener to remember which
// elements hold a listener for a pointer-ish or hover event, so that som.js can list a <div> that a
// page made clickable with addEventListener (no attribute, no role), or a menu trigger that opens on
// mouseenter. som.js reads window.__webrlListeners.has(element) and .delegateSelectors(target).
//
// Delegation: a listener on a container (or on the document / window) usually finds its target
// with `event.target.closest('[data-action]')`, `.matches('.row')` or `target.dataset.id`.
// delegateSelectors(target) reads those selectors out of the source text of the target's listeners
// (Function.prototype.toString, saved before page scripts run), so som.js can list the elements a
// delegated listener serves. A bound or native function has no readable source: it yields nothing.
//
// The wrappers call the originals with the same `this` and arguments and return their
// result, so the page sees addEventListener behave exactly as before (options objects,
// `once`, `signal`, duplicates). Bookkeeping never throws into the page, and it reads no
// accessor on an options object (a getter may have side effects; feature-detection code
// counts its calls). A `once` listener that fired, or one removed by an AbortSignal, stays
// remembered: som.js over-approximates there, it never misses.
(() => {
  if (Object.prototype.hasOwnProperty.call(window, '__webrlListeners')) return;
  const POINTER_EVENTS = new Set(['click', 'dblclick', 'mousedown', 'mouseup', 'pointerdown', 'pointerup',
                                  'contextmenu', 'touchstart', 'mouseenter', 'mouseover', 'pointerenter',
                                  'pointerover']);
  const SOURCE_CHARS = 20000;  // of a listener's source scanned for selectors (bundled handlers are long)
  const registered = new WeakMap();  // target -> Map(listener -> Set of "type capture" keys)
  const selectorsOfListener = new WeakMap();  // listener -> [selector, ...] read from its source
  const proto = EventTarget.prototype;
  const originalAdd = proto.addEventListener;
  const originalRemove = proto.removeEventListener;
  const toSource = Function.prototype.toString;
  const kebab = (name) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  const SELECTOR_CALL = /\.(?:closest|matches|webkitMatchesSelector)\(\s*(['"`])((?:(?!\1)[^\\\n]|\\.){1,200})\1\s*\)/g;
  const DATASET = /\.dataset(?:\.([A-Za-z_$][\w$]*)|\[\s*['"]([\w-]+)['"]\s*\])/g;
  const DATA_ATTRIBUTE = /\.(?:get|has)Attribute\(\s*['"](data-[\w-]+)['"]\s*\)/g;

  const captureOf = (options) => {
    if (typeof options === 'boolean') return options;
    if (options === null || typeof options !== 'object') return false;
    const own = Object.getOwnPropertyDescriptor(options, 'capture');
    return Boolean(own && 'value' in own && own.value);
  };
  const noted = (target) => target instanceof Element || target instanceof Document || target instanceof Window;
  const track = (target, type, listener, options, adding) => {
    try {
      if (!listener || !POINTER_EVENTS.has(String(type)) || !noted(target)) return;
      const key = `${type} ${captureOf(options)}`;
      let byListener = registered.get(target);
      if (adding) {
        if (!byListener) registered.set(target, byListener = new Map());
        if (!byListener.has(listener)) byListener.set(listener, new Set());
        byListener.get(listener).add(key);
      } else if (byListener && byListener.has(listener)) {
        const keys = byListener.get(listener);
        keys.delete(key);
        if (!keys.size) byListener.delete(listener);
        if (!byListener.size) registered.delete(target);
      }
    } catch (_) { /* bookkeeping only: the page's call goes ahead regardless */ }
  };
  // Selectors a listener's source tests its target against: closest/matches arguments that name
  // a class, id or attribute (a bare tag name says nothing about delegation), and data-* keys.
  const readSelectors = (listener) => {
    if (selectorsOfListener.has(listener)) return selectorsOfListener.get(listener);
    const found = new Set();
    try {
      const fn = typeof listener === 'function' ? listener : listener.handleEvent;
      const source = typeof fn === 'function' ? Reflect.apply(toSource, fn, []).slice(0, SOURCE_CHARS) : '';
      for (const m of source.matchAll(SELECTOR_CALL)) if (/[.#[]/.test(m[2])) found.add(m[2]);
      for (const m of source.matchAll(DATASET)) found.add(`[data-${m[2] || kebab(m[1])}]`);
      for (const m of source.matchAll(DATA_ATTRIBUTE)) found.add(`[${m[1]}]`);
    } catch (_) { /* an unreadable listener names no selector */ }
    const selectors = Array.from(found);
    selectorsOfListener.set(listener, selectors);
    return selectors;
  };
  const wrapped = {
    addEventListener(type, listener) {
      const result = Reflect.apply(originalAdd, this, arguments);  // throws as it did: nothing noted
      track(this, type, listener, arguments[2], true);
      return result;
    },
    removeEventListener(type, listener) {
      const result = Reflect.apply(originalRemove, this, arguments);
      track(this, type, listener, arguments[2], false);
      return result;
    },
  };
  for (const name of ['addEventListener', 'removeEventListener']) {
    Object.defineProperty(proto, name, {value: wrapped[name], writable: true, enumerable: false, configurable: true});
  }
  Object.defineProperty(window, '__webrlListeners', {
    value: Object.freeze({
      has: (element) => element instanceof Element && registered.has(element),
      delegateSelectors: (target) => {
        const byListener = registered.get(target);
        if (!byListener) return [];
        return Array.from(new Set(Array.from(byListener.keys()).flatMap(readSelectors)));
      },
    }),
    enumerable: false, writable: false, configurable: false,
  });
})();
