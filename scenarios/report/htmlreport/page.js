// The page works without this: it only hides the clean cells on request.
(function () {
  var box = document.getElementById("only-findings");
  if (!box) { return; }
  box.addEventListener("change", function () {
    var hide = box.checked;
    document.querySelectorAll("section.cell.clean, table.summary tr.clean").forEach(function (el) {
      el.classList.toggle("hidden", hide);
    });
  });
})();
