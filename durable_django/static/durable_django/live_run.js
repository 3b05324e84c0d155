// A live run's page refreshes its live part (the timeline chart and the attempts) without a reload:
// every two seconds it fetches that part again and swaps it in, and stops once the run has finished.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var live = document.getElementById("durable-live");
  if (!live || live.getAttribute("data-live") !== "true") return;
  var url = live.getAttribute("data-url") + window.location.search;
  var refreshes = 0;
  var timer = window.setInterval(function () {
    window.fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("#durable-live");
        if (!fresh) return;
        live.innerHTML = fresh.innerHTML;
        live.setAttribute("data-status", fresh.getAttribute("data-status"));
        live.setAttribute("data-refreshes", String(++refreshes));
        if (fresh.getAttribute("data-live") !== "true") {
          live.setAttribute("data-live", "false");
          window.clearInterval(timer);
          // The rest of the page (status, output, journal) is as it was loaded: say so.
          var note = document.createElement("p");
          note.className = "durable-live-finished";
          // The texts come translated with the fragment (data-finished-note, data-reload-note).
          note.textContent = fresh.getAttribute("data-finished-note");
          var again = document.createElement("a");
          again.href = window.location.href;
          again.textContent = fresh.getAttribute("data-reload-note");
          note.appendChild(again);
          live.insertBefore(note, live.firstChild);
        }
      })
      .catch(function () { /* the next tick tries again */ });
  }, 2000);
});
