// The usage page's stacked bar chart; its data is the page's json_script "usage-chart-data".
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("usage-chart-data").textContent);
  var canvas = document.getElementById("usage-chart");
  new Chart(canvas, {
    type: "bar",
    data: data,
    options: {
      responsive: true,
      animation: false,
      scales: { x: { stacked: true, title: { display: true, text: canvas.dataset.timeAxis } }, y: { stacked: true, beginAtZero: true, title: { display: true, text: canvas.dataset.tokens } } },
      plugins: { legend: { position: "bottom" } }
    }
  });
})();
