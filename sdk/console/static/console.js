// Steadyflow console: the few lines of progressive JavaScript. Every page works
// without them; with them, pages follow live (SSE) and JSON editors are checked.
"use strict";
(function () {
  var dirty = new WeakSet();
  document.addEventListener("input", function (e) {
    var form = e.target.closest && e.target.closest("form");
    if (form) dirty.add(form);
    if (e.target.matches && e.target.matches("textarea[data-json]")) checkJson(e.target);
  });

  function checkJson(area) {
    var out = area.form && area.form.querySelector(".json-state");
    var ok = true, text = area.value.trim();
    if (text) { try { JSON.parse(text); } catch (err) { ok = false; if (out) out.textContent = "Not JSON yet: " + err.message; } }
    if (ok && out) out.textContent = text ? "Valid JSON." : "";
    area.setAttribute("aria-invalid", ok ? "false" : "true");
  }

  // A region may be replaced unless the person is working in it.
  function busy(region) {
    var active = document.activeElement;
    if (active && region.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
    var forms = region.querySelectorAll("form");
    for (var i = 0; i < forms.length; i++) if (dirty.has(forms[i])) return true;
    return !!region.querySelector("details[open]");
  }

  // What the script asks by itself says so: it is not the person's use of the session.
  var BACKGROUND = "X-Steadyflow-Background";
  // An answer that is the sign-in page (signed out, or the session expired): go there.
  function signedIn(r) {
    if (r.redirected && /\/signin$/.test(new URL(r.url).pathname)) {
      location.assign(r.url);
      return false;
    }
    return r.ok;
  }
  function background(headers) { headers[BACKGROUND] = "1"; return headers; }

  var pending = false, again = false;
  function refresh() {
    if (pending) { again = true; return; }
    pending = true;
    fetch(location.href, { headers: background({ "Accept": "text/html" }), credentials: "same-origin" })
      .then(function (r) { return signedIn(r) ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-swap]").forEach(function (region) {
          var fresh = region.id && doc.getElementById(region.id);
          if (!fresh) { if (!busy(region)) region.remove(); return; }
          if (busy(region)) { again = true; return; }
          region.replaceWith(document.importNode(fresh, true));
        });
        document.dispatchEvent(new CustomEvent("console:refreshed"));
      })
      .catch(function () { again = true; })
      .finally(function () {
        pending = false;
        if (again) { again = false; setTimeout(refresh, 1000); }
      });
  }

  var RETRY_MS = 30000;
  function follow() {
    var live = document.querySelector("[data-live]");
    var url = live && live.getAttribute("data-live");
    if (!url || !window.EventSource) return;
    var source = new EventSource(url);
    source.addEventListener("changed", refresh);
    source.addEventListener("end", function () { source.close(); refresh(); });
    // Closed for good: the session ended (a refresh leads to the sign-in page), or
    // the server's stream limits refused it (429, which the browser does not
    // retry): refresh now, and follow again in a while.
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) { refresh(); setTimeout(follow, RETRY_MS); }
    });
    document.body.setAttribute("data-following", "yes");
  }

  function counts() {
    var box = document.getElementById("counts");
    if (!box || !box.dataset.src) return;
    fetch(box.dataset.src, { headers: background({}), credentials: "same-origin" })
      .then(function (r) { return signedIn(r) ? r.text() : ""; })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var list = doc.querySelector(".counts");
        if (list) box.replaceChildren(document.importNode(list, true));
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    follow();
    counts();
    document.addEventListener("console:refreshed", counts);
  });
})();
