// The host page's GPU history: its data is the page's json_script "gpu-history-data".
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("gpu-history-data").textContent);
  new Chart(document.getElementById("gpu-history-chart"), {
    type: "line",
    data: data,
    options: {
      responsive: true,
      animation: false,
      spanGaps: false,
      scales: {
        pct: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: "% / °C" } },
        gib: { type: "linear", position: "right", beginAtZero: true, title: { display: true, text: "GiB" }, grid: { drawOnChartArea: false } }
      },
      plugins: { legend: { position: "bottom" } }
    }
  });
})();
