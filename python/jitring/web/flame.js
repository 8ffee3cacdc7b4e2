(function () {
  "use strict";
  var cfg = JITRING, unit = cfg.unit, total = cfg.total;
  var data = JSON.parse(document.getElementById("jitring-data").textContent);
  (function names(root) {       // indices into the root's table -> names
    var t = root.t || [], todo = (root.c || []).slice();
    delete root.t;
    while (todo.length) {
      var d = todo.pop();
      d.n = t[d.n];
      if (d.f !== undefined) d.f = t[d.f];
      if (d.c) for (var i = 0; i < d.c.length; i++) todo.push(d.c[i]);
    }
  })(data);
  var pct = function (v) {
    return total ? (100 * v / total).toFixed(v * 1e4 < total ? 3 : 2) : "0";
  };
  var fmt = function (v) { return v.toLocaleString("en-US"); };
  document.getElementById("total").textContent =
    fmt(total) + " " + unit + " in all.";
  document.getElementById("note").textContent = cfg.note;
  if (!total) {
    document.getElementById("chart").textContent = "No " + unit + ".";
    document.body.setAttribute("data-rendered", Math.round(performance.now()));
    return;
  }
  function hash(s) {            // a stable 0..1 per name, for shading
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return ((h >>> 0) % 1000) / 999;
  }
  function colour(d) {
    if (d.highlight) return "#e600e6";
    var v = hash(d.data.n), k = d.data.l;
    if (k === "p")              // Python: blues
      return "rgb(" + Math.round(96 + 60 * v) + "," + Math.round(160 + 50 * v) +
        "," + Math.round(225 + 25 * v) + ")";
    if (k === "k")              // kernel: yellows
      return "rgb(" + Math.round(220 + 20 * v) + "," + Math.round(185 + 30 * v) +
        "," + Math.round(40 + 40 * v) + ")";
    if (k === "r")              // processes and the whole: greys
      return "rgb(" + Math.round(190 + 25 * v) + "," + Math.round(190 + 25 * v) +
        "," + Math.round(190 + 25 * v) + ")";
    return "rgb(" + Math.round(230 + 25 * v) + "," + Math.round(110 + 80 * v) +
      "," + Math.round(40 + 30 * v) + ")";   // native: warm
  }
  function selfOf(d) {
    var s = d.data.v, c = d.data.c;
    if (c) for (var i = 0; i < c.length; i++) s -= c[i].v;
    return s;
  }
  function describe(d) {
    var v = d.data.v, s = selfOf(d);
    return (d.data.f || d.data.n) + "  \u2014  " + fmt(v) + " " + unit +
      " (" + pct(v) + "% of all), self " + fmt(s) + " (" + pct(s) + "%)";
  }
  var chartEl = document.getElementById("chart");
  var width = function () { return Math.max(chartEl.clientWidth - 32, 300); };
  var details = document.getElementById("details");
  var hint = "Hover over a frame for its " + unit + "; click it to zoom.";
  var chart = flamegraph.default()
    .width(width())
    .cellHeight(18)
    .minFrameSize(1)
    .sort(false)
    .inverted(true)             // an icicle: deep stacks start on screen
    .setColorMapper(colour)
    .setLabelHandler(describe)
    .setDetailsElement(details);
  var term = "";
  chart.setSearchMatch(function (d, t) {
    if (!t) return false;
    var n = (d.data.f || d.data.n).toLowerCase();
    return n.indexOf(t.toLowerCase()) >= 0 ||
      d.data.n.toLowerCase().indexOf(t.toLowerCase()) >= 0;
  });
  var match = document.getElementById("match");
  chart.setSearchHandler(function (results) {
    // The matches' samples from the data, each counted once (not under
    // another match), whatever the zoom hides.
    var found = new Set(results), sum = 0;
    results.forEach(function (d) {
      for (var p = d.parent; p; p = p.parent) if (found.has(p)) return;
      sum += d.data.v;
    });
    match.textContent = term ? (results.length === 1 ? "1 frame matches" :
      results.length + " frames match") + " \u201c" + term +
      "\u201d: " + fmt(sum) + " " + unit + ", " + pct(sum) + "% of all" : "";
  });
  chart.setDetailsHandler(function (text) { details.textContent = text || hint; });
  details.textContent = hint;
  // The first drawing and a resize without animation, finished at once
  // (d3's timers run on animation frames, which a hidden or headless page
  // may not get, and a screenshot may come before they end); zooming
  // animates.
  function now(draw) {
    chart.transitionDuration(0);
    draw();
    d3.timerFlush();
    // New frames' rects grow in a fixed 250 ms animation: end it now.
    d3.select("#chart").selectAll("g.frame > rect").interrupt()
      .attr("width", function () { return this.parentNode.getAttribute("width"); });
    chart.transitionDuration(300);
  }
  now(function () { d3.select("#chart").datum(data).call(chart); });
  var input = document.getElementById("search"), timer = null;
  input.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () {
      term = input.value.trim();
      if (term) chart.search(term); else { chart.clear(); match.textContent = ""; }
    }, 150);
  });
  document.getElementById("reset").addEventListener("click", function () {
    chart.resetZoom();
  });
  document.getElementById("clear").addEventListener("click", function () {
    input.value = ""; term = ""; chart.clear(); match.textContent = "";
  });
  var rt = null;
  window.addEventListener("resize", function () {
    clearTimeout(rt);
    rt = setTimeout(function () {
      if (chart.width() !== width()) now(function () { chart.width(width()).update(); });
    }, 200);
  });
  // The search term from the address (#search=TERM), e.g. for a link.
  var m = /[#&]search=([^&]*)/.exec(location.hash);
  if (m) { input.value = decodeURIComponent(m[1]); term = input.value;
           chart.search(term); }
  // When the first drawing was done, in ms since the page began to load.
  document.body.setAttribute("data-rendered", Math.round(performance.now()));
})();
