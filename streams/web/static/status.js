// loopguard status page: small conveniences on top of a page that works without JavaScript.
// - a changed filter <select> applies at once (the Apply button stays for text fields);
// - empty filters are left out of the URL;
// - the page reloads every data-refresh seconds while visible and not being edited.
"use strict";

(function () {
  function submit(form) {
    if (form.requestSubmit) {
      form.requestSubmit();
    } else {
      form.submit();
    }
  }

  function setUp() {
    var form = document.getElementById("filters");
    if (form) {
      form.addEventListener("submit", function () {
        Array.prototype.forEach.call(form.elements, function (el) {
          if (el.name && el.value === "") {
            el.disabled = true; // keeps ?agent=&detector= out of the address
          }
        });
      });
      Array.prototype.forEach.call(form.querySelectorAll("select"), function (el) {
        el.addEventListener("change", function () {
          submit(form);
        });
      });
    }

    var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
    if (seconds > 0) {
      window.setInterval(function () {
        var editing = form && form.contains(document.activeElement);
        if (document.visibilityState === "visible" && !editing) {
          window.location.reload();
        }
      }, seconds * 1000);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
