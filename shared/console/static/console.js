// The console's one script (served from this origin: the pages allow no inline script).
// Every element with data-live follows its fragment over Server-Sent Events: the server
// renders (and escapes) the fragment and sends it again whenever it changed.
"use strict";

document.querySelectorAll("[data-live]").forEach(function (element) {
  var source = new EventSource(element.dataset.live);
  source.addEventListener("html", function (event) {
    element.innerHTML = event.data;
    document.body.classList.add("live");
  });
  source.addEventListener("error", function () {
    document.body.classList.remove("live");
  });
});
