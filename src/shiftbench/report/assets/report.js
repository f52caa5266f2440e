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
    var state = { sort: null, dir: 1, text: "", group: "" };
    var groupCol = cols.findIndex(function (c) { return c.filter === "select"; });

    var controls = el("div", { "class": "sb-table-controls" });
    var search = el("input", { type: "search", placeholder: "Filter models (name or type)…", "aria-label": "Filter models" });
    controls.appendChild(search);
    var select = null;
    if (groupCol >= 0) {
      select = el("select", { "aria-label": "Filter by " + cols[groupCol].label });
      select.appendChild(el("option", { value: "" }, "all " + cols[groupCol].label + "s"));
      Array.from(new Set(rows.map(function (r) { return r[groupCol]; }))).sort().forEach(function (v) {
        select.appendChild(el("option", { value: v }, v));
      });
      controls.appendChild(select);
    }
    var count = el("span", { "class": "sb-table-count", "aria-live": "polite" });
    controls.appendChild(count);

    var table = el("table", { "class": "sb-data" });
    var thead = el("thead"), headRow = el("tr"), tbody = el("tbody");
    var ths = cols.map(function (col, i) {
      var th = el("th", { scope: "col", "aria-sort": "none", "class": col.kind === "num" ? "num" : "" });
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
        if (state.group && r[groupCol] !== state.group) return false;
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
          }
          tr.appendChild(td);
        });
        frag.appendChild(tr);
      });
      tbody.replaceChildren(frag);
      count.textContent = shown.length === rows.length ? rows.length + " models"
        : shown.length + " of " + rows.length + " models";
    }

    search.addEventListener("input", function () { state.text = search.value; render(); });
    if (select) select.addEventListener("change", function () { state.group = select.value; render(); });
    render();
  }

  document.querySelectorAll(".sb-table[data-source]").forEach(initTable);
})();
