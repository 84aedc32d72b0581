// Charon management UI: live numbers and redrive progress. The pages are complete without it.
//
// A container with data-src="/api/..." is polled through /ui/api (the session, no password).
// Inside it, elements with data-ptr="/json/pointer" get the value, formatted by data-fmt.
// A container with data-items="/pointer" and data-key="field,field" is a list: each row with a
// matching data-key (values joined by U+001F) is updated from its item.
(function () {
  "use strict";
  var PERIOD = 2000;

  function pointer(value, ptr) {
    if (!ptr) return value;
    var parts = ptr.split("/").slice(1);
    for (var i = 0; i < parts.length; i++) {
      if (value === null || value === undefined) return undefined;
      value = value[parts[i].replace(/~1/g, "/").replace(/~0/g, "~")];
    }
    return value;
  }
  function count(n) { return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function rate(r) { return (r >= 100 ? count(r) : r.toFixed(1)) + "/s"; }
  function size(b) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return i === 0 ? b + " B" : b.toFixed(1) + " " + units[i];
  }
  function age(s) {
    s = Math.floor(s);
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60), r = s % 60;
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + r + "s";
    return r + "s";
  }
  function format(value, fmt) {
    if (value === undefined || value === null) return fmt === "age" ? "–" : (fmt === "rate" ? "0.0/s" : (fmt === "count" ? "0" : ""));
    if (typeof value !== "number") return String(value);
    if (fmt === "count") return count(value);
    if (fmt === "rate") return rate(value);
    if (fmt === "size") return size(value);
    if (fmt === "age") return age(value);
    return String(value);
  }

  // The previous value and time of each counter a rate is derived from.
  var previous = new WeakMap();

  function fill(scope, data) {
    var now = Date.now();
    scope.querySelectorAll("[data-rate-of]").forEach(function (el) {
      var value = pointer(data, el.getAttribute("data-rate-of"));
      if (typeof value !== "number") return;
      var before = previous.get(el);
      if (before && now > before.at) el.textContent = rate(Math.max(0, value - before.value) * 1000 / (now - before.at));
      previous.set(el, { value: value, at: now });
    });
    scope.querySelectorAll("[data-ptr]").forEach(function (el) {
      var value = pointer(data, el.getAttribute("data-ptr"));
      var text = format(value, el.getAttribute("data-fmt"));
      if (el.hasAttribute("data-reload") && el.textContent.trim() !== text) { location.reload(); return; }
      el.textContent = text;
    });
    scope.querySelectorAll("[data-progress]").forEach(function (el) {
      var p = data.progress || {};
      var done = (p.moved || 0) + (p.skipped || 0) + (p.failed || 0), total = done + (p.remaining || 0);
      var percent = total ? done * 100 / total : 0;
      el.querySelector(".bar").style.width = percent.toFixed(1) + "%";
      el.querySelector(".label").textContent = percent.toFixed(0) + "%";
      el.setAttribute("aria-valuenow", percent.toFixed(0));
    });
  }

  function poll(container) {
    var src = container.getAttribute("data-src");
    fetch("/ui" + src, { credentials: "same-origin", headers: { "accept": "application/json" } })
      .then(function (r) { if (r.status === 401) { location.reload(); throw new Error("login"); } return r.ok ? r.json() : null; })
      .then(function (data) {
        if (data === null) return;
        if (!container.hasAttribute("data-items")) { fill(container, data); return; }
        var list = pointer(data, container.getAttribute("data-items")) || [];
        var keys = container.getAttribute("data-key").split(",");
        var byKey = {};
        list.forEach(function (item) { byKey[keys.map(function (k) { return item[k]; }).join("\u001f")] = item; });
        container.querySelectorAll("tr[data-key]").forEach(function (row) {
          var item = byKey[row.getAttribute("data-key")];
          if (item) fill(row, item);
        });
      })
      .catch(function () {})
      .then(function () { setTimeout(function () { poll(container); }, PERIOD); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-src]").forEach(function (c) { setTimeout(function () { poll(c); }, PERIOD); });
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) { if (!confirm(form.getAttribute("data-confirm"))) e.preventDefault(); });
    });
    document.querySelectorAll("button[data-confirm]").forEach(function (button) {
      button.addEventListener("click", function (e) { if (!confirm(button.getAttribute("data-confirm"))) e.preventDefault(); });
    });
    document.querySelectorAll("input[data-select-all]").forEach(function (all) {
      all.addEventListener("change", function () {
        document.querySelectorAll("input[name='" + all.getAttribute("data-select-all") + "']").forEach(function (box) { box.checked = all.checked; });
      });
    });
  });
})();
