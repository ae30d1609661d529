// Listener registry, installed as an init script in every document before page scripts run.
//
// Wraps EventTarget.prototype.addEventListener / removeEventListener to remember which
// elements hold a listener for a pointer-ish event, so that som.js can list a <div> that a
// page made clickable with addEventListener (no attribute, no role). som.js reads
// window.__webrlListeners.has(element).
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
                                  'contextmenu', 'touchstart']);
  const registered = new WeakMap();  // element -> Set of "type capture" keys per listener (Map)
  const proto = EventTarget.prototype;
  const originalAdd = proto.addEventListener;
  const originalRemove = proto.removeEventListener;

  const captureOf = (options) => {
    if (typeof options === 'boolean') return options;
    if (options === null || typeof options !== 'object') return false;
    const own = Object.getOwnPropertyDescriptor(options, 'capture');
    return Boolean(own && 'value' in own && own.value);
  };
  const track = (target, type, listener, options, adding) => {
    try {
      if (!listener || !POINTER_EVENTS.has(String(type)) || !(target instanceof Element)) return;
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
    value: Object.freeze({has: (element) => registered.has(element)}),
    enumerable: false, writable: false, configurable: false,
  });
})();
