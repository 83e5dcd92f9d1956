// The host page's GPU history: its data is the page's json_script "gpu-history-data".
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("gpu-history-data").textContent);
  var canvas = document.getElementById("gpu-history-chart");
  new Chart(canvas, {
    type: "line",
    data: data,
    options: {
      responsive: true,
      animation: false,
      spanGaps: false,
      scales: {
        x: { title: { display: true, text: canvas.dataset.timeAxis } },
        pct: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: "% / °C" } },
        gib: { type: "linear", position: "right", beginAtZero: true, title: { display: true, text: "GiB" }, grid: { drawOnChartArea: false } }
      },
      plugins: { legend: { position: "bottom" } }
    }
  });
})();
