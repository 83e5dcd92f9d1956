// Gateway Portal: copy-to-clipboard, confirmation prompts and the CSRF header for htmx.
(function () {
  "use strict";

  function cookie(name) {
    const match = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return match ? decodeURIComponent(match[1]) : "";
  }

  // htmx requests carry Django's CSRF token like a form would.
  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-CSRFToken"] = cookie("csrftoken");
  });

  function copyWithTextarea(text) {
    // http:// on a LAN: no async clipboard API; a selected textarea and execCommand still work.
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.top = "0";
    area.style.left = "-9999px";
    document.body.appendChild(area);
    area.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    } finally {
      document.body.removeChild(area);
    }
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(function () { return copyWithTextarea(text); });
    }
    return copyWithTextarea(text);
  }

  function selectNode(node) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  // <select data-autosubmit> submits its form on change (no inline handlers: the CSP forbids them).
  document.addEventListener("change", function (event) {
    if (event.target.matches("select[data-autosubmit]")) {
      event.target.form.requestSubmit();
    }
  });

  // The deploy form: choosing a backend opens its options and folds the other backend's.
  document.addEventListener("change", function (event) {
    if (!event.target.matches("#deploy-form select[name=backend]")) return;
    document.querySelectorAll("#deploy-form details[data-backend]").forEach(function (d) {
      d.open = d.dataset.backend === event.target.value;
    });
  });

  // A POST form's button that submits it by GET (formmethod="get": "Show with placeholder" on the
  // Connect page) leaves the CSRF token out of the URL, so it reaches no history, log or Referer.
  // (The form's entry list is made after this event: a disabled input is not in it.)
  document.addEventListener("submit", function (event) {
    const submitter = event.submitter;
    if (!submitter || (submitter.getAttribute("formmethod") || "").toLowerCase() !== "get") return;
    const token = event.target.querySelector("input[name=csrfmiddlewaretoken]");
    if (!token) return;
    token.disabled = true;
    setTimeout(function () { token.disabled = false; }, 0);  // back for a POST from this page later
  });

  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-copy-target]");
    if (button) {
      const target = document.getElementById(button.dataset.copyTarget);
      if (!target) return;
      const label = button.dataset.label || button.textContent;
      button.dataset.label = label;
      copyText(target.textContent.trim()).then(function () {
        button.textContent = document.body.dataset.copied;
        setTimeout(function () { button.textContent = label; }, 1500);
      }, function () {
        // Nothing could write the clipboard: select the text so one keystroke copies it, and say so.
        selectNode(target);
        button.textContent = document.body.dataset.copySelected;
        setTimeout(function () { button.textContent = label; }, 4000);
      });
      return;
    }
    // <button data-confirm="Really?"> asks before submitting (server-side confirm pages remain the rule).
    const confirmer = event.target.closest("[data-confirm]");
    if (confirmer && !window.confirm(confirmer.dataset.confirm)) {
      event.preventDefault();
    }
  });
})();
