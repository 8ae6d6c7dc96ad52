// The studies page keeps its counts current: it asks GET /studies every few seconds and
// writes the numbers into the table (text only, never markup).
"use strict";
const REFRESH_MS = 5000;

function refreshStudies() {
  fetch("/studies", { headers: { Accept: "application/json" } })
    .then((response) => (response.ok ? response.json() : null))
    .then((body) => {
      if (!body) return;
      for (const study of body.studies) {
        const row = [...document.querySelectorAll("#studies tr[data-study]")]
          .find((r) => r.dataset.study === study.study);
        if (!row) continue;
        const counts = { complete: study.complete, running: study.running,
                         left: study.pending + (study.not_started ?? 0), failed: study.failed };
        for (const [field, value] of Object.entries(counts)) {
          const cell = row.querySelector(`td[data-field="${field}"]`);
          if (cell && cell.textContent !== String(value)) cell.textContent = String(value);
        }
      }
    })
    .catch(() => {});  // the next tick tries again
}

if (document.body.dataset.page === "studies" && document.getElementById("studies")) {
  setInterval(refreshStudies, REFRESH_MS);
}
