// approvals: how htmx treats our error answers, a "live" indicator, and inbox keyboard shortcuts.
// Everything here is an enhancement: every page and form works without it.
(function () {
  "use strict";

  // The server answers a refused decision with the widget itself, saying why:
  // 422 (a field the tool's validator refused), 409 (someone decided first, or the arguments
  // changed), 403 (not allowed). htmx 2 does not swap 4xx answers by default, so say these swap.
  htmx.config.responseHandling = [
    { code: "204", swap: false },
    { code: "[23]..", swap: true },
    { code: "^(403|409|422)$", swap: true, error: false },
    { code: "[45]..", swap: false, error: true },
  ];

  function flash(text) {
    var box = document.getElementById("flash");
    if (!box) return;
    box.textContent = text;
    box.hidden = !text;
  }

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    flash("The server answered " + xhr.status + " " + xhr.statusText + ". Reload the page and try again.");
  });
  document.addEventListener("htmx:sendError", function () {
    flash("Could not reach the server. Check the connection and try again.");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) flash("");
  });

  // Pages with server-sent events show "live" while their stream is open.
  document.addEventListener("htmx:sseOpen", function (event) {
    event.detail.elt.setAttribute("data-live", "open");
  });
  document.addEventListener("htmx:sseError", function (event) {
    event.detail.elt.setAttribute("data-live", "closed");
  });

  // A live list refreshes when the server says something changed, but never under the reviewer's
  // fingers: while they type in it (a deny reason, a cancel reason) the refresh waits until they leave.
  document.addEventListener("htmx:confirm", function (event) {
    var trigger = event.detail.triggeringEvent;
    var area = event.detail.elt;
    var active = document.activeElement;
    if (!trigger || String(trigger.type).indexOf("sse:") !== 0 || !active || !area.contains(active)) return;
    if (active.matches("input, textarea, select")) {
      event.preventDefault();
      area.setAttribute("data-stale", "true");
    }
  });
  document.addEventListener("focusout", function (event) {
    var area = event.target.closest && event.target.closest("[data-stale]");
    if (area && !(event.relatedTarget && area.contains(event.relatedTarget))) {
      area.removeAttribute("data-stale");
      htmx.trigger(area, "refresh");
    }
  });

  // Inbox: j/k move between calls, o (or Enter) opens one, a approves it, d goes to the deny reason.
  var selected = null;
  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("tr[data-call]"));
  }
  document.addEventListener("focusin", function (event) {
    var row = event.target.closest && event.target.closest("tr[data-call]");
    if (row) selected = row.getAttribute("data-call");
  });
  document.addEventListener("htmx:afterSettle", function () {
    // a refreshed list or a decided row replaced the focused element: keep the place
    if (selected && (document.activeElement === document.body || !document.activeElement)) {
      var row = document.getElementById("row-" + selected);
      if (row) row.focus({ preventScroll: true });
    }
  });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target.closest && target.closest("input, textarea, select, [contenteditable]")) {
      if (event.key === "Escape") target.blur();
      return;
    }
    var all = rows();
    if (!all.length) return;
    var current = target.closest ? target.closest("tr[data-call]") : null;
    if (!current && selected) current = document.getElementById("row-" + selected);  // a refresh took the focus
    var index = all.indexOf(current);
    var action = null;
    if (event.key === "j") {
      all[Math.min(index + 1, all.length - 1)].focus();
    } else if (event.key === "k") {
      all[Math.max(index - 1, 0)].focus();
    } else if ((event.key === "o" || event.key === "Enter") && current) {
      action = current.querySelector("[data-action=open]");
      if (action) action.click();
    } else if (event.key === "a" && current) {
      action = current.querySelector("[data-action=approve]");
      if (action) action.click();
    } else if (event.key === "d" && current) {
      action = current.querySelector("[data-action=deny-reason]");
      if (action) action.focus();
    } else {
      return;
    }
    event.preventDefault();
  });
})();
