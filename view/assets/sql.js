// SQL highlighting for the viewer: splits a statement into tokens (strings, quoted names,
// comments, numbers, keywords, functions, operators) and returns DOM nodes with classes. It is
// written here rather than vendored because the viewer needs only colouring, not parsing, and
// must work offline with no build step.
"use strict";
const SQL_KEYWORDS = new Set(("select from where and or not in is null like between exists case when then else end as on join " +
  "inner left right full outer cross natural using group by order having limit offset union all intersect except distinct " +
  "with recursive asc desc nulls first last cast over partition window rows range preceding following current row " +
  "collate escape glob regexp true false interval filter lateral fetch next only top values ilike similar to any some").split(" "));

function highlightSQL(sql) {
  const frag = document.createDocumentFragment();
  const re = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^']|'')*'?)|("(?:[^"]|"")*"?|`[^`]*`?|\[[^\]\n]*\]?)|(\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b)|([A-Za-z_][A-Za-z0-9_$]*)(\s*\()?|(\s+)|([^\sA-Za-z0-9_'"`\[]+)/gy;
  let m, last = 0;
  const add = (cls, text) => {
    if (!text) return;
    if (!cls) { frag.appendChild(document.createTextNode(text)); return; }
    const s = document.createElement("span");
    s.className = cls;
    s.textContent = text;
    frag.appendChild(s);
  };
  while (last < sql.length) {
    re.lastIndex = last;
    m = re.exec(sql);
    if (!m || m[0] === "") { add("", sql.slice(last, last + 1)); last++; continue; }
    last = re.lastIndex;
    if (m[1]) add("sql-comment", m[1]);
    else if (m[2]) add("sql-string", m[2]);
    else if (m[3]) add("sql-name", m[3]);
    else if (m[4]) add("sql-number", m[4]);
    else if (m[5]) {
      const w = m[5].toLowerCase();
      if (SQL_KEYWORDS.has(w)) add("sql-keyword", m[5]);
      else if (m[6]) add("sql-function", m[5]);
      else add("", m[5]);
      if (m[6]) add("", m[6]);
    } else if (m[7]) add("", m[7]);
    else add("sql-op", m[8]);
  }
  return frag;
}
