// Zoom and pan of a picture in a frame (the TAG drawing): wheel or +/- zoom around the pointer, drag pans,
// "fit" shows the whole picture at the frame's width.
(function () {
  "use strict";
  var frame = document.getElementById("tag-frame");
  var img = document.getElementById("tag-img");
  if (!frame || !img) { return; }
  var scale = 1, x = 0, y = 0, drag = null;
  function apply() {
    img.style.transform = "translate(" + x + "px," + y + "px) scale(" + scale + ")";
    frame.dataset.scale = scale.toFixed(3);
  }
  function zoom(factor, cx, cy) {
    var next = Math.min(12, Math.max(1, scale * factor));
    // keep the point under (cx, cy) in place
    x = cx - (cx - x) * next / scale;
    y = cy - (cy - y) * next / scale;
    scale = next;
    if (scale === 1) { x = 0; y = 0; }
    apply();
  }
  frame.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var r = frame.getBoundingClientRect();
    zoom(ev.deltaY < 0 ? 1.25 : 0.8, ev.clientX - r.left, ev.clientY - r.top);
  }, { passive: false });
  frame.addEventListener("mousedown", function (ev) {
    drag = { x: ev.clientX - x, y: ev.clientY - y };
    frame.classList.add("dragging");
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) { return; }
    x = ev.clientX - drag.x;
    y = ev.clientY - drag.y;
    apply();
  });
  window.addEventListener("mouseup", function () { drag = null; frame.classList.remove("dragging"); });
  Array.prototype.forEach.call(document.querySelectorAll("[data-zoom]"), function (b) {
    b.addEventListener("click", function () {
      var kind = b.getAttribute("data-zoom");
      if (kind === "reset") { scale = 1; x = 0; y = 0; apply(); return; }
      zoom(kind === "in" ? 1.5 : 1 / 1.5, frame.clientWidth / 2, frame.clientHeight / 2);
    });
  });
  apply();
})();
