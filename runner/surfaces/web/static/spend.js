// The run page's Spent line: what the run's provider calls really cost, from the run's JSON
// (GET /api/runs/ID, its "spend"), beside the plan's estimate of the same calls. A run that made
// no call keeps the line hidden; a call with no price known is said, never counted as 0.
(function () {
  "use strict";
  const page = document.getElementById("run-page");
  const line = document.getElementById("run-spend");
  if (!page || !line) return;
  const money = (value, currency) => value.toPrecision(4).replace(/\.?0+$/, "") + (currency ? " " + currency : "");
  fetch("/api/runs/" + encodeURIComponent(page.dataset.run))
    .then((res) => (res.ok ? res.json() : null))
    .then((doc) => {
      const spend = doc && doc.spend;
      if (!spend) return;
      let text = money(spend.cost, spend.currency) + " over " + spend.calls + " call(s)";
      if (spend.unpriced_calls) text += ", " + spend.unpriced_calls + " with no price known";
      if (spend.estimate !== null) text += " (plan's estimate " + money(spend.estimate, spend.currency) + ")";
      line.textContent = text;
      line.hidden = false;
      line.previousElementSibling.hidden = false;
    })
    .catch(() => {});
})();
