// Live updates of a dashboard page (every 5 s unless ?refresh=N says otherwise, 0 for none):
// every N seconds the page is fetched again and its <main> swapped in place, without a
// reload, only while the tab is visible (a hidden tab polls nothing and resumes when shown).
// A page where the user is choosing jobs (a checked box, a focused field) is left alone until
// they are done; a <details> they opened stays open. window.pgjobsLive counts what happened,
// for the browser tests.
(function () {
  "use strict";
  // The sidebar's filter narrows its list of queues as one types (without JavaScript, the
  // form opens the queues page filtered the same way).
  var filter = document.getElementById("sidebar-filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var wanted = filter.value.toLowerCase();
      var items = document.querySelectorAll("#sidebar li");
      for (var i = 0; i < items.length; i += 1) {
        items[i].hidden = wanted !== "" && items[i].getAttribute("data-name").indexOf(wanted) < 0;
      }
    });
  }
  var period = Number(document.body.getAttribute("data-refresh") || 0);
  var live = (window.pgjobsLive = { period: period, polls: 0, swaps: 0, held: 0, paused: false });
  if (!period) {
    return;
  }
  var timer = null;
  live.scheduled = function () {
    return timer !== null;
  };
  var indicator = document.getElementById("live-state");

  function show(text) {
    if (indicator) {
      indicator.textContent = text;
    }
  }

  function busy(main) {
    var active = document.activeElement;
    if (active && active !== document.body && main.contains(active) && active.tagName !== "A") {
      return true;
    }
    return main.querySelector("input[type=checkbox]:checked") !== null;
  }

  // A <details> the user opened stays open across an update (matched by its place on the page).
  function keepOpen(main, fresh) {
    var before = main.querySelectorAll("details");
    var after = fresh.querySelectorAll("details");
    if (before.length !== after.length) {
      return;
    }
    for (var i = 0; i < before.length; i += 1) {
      after[i].open = before[i].open;
    }
  }

  function schedule() {
    if (timer === null && !document.hidden) {
      timer = setTimeout(poll, period * 1000);
    }
  }

  function poll() {
    timer = null;
    if (document.hidden) {
      return;
    }
    live.polls += 1;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Pgjobs-Live": "1" } })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        var main = document.querySelector("main");
        if (html === null || main === null) {
          return;
        }
        if (busy(main)) {
          live.held += 1;
          return;
        }
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        if (fresh) {
          keepOpen(main, fresh);
          main.replaceWith(document.importNode(fresh, true));
          live.swaps += 1;
          show("live, every " + period + " s");
        }
      })
      .catch(function () {
        show("live: the last update failed, retrying");
      })
      .then(schedule);
  }

  document.addEventListener("visibilitychange", function () {
    live.paused = document.hidden;
    if (document.hidden) {
      if (timer !== null) {
        clearTimeout(timer);
        timer = null;
      }
      show("paused while the tab is hidden");
    } else {
      show("live, every " + period + " s");
      poll();
    }
  });
  show("live, every " + period + " s");
  schedule();
})();
