// Connect page: "Copy" and "Save" buttons for the generated files and commands.
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-copy]");
  if (!button) return;
  var text = document.getElementById(button.dataset.copy).textContent;
  if (button.classList.contains("save")) {
    var a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([text], {type: "text/plain"}));
    a.download = button.dataset.filename.split("/").pop();
    a.click();
    URL.revokeObjectURL(a.href);
    return;
  }
  navigator.clipboard.writeText(text).then(function () {
    var label = button.textContent;
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = label; }, 1500);
  });
});
