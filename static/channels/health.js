// Channel health chart: p50/p95 time to first token (ms, left axis) and error ratio (%, right axis).
(function () {
  const canvas = document.getElementById("health-chart");
  if (!canvas || !window.Chart) return;
  const text = canvas.dataset; // legends and axis titles, translated in the template
  let chart = null;
  let latest = 0; // the last load asked for: only its answer is drawn

  // Times as the rest of the page gives them, in UTC, written the way the page's language writes
  // them (not the browser's language and time zone).
  const lang = document.documentElement.lang || undefined;
  const utc = { timeZone: "UTC", hourCycle: "h23" };
  const hourMinute = new Intl.DateTimeFormat(lang, { ...utc, hour: "2-digit", minute: "2-digit" });
  const withSeconds = new Intl.DateTimeFormat(lang, { ...utc, hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const dayMonth = new Intl.DateTimeFormat(lang, { timeZone: "UTC", month: "short", day: "numeric" });
  const timeAxis = () => ({ title: { display: true, text: text.timeAxis } });

  function label(iso, range) {
    const d = new Date(iso);
    return range === "7d" ? dayMonth.format(d) + " " + hourMinute.format(d) : hourMinute.format(d);
  }

  async function load(range) {
    const mine = ++latest;
    const resp = await fetch(canvas.dataset.url + "?range=" + encodeURIComponent(range), { credentials: "same-origin" });
    if (!resp.ok) return;
    const data = await resp.json();
    // Answers can come out of order (the reload after "Check now", then a range clicked): an
    // older one drawn last would show another range than the pressed button says.
    if (mine !== latest) return;
    // A new channel has one or two hours of checks: a line needs two points, so draw big dots
    // and say why the chart is mostly empty instead of leaving one pixel at the right edge.
    const measured = data.ttft_p50_ms.filter((v) => v !== null).length;
    const radius = measured < 3 ? 5 : 1;
    const note = document.getElementById("health-chart-note");
    if (note) {
      note.hidden = measured >= 3;
      // The sentences come translated from the template (data-none, data-hours-1, data-hours-2).
      note.textContent = measured === 0 ? note.dataset.none : note.dataset["hours-" + measured];
    }
    const checks = data.checks || [];
    if (measured < 3 && checks.length) {
      // Sparse: one point per check, on the checks' own times; a single check is carried to now
      // (dashed) so the chart shows a line at its value rather than a lone dot.
      const points = checks.map((c) => ({ at: c.at, ttft: c.ttft_ms, carried: false }));
      if (points.length === 1) points.push({ at: new Date().toISOString(), ttft: points[0].ttft, carried: true });
      const sparse = {
        type: "line",
        data: {
          labels: points.map((p) => withSeconds.format(new Date(p.at))),
          datasets: [{
            label: text.ttftCheck, data: points.map((p) => p.ttft), yAxisID: "ms",
            borderColor: "#1e6fd9", backgroundColor: "#1e6fd9", pointRadius: points.map((p) => (p.carried ? 0 : 5)),
            segment: { borderDash: (ctx) => (points[ctx.p1DataIndex].carried ? [6, 4] : undefined) },
          }],
        },
        options: {
          animation: false, maintainAspectRatio: false,
          scales: { x: timeAxis(), ms: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: "ms" } } },
        },
      };
      if (chart) chart.destroy();
      chart = new Chart(canvas, sparse);
      return;
    }
    const config = {
      type: "line",
      data: {
        labels: data.labels.map((l) => label(l, range)),
        datasets: [
          { label: text.ttftP50, data: data.ttft_p50_ms, yAxisID: "ms", borderColor: "#1e6fd9", backgroundColor: "#1e6fd9", spanGaps: true, pointRadius: radius },
          { label: text.ttftP95, data: data.ttft_p95_ms, yAxisID: "ms", borderColor: "#9c27b0", backgroundColor: "#9c27b0", spanGaps: true, pointRadius: radius },
          {
            label: text.errorRatio,
            data: data.error_ratio.map((v) => (v === null ? null : v * 100)),
            yAxisID: "pct", borderColor: "#c62828", backgroundColor: "rgba(198,40,40,.15)", fill: true, spanGaps: true, pointRadius: 1,
          },
        ],
      },
      options: {
        animation: false, maintainAspectRatio: false, interaction: { mode: "index", intersect: false },
        scales: {
          x: timeAxis(),
          ms: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: "ms" } },
          pct: { type: "linear", position: "right", min: 0, max: 100, grid: { drawOnChartArea: false }, title: { display: true, text: text.errorsAxis } },
        },
      },
    };
    if (chart) chart.destroy();
    chart = new Chart(canvas, config);
  }

  document.querySelectorAll("#health-range button").forEach((btn) => {
    btn.addEventListener("click", () => {
      document.querySelectorAll("#health-range button").forEach((b) => {
        const on = b === btn;
        b.setAttribute("aria-pressed", on ? "true" : "false");
        b.classList.toggle("secondary", !on);
      });
      load(btn.dataset.range);
    });
  });
  load("24h");
  // Refresh the chart after "Check now" put a new probe in the log.
  document.body.addEventListener("htmx:afterSwap", (e) => {
    if (e.detail && e.detail.target && e.detail.target.id === "health-check-result") {
      const on = document.querySelector('#health-range button[aria-pressed="true"]');
      load(on ? on.dataset.range : "24h");
    }
  });
})();
