// Keyboard shortcuts of the review page: a approve, r reject, u undo the last decision, n note, arrows
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
    else if (ev.key === "n" && note) { ev.preventDefault(); note.focus(); return; }
    else if (ev.key === "ArrowLeft") { ev.preventDefault(); go("prev"); return; }
    else if (ev.key === "ArrowRight") { ev.preventDefault(); go("next"); return; }
    if (button) { ev.preventDefault(); button.click(); }
  });
  // Filters apply as soon as one changes.
  var filters = document.getElementById("filters");
  if (filters) {
    Array.prototype.forEach.call(filters.querySelectorAll("select"), function (sel) {
      sel.addEventListener("change", function () { filters.submit(); });
    });
  }
})();
