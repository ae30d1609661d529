// Reports every click and value change to the server; window.__webrlFlush() resolves once
// all reports have landed (the checker calls it before reading the server state).
(function () {
  const pending = new Set();
  let seq = 0;
  window.__webrlPending = 0;
  function send(ev) {
    ev.seq = ++seq;
    const p = fetch("/widgets/api/event", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(ev), keepalive: true}).catch(() => null);
    pending.add(p);
    window.__webrlPending += 1;
    p.finally(() => { pending.delete(p); window.__webrlPending -= 1; });
  }
  window.__webrlFlush = () => Promise.all(Array.from(pending));
  function toast(text) {
    document.getElementById("toast-text").textContent = text;
    document.getElementById("toast").hidden = false;
  }
  function snapshot() {
    const values = {};
    document.querySelectorAll("[data-kind=value]").forEach(el => { values[el.id] = el.value; });
    document.querySelectorAll("[data-kind=check]").forEach(el => { values[el.id] = el.checked ? "true" : "false"; });
    document.querySelectorAll("[data-kind=radio]:checked").forEach(el => { values[el.name] = el.value; });
    document.querySelectorAll(".tabs").forEach(t => {
      const sel = t.querySelector("[role=tab][aria-selected=true]");
      if (sel) values[t.dataset.group] = sel.textContent.trim();
    });
    return values;
  }
  document.querySelectorAll("[data-kind=value]").forEach(el => {
    el.addEventListener("input", () => {
      send({type: "value", id: el.id, value: el.value});
      const out = document.getElementById(el.id + "-out");
      if (out) out.textContent = el.value;
    });
    el.addEventListener("change", () => send({type: "value", id: el.id, value: el.value}));
  });
  document.querySelectorAll("[data-kind=check]").forEach(el => el.addEventListener("change",
    () => send({type: "value", id: el.id, value: el.checked ? "true" : "false"})));
  document.querySelectorAll("[data-kind=radio]").forEach(el => el.addEventListener("change",
    () => send({type: "value", id: el.name, value: el.value})));
  document.querySelectorAll("button[data-kind=button]").forEach(el => el.addEventListener("click", () => {
    send({type: "click", id: el.id});
    toast("“" + el.textContent.trim() + "” done.");
  }));
  document.querySelectorAll("button[data-kind=submit]").forEach(el => el.addEventListener("click", () => {
    send({type: "submit", id: el.id, values: snapshot()});
    toast("Thanks! Your form was submitted.");
  }));
  document.querySelectorAll(".tabs").forEach(t => t.querySelectorAll("[role=tab]").forEach(tab =>
    tab.addEventListener("click", () => {
      t.querySelectorAll("[role=tab]").forEach(x => x.setAttribute("aria-selected", x === tab ? "true" : "false"));
      t.querySelectorAll("[role=tabpanel]").forEach((p, i) => { p.hidden = String(i) !== tab.dataset.index; });
      send({type: "value", id: t.dataset.group, value: tab.textContent.trim()});
    })));
  document.getElementById("toast-dismiss").addEventListener("click", () => {
    document.getElementById("toast").hidden = true;
  });
})();
