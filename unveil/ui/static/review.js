// Keyboard shortcuts of the review page: a approve, r reject, u undo the last decision, s skip, n note, arrows
// previous/next, Esc leaves the note.
(function () {
  "use strict";
  function typing(el) {
    return el && (el.tagName === "TEXTAREA" || el.tagName === "INPUT" || el.tagName === "SELECT" || el.isContentEditable);
  }
  function go(id) {
    var link = document.getElementById(id);
    if (link && link.getAttribute("href")) { window.location.assign(link.getAttribute("href")); }
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    var note = document.getElementById("note");
    if (typing(ev.target)) {
      if (ev.key === "Escape" && ev.target === note) { note.blur(); }
      return;
    }
    var button = null;
    if (ev.key === "a") { button = document.getElementById("approve"); }
    else if (ev.key === "r") { button = document.getElementById("reject"); }
    else if (ev.key === "u") { button = document.getElementById("undo"); }
    else if (ev.key === "s") { button = document.getElementById("skip"); }
    else if (ev.key === "n" && note) { ev.preventDefault(); note.focus(); return; }
    else if (ev.key === "ArrowLeft") { ev.preventDefault(); go("prev"); return; }
    else if (ev.key === "ArrowRight") { ev.preventDefault(); go("next"); return; }
    if (button) { ev.preventDefault(); button.click(); }
  });
  // Bulk decisions: tick samples (or all shown), then one confirmation for all of them.
  var bulk = document.getElementById("bulk");
  if (bulk) {
    var picks = function () { return document.querySelectorAll("input.pick"); };
    var count = function () {
      var n = Array.prototype.filter.call(picks(), function (p) { return p.checked; }).length;
      document.getElementById("picked").textContent = n + " selected";
      return n;
    };
    Array.prototype.forEach.call(picks(), function (p) { p.addEventListener("change", count); });
    var all = document.getElementById("pick-all");
    if (all) {
      all.addEventListener("change", function () {
        Array.prototype.forEach.call(picks(), function (p) { p.checked = all.checked; });
        count();
      });
    }
    bulk.addEventListener("submit", function (ev) {
      var n = count();
      var verb = ev.submitter && ev.submitter.value === "reject" ? "Reject" : "Approve";
      if (n === 0 || !window.confirm(verb + " " + n + " selected sample" + (n === 1 ? "" : "s") + "?")) {
        ev.preventDefault();
      }
    });
  }
  // Filters apply as soon as one changes.
  var filters = document.getElementById("filters");
  if (filters) {
    Array.prototype.forEach.call(filters.querySelectorAll("select"), function (sel) {
      sel.addEventListener("change", function () { filters.submit(); });
    });
  }
})();
