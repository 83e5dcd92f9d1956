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

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // http:// on a LAN: the async clipboard API is unavailable, fall back to a hidden textarea.
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "absolute";
    area.style.left = "-9999px";
    document.body.appendChild(area);
    area.select();
    try {
      document.execCommand("copy");
    } finally {
      document.body.removeChild(area);
    }
    return Promise.resolve();
  }

  // The deploy form: choosing a backend opens its options and folds the other backend's.
  document.addEventListener("change", function (event) {
    if (!event.target.matches("#deploy-form select[name=backend]")) return;
    document.querySelectorAll("#deploy-form details[data-backend]").forEach(function (d) {
      d.open = d.dataset.backend === event.target.value;
    });
  });

  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-copy-target]");
    if (button) {
      const target = document.getElementById(button.dataset.copyTarget);
      if (!target) return;
      copyText(target.textContent.trim()).then(function () {
        const label = button.textContent;
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = label; }, 1500);
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
