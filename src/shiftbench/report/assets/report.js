/* shiftbench HTML report: sortable, filterable tables (vanilla JS, no dependencies).
 *
 * A table is a div of class "sb-table" whose data-source attribute names the id of a JSON
 * script element (type application/json) holding {"columns": [...], "rows": [[...], ...]}.
 * Every cell is written with textContent, so model names are shown as text, never parsed as HTML.
 */
(function () {
  "use strict";

  function format(value, col) {
    if (value === null || value === undefined) return "";
    if (col.kind === "num") {
      var s = Number(value).toFixed(col.digits === undefined ? 2 : col.digits);
      return col.signed && value > 0 ? "+" + s : s;
    }
    return String(value);
  }

  function compare(a, b, kind) {
    var aMissing = a === null || a === undefined, bMissing = b === null || b === undefined;
    if (aMissing || bMissing) return aMissing === bMissing ? 0 : (aMissing ? 1 : -1);
    if (kind === "num") return a - b;
    return String(a).localeCompare(String(b), undefined, { numeric: true, sensitivity: "base" });
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function initTable(root) {
    var source = document.getElementById(root.getAttribute("data-source"));
    if (!source) return;
    var data = JSON.parse(source.textContent);
    var cols = data.columns, rows = data.rows;
    var state = { sort: null, dir: 1, text: "", groups: {} };

    var controls = el("div", { "class": "sb-table-controls" });
    var search = el("input", { type: "search", "aria-label": "Filter rows",
                               placeholder: root.getAttribute("data-placeholder") || "Filter models (name, type, architecture)…" });
    controls.appendChild(search);
    // one <select> per column marked filter: "select" (model type, training data, ...)
    var selects = [];
    cols.forEach(function (col, i) {
      if (col.filter !== "select") return;
      var select = el("select", { "aria-label": "Filter by " + col.label });
      select.appendChild(el("option", { value: "" }, "all: " + col.label));
      Array.from(new Set(rows.map(function (r) { return r[i]; }))).filter(function (v) { return v !== ""; }).sort()
        .forEach(function (v) { select.appendChild(el("option", { value: v }, v)); });
      select.addEventListener("change", function () { state.groups[i] = select.value; render(); });
      controls.appendChild(select);
      selects.push(select);
    });
    var count = el("span", { "class": "sb-table-count", "aria-live": "polite" });
    controls.appendChild(count);

    var table = el("table", { "class": "sb-data" });
    var thead = el("thead"), headRow = el("tr"), tbody = el("tbody");
    var ths = cols.map(function (col, i) {
      var th = el("th", { scope: "col", "aria-sort": "none", "class": (col.kind === "num" ? "num" : "text") +
                                                                         (i === 0 ? " sb-sticky" : "") });
      var button = el("button", { type: "button", title: col.title || ("Sort by " + col.label) }, col.label);
      button.addEventListener("click", function () {
        if (state.sort === i) state.dir = -state.dir;
        else { state.sort = i; state.dir = col.kind === "num" ? -1 : 1; }
        render();
      });
      th.appendChild(button);
      headRow.appendChild(th);
      return th;
    });
    thead.appendChild(headRow);
    table.appendChild(thead);
    table.appendChild(tbody);
    var scroll = el("div", { "class": "sb-table-scroll" });
    scroll.appendChild(table);
    root.appendChild(controls);
    root.appendChild(scroll);

    function render() {
      var text = state.text.toLowerCase();
      var shown = rows.filter(function (r) {
        for (var g in state.groups) if (state.groups[g] && r[g] !== state.groups[g]) return false;
        if (!text) return true;
        return cols.some(function (c, i) { return c.kind !== "num" && String(r[i] === null ? "" : r[i]).toLowerCase().indexOf(text) >= 0; });
      });
      if (state.sort !== null) {
        var k = state.sort, kind = cols[k].kind, dir = state.dir;
        shown = shown.map(function (r, i) { return [r, i]; });
        shown.sort(function (a, b) {
          var aMissing = a[0][k] === null || a[0][k] === undefined, bMissing = b[0][k] === null || b[0][k] === undefined;
          var c = (aMissing || bMissing) ? compare(a[0][k], b[0][k], kind) : dir * compare(a[0][k], b[0][k], kind);
          return c || a[1] - b[1];
        });
        shown = shown.map(function (p) { return p[0]; });
      }
      ths.forEach(function (th, i) {
        th.setAttribute("aria-sort", i === state.sort ? (state.dir > 0 ? "ascending" : "descending") : "none");
      });
      var frag = document.createDocumentFragment();
      shown.forEach(function (r) {
        var tr = document.createElement("tr");
        cols.forEach(function (col, i) {
          var td = document.createElement("td");
          td.textContent = format(r[i], col);
          if (col.kind === "num") {
            td.className = "num" + (col.signed && r[i] > 0 ? " pos" : col.signed && r[i] < 0 ? " neg" : "");
          } else {
            td.className = i === 0 ? "sb-sticky" : "text";
            if (td.textContent.length > 18) td.title = td.textContent;   // cut off with an ellipsis
          }
          tr.appendChild(td);
        });
        frag.appendChild(tr);
      });
      tbody.replaceChildren(frag);
      var noun = root.getAttribute("data-noun") || "models";
      count.textContent = shown.length === rows.length ? rows.length + " " + noun
        : shown.length + " of " + rows.length + " " + noun;
    }

    search.addEventListener("input", function () { state.text = search.value; render(); });
    render();
  }

  document.querySelectorAll(".sb-table[data-source]").forEach(initTable);

  /* A chooser: a <select> showing one of several blocks (one figure per corruption or setting). The
   * blocks are drawn visible (plotly measures them at full width), then all but the chosen one are
   * hidden; a plot shown again is resized to its box. A link to a hidden block's id selects it. */
  function initChooser(root) {
    var select = root.querySelector("select");
    var blocks = Array.prototype.slice.call(root.querySelectorAll(":scope > .sb-choice"));
    function show(i) {
      blocks.forEach(function (b, j) { b.hidden = j !== i; });
      select.value = String(i);
      if (window.Plotly) {
        blocks[i].querySelectorAll(".js-plotly-plot").forEach(function (gd) { window.Plotly.Plots.resize(gd); });
      }
    }
    select.addEventListener("change", function () { show(Number(select.value)); });
    root.sbShow = function (id) {
      var i = blocks.findIndex(function (b) { return b.id === id; });
      if (i >= 0) show(i);
      return i >= 0;
    };
    show(0);
  }
  var choosers = Array.prototype.slice.call(document.querySelectorAll(".sb-chooser"));
  choosers.forEach(initChooser);
  function followHash() {
    var id = decodeURIComponent(location.hash.slice(1));
    if (!id) return;
    choosers.forEach(function (c) {
      if (c.sbShow(id)) c.scrollIntoView();   // the selector, then the chosen block under it
    });
  }
  window.addEventListener("hashchange", followHash);
  followHash();

  /* Table of contents: following a testbed's link also unfolds its list of sections. */
  document.querySelectorAll("nav.sb-toc summary a").forEach(function (a) {
    a.addEventListener("click", function () { a.closest("details").open = true; });
  });
})();
