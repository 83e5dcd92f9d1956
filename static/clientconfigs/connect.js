// Connect page: "Save" downloads the shown file (it holds a key only this page has: no URL could
// serve it again). Copy buttons are portal.js's data-copy-target.
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-save]");
  if (!button) return;
  var text = document.getElementById(button.dataset.save).textContent;
  var a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type: "text/plain"}));
  a.download = button.dataset.filename.split("/").pop();
  a.click();
  URL.revokeObjectURL(a.href);
});
