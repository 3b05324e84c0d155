// The admin's opt-in auto-refresh: with its box ticked, the page reloads itself every few seconds,
// so an operator can watch runs move. The choice is kept per browser; a page where the operator is
// choosing runs or typing is left alone until they are done.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var box = document.getElementById("durable-autorefresh");
  if (!box) return;
  var key = "durable_django.autorefresh";
  var seconds = Number(box.getAttribute("data-seconds")) || 5;
  box.checked = window.localStorage.getItem(key) === "on";
  box.addEventListener("change", function () {
    window.localStorage.setItem(key, box.checked ? "on" : "off");
  });
  window.setInterval(function () {
    var choosing = document.querySelector("#result_list input.action-select:checked");
    var typing = document.activeElement && document.activeElement.matches("input[type=text], input[type=search], textarea, select");
    if (box.checked && !choosing && !typing && document.visibilityState === "visible") {
      window.location.reload();
    }
  }, seconds * 1000);
});
