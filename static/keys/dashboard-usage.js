// The dashboard's last-24-hours chart; its data is the page's json_script "usage-24h-data".
(function () {
  var d = JSON.parse(document.getElementById("usage-24h-data").textContent);
  var canvas = document.getElementById("usage-24h-chart");
  var text = canvas.dataset; // the series' names, translated in the template
  new Chart(canvas, {
    data: {
      labels: d.labels,
      datasets: [
        { type: "bar", label: text.tokens, data: d.tokens, yAxisID: "tokens", backgroundColor: "#4f7fd1" },
        { type: "line", label: text.requests, data: d.requests, yAxisID: "requests", borderColor: "#b26a00", pointRadius: 2 }
      ]
    },
    options: {
      responsive: true, maintainAspectRatio: false, animation: false,
      scales: {
        x: { title: { display: true, text: text.timeAxis } },
        tokens: { position: "left", beginAtZero: true, title: { display: true, text: text.tokens } },
        requests: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: text.requests } }
      },
      plugins: { legend: { position: "bottom" } }
    }
  });
})();
