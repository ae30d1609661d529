// City autocomplete (suggestions from the embedded city list, rendered synchronously on
// input so they are on the page as soon as typing ends) and a month-grid date picker.
(function () {
  const cities = window.CITIES || [];
  function setupAutocomplete(input) {
    const list = document.getElementById(input.id + "-list");
    function close() { list.hidden = true; input.setAttribute("aria-expanded", "false"); }
    input.addEventListener("input", () => {
      const q = input.value.trim().toLowerCase();
      list.innerHTML = "";
      if (!q) { close(); return; }
      const hits = cities.filter(c => c.name.toLowerCase().startsWith(q) || c.code.toLowerCase() === q
        || c.country.toLowerCase().startsWith(q)).slice(0, 6);
      hits.forEach((c, i) => {
        const li = document.createElement("li");
        li.setAttribute("role", "option");
        li.id = input.id + "-option-" + c.code;
        li.textContent = c.name + " (" + c.code + ")";
        li.innerHTML += "<span class='small'> " + c.country + "</span>";
        li.setAttribute("aria-label", c.name + " (" + c.code + ")");
        li.addEventListener("mousedown", e => e.preventDefault());
        li.addEventListener("click", () => { input.value = c.name + " (" + c.code + ")"; close(); });
        list.appendChild(li);
      });
      list.hidden = hits.length === 0;
      input.setAttribute("aria-expanded", hits.length ? "true" : "false");
    });
    input.addEventListener("blur", () => setTimeout(close, 150));
  }
  ["from", "to"].forEach(id => { const el = document.getElementById(id); if (el) setupAutocomplete(el); });

  const cal = document.getElementById("calendar"), depart = document.getElementById("depart");
  if (!cal) return;
  const today = new Date(cal.dataset.today + "T00:00:00"), last = new Date(cal.dataset.last + "T00:00:00");
  let shown = new Date(today.getFullYear(), today.getMonth(), 1);
  const fmt = d => d.getFullYear() + "-" + String(d.getMonth() + 1).padStart(2, "0") + "-" + String(d.getDate()).padStart(2, "0");
  function render() {
    const month = shown.toLocaleString("en-GB", {month: "long", year: "numeric"});
    let html = "<div class='cal-head'><button type='button' id='cal-prev' aria-label='Previous month'>‹</button><b>" + month +
      "</b><button type='button' id='cal-next' aria-label='Next month'>›</button></div><div class='cal-grid'>";
    ["Mo", "Tu", "We", "Th", "Fr", "Sa", "Su"].forEach(d => { html += "<span class='dow'>" + d + "</span>"; });
    const offset = (shown.getDay() + 6) % 7;
    for (let i = 0; i < offset; i++) html += "<span></span>";
    const days = new Date(shown.getFullYear(), shown.getMonth() + 1, 0).getDate();
    for (let d = 1; d <= days; d++) {
      const date = new Date(shown.getFullYear(), shown.getMonth(), d);
      const ok = date > today && date <= last;
      const label = date.toLocaleDateString("en-GB", {weekday: "long", day: "numeric", month: "long", year: "numeric"});
      html += "<button type='button' class='day' data-date='" + fmt(date) + "' aria-label='" + label + "'" + (ok ? "" : " disabled") + ">" + d + "</button>";
    }
    cal.innerHTML = html + "</div>";
    cal.querySelector("#cal-prev").onclick = () => { shown = new Date(shown.getFullYear(), shown.getMonth() - 1, 1); render(); };
    cal.querySelector("#cal-next").onclick = () => { shown = new Date(shown.getFullYear(), shown.getMonth() + 1, 1); render(); };
    cal.querySelectorAll(".day").forEach(b => b.onclick = () => { depart.value = b.dataset.date; cal.hidden = true; });
  }
  document.getElementById("open-calendar").addEventListener("click", () => { cal.hidden = !cal.hidden; if (!cal.hidden) render(); });
})();
