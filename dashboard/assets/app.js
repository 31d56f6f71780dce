// The dashboard page: follows /api/events (server-sent events carrying the /api/state JSON) and
// redraws. window.wmrl exposes the last state and counters for tests and the console.
(function () {
  "use strict";
  const wmrl = window.wmrl = { state: null, events: 0, renders: 0 };
  const $ = id => document.getElementById(id);

  function lerpColor(a, b, t) {
    const pa = [1, 3, 5].map(i => parseInt(a.substr(i, 2), 16)), pb = [1, 3, 5].map(i => parseInt(b.substr(i, 2), 16));
    return "#" + pa.map((v, i) => Math.round(v + (pb[i] - v) * t).toString(16).padStart(2, "0")).join("");
  }
  const SCORING_ALARM = 0.5; // dashboard.ScoringAlarm: the stages' --max-failure-share default
  const num = (v, d) => v == null || !isFinite(v) ? "—" : (+v).toFixed(d);
  const esc = s => String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

  function chartBox(parent, name, run, svg, steps) {
    const d = document.createElement("div");
    d.className = "chart";
    d.dataset.chart = name;
    d.dataset.run = run.id;
    d.dataset.steps = steps.join(",");
    d.appendChild(svg);
    parent.appendChild(d);
  }

  function stepSeries(run, f) {
    return run.steps.filter(s => f(s) != null && isFinite(f(s))).map(s => [s.step, f(s)]);
  }

  function renderRun(run) {
    const card = document.createElement("div");
    card.className = "run";
    card.dataset.run = run.id;
    const last = run.steps[run.steps.length - 1];
    let redis = "";
    if (run.redis) {
      // The head's state (dashboard.RedisHead.State): lost is an alarm, a pending head or an
      // ended run's expired keys are not.
      const cls = { lost: "bad", error: "bad", gone: "muted", pending: "muted" }[run.redis.state] || "bad";
      if (run.redis.error) redis = ` · Redis <code>${esc(run.redis.prefix)}</code>: <span class="head ${cls}" data-state="${esc(run.redis.state || "")}">${esc(run.redis.error)}</span>`;
      else {
        // The head is written after the commit, so one step behind is the normal flow.
        const behind = last ? last.step - run.redis.sealed_step : 0;
        redis = ` · Redis head: step <b>${run.redis.sealed_step}</b>, fit v${run.redis.fit_version}, weight ${num(run.redis.anchor_weight, 2)}` +
          (behind > 1 ? ` <span class="bad">(${behind} behind the topic)</span>`
            : behind === 1 ? ` <span class="ok">(1 behind the topic: being written)</span>` : ` <span class="ok">(in step with the topic)</span>`);
      }
    }
    if (run.ended) card.classList.add("ended");
    const ended = run.ended ? ` <span class="state ended" title="${esc(new Date(run.ended.at).toISOString())}">ended after step ${run.ended.last_step} (${esc(run.ended.reason)})</span>`
      : ` <span class="state live">active</span>`;
    // The trust gate (wmrl correct --trust-gate): a badge while it keeps the world model out.
    const gate = last && last.gate;
    const gated = run.gated_since != null
      ? ` <span class="state gated" title="window: ${gate.pairs} anchor pairs, ρ̂ ${num(gate.rho, 3)} [${num(gate.lo, 3)}, ${num(gate.hi, 3)}] < 1/√(n−2)">world model gated off since step ${run.gated_since}</span>` : "";
    card.innerHTML = `<h2>${esc(run.prefix)}<b>${esc(run.run)}</b> / ${esc(run.stream)}${ended}${gated}</h2>
      <div class="facts">sealed steps <b class="sealed">${run.steps.length}</b> · anchor groups <b class="anchor-groups">${run.anchor_groups}</b> of ${run.groups}` +
      (last ? ` · last step <b>${last.step}</b> · fit version <b>${last.fit_version}</b> · window pairs <b>${last.pairs}</b> · next anchor weight <b>${num(last.next_anchor_weight, 2)}</b>` +
        ` · masked rows <b class="masked ${last.rows && last.masked_rows / last.rows > SCORING_ALARM ? "bad" : "ok"}">${last.masked_rows} of ${last.rows}</b>` +
        (gate ? ` · trust gate <b class="gate">${gate.closed ? "closed" : "open"}</b> (ρ̂ ${num(gate.rho, 2)}, ${gate.pairs} pairs)` : "") : "") +
      redis + `</div><div class="charts"></div>`;
    const charts = card.querySelector(".charts");

    // 1. The calibration map over time, over the anchor pairs coloured by step. A z-space map
    // (--map zspace) maps standardised advantages, not scores: it gets its own chart (1b).
    const scoreMaps = run.maps.filter(mp => mp.space !== "z"), zMaps = run.maps.filter(mp => mp.space === "z");
    const maxStep = last ? Math.max(1, last.step) : 1;
    const pairs = run.pairs.map(p => [p[1], p[2], p[0], lerpColor("#c6dbef", "#08306b", p[0] / maxStep)]);
    const series = [{ name: "identity", color: "#999", dashed: true, points: [[0, 0], [1, 1]], width: 1 },
      { name: `anchor pairs (${run.pairs.length})`, color: "#4a7db5", line: false, dots: true, radius: 1.8, opacity: 0.75, points: pairs }];
    scoreMaps.forEach((mp, i) => {
      const pts = mp.x.length ? [[0, mp.y[0]], ...mp.x.map((x, j) => [x, mp.y[j]]), [1, mp.y[mp.y.length - 1]]] : [[0, 0], [1, 1]];
      const t = scoreMaps.length > 1 ? i / (scoreMaps.length - 1) : 1;
      series.push({ name: `map after step ${mp.step} (fit ${mp.fit_version})`, color: lerpColor("#fdbe85", "#a63603", t), width: i === scoreMaps.length - 1 ? 2.6 : 1.5, points: pts });
    });
    chartBox(charts, "calibration-map", run, svgChart({
      title: "Calibration map over time", xLabel: "world-model score (raw)", yLabel: "executed score",
      xMin: 0, xMax: 1, yMin: 0, yMax: 1, series, height: 300,
      attrs: { "data-pairs": run.pairs.length, "data-maps": run.maps.length, "data-latest-fit": run.maps.length ? run.maps[run.maps.length - 1].fit_version : -1 },
    }), scoreMaps.map(m => m.step));
    if (zMaps.length) {
      // Axes from the breakpoints themselves (plus the identity over their range), so the map
      // stays inside its chart whatever the spread of the standardised advantages.
      const zs = zMaps.flatMap(mp => mp.x.concat(mp.y));
      const lo = Math.min(...zs), hi = Math.max(...zs), pad = (hi - lo) * 0.08 || 0.5;
      const zSeries = [{ name: "identity", color: "#999", dashed: true, points: [[lo - pad, lo - pad], [hi + pad, hi + pad]], width: 1 }];
      zMaps.forEach((mp, i) => {
        const t = zMaps.length > 1 ? i / (zMaps.length - 1) : 1;
        zSeries.push({ name: `φ after step ${mp.step} (fit ${mp.fit_version})`, color: lerpColor("#c7e9c0", "#00441b", t), width: i === zMaps.length - 1 ? 2.6 : 1.5, dots: true,
          points: mp.x.map((x, j) => [x, mp.y[j]]) });
      });
      chartBox(charts, "zspace-map", run, svgChart({
        title: "z-space map φ (--map zspace) over time", xLabel: "world-model advantage (within-group z)", yLabel: "corrected advantage (z)",
        xMin: lo - pad, xMax: hi + pad, yMin: lo - pad, yMax: hi + pad, series: zSeries, height: 300,
        attrs: { "data-maps": zMaps.length },
      }), zMaps.map(m => m.step));
    }

    // 2. Calibration error per step, raw vs debiased.
    const raw = stepSeries(run, s => s.raw_mae), cal = stepSeries(run, s => s.calibrated_mae);
    chartBox(charts, "calibration-error", run, svgChart({
      title: "Calibration error per step", xLabel: "step", yLabel: "mean |score − executed|", xInteger: true, yMin: 0,
      // Pairs need both scores: anchor groups whose world-model score failed ran but give none.
      empty: run.anchor_groups ? `${run.anchor_groups} anchor groups ran, 0 pairs: see Scoring failures` : "no anchor rollouts yet",
      series: [{ name: "raw world model", color: "#e6550d", dots: true, width: 3, points: raw }, { name: "debiased (map in force)", color: "#3182bd", dots: true, dashed: true, points: cal }],
    }), raw.map(p => p[0]));

    // 2b. What the map did to the world-model advantages (0: OD did not reach the gradient).
    const shift = stepSeries(run, s => s.debias_shift), reord = stepSeries(run, s => s.debias_reordered_share);
    chartBox(charts, "debias-shift", run, svgChart({
      title: "Debias shift: world-model advantages moved by the map", xLabel: "step", yLabel: "mean |A(f(r̂)) − A(r̂)| · share", xInteger: true, yMin: 0,
      empty: "no debias effect in the snapshots",
      series: [{ name: "mean advantage shift", color: "#a63603", dots: true, points: shift }, { name: "share of groups reordered/tied", color: "#756bb1", dots: true, dashed: true, points: reord }],
    }), shift.map(p => p[0]));

    // 3. IVD anchor weight, 4. fit version, 5. step latency.
    const w = stepSeries(run, s => s.anchor_weight);
    chartBox(charts, "anchor-weight", run, svgChart({
      title: "IVD anchor weight in force", xLabel: "step", yLabel: "anchor row weight (WM rows 1)", xInteger: true, yMin: 0,
      series: [{ name: "anchor weight", color: "#31a354", dots: true, points: w }],
    }), w.map(p => p[0]));
    const fv = stepSeries(run, s => s.fit_version);
    chartBox(charts, "fit-version", run, svgChart({
      title: "Fit version (refits so far)", xLabel: "step", yLabel: "fit version", xInteger: true, yInteger: true, yMin: 0,
      series: [{ name: "fit version", color: "#756bb1", dots: true, points: fv }],
    }), fv.map(p => p[0]));
    const lat = stepSeries(run, s => s.latency_ms);
    chartBox(charts, "latency", run, svgChart({
      title: "Step latency: last reward → advantages", xLabel: "step", yLabel: "ms (record timestamps)", xInteger: true, yMin: 0,
      series: [{ name: "latency", color: "#636363", dots: true, points: lat }],
    }), lat.map(p => p[0]));
    return card;
  }

  function table(id, head, rows, empty, rowClass) {
    const t = $(id);
    t.innerHTML = "<tr>" + head.map(h => `<th>${esc(h)}</th>`).join("") + "</tr>" +
      (rows.length ? rows.map((r, k) => `<tr class="${rowClass ? rowClass(k) : ""}">` + r.map((c, i) => `<td${i > 0 && typeof c === "string" && isNaN(+c) ? ' class="l"' : ""}>${esc(c)}</td>`).join("") + "</tr>").join("")
        : `<tr><td colspan="${head.length}" class="empty">${esc(empty)}</td></tr>`);
  }

  function render(st) {
    wmrl.state = st;
    wmrl.renders++;
    $("meta").textContent = `following ${st.topic_prefix}* · version ${st.version} · ${new Date(st.updated).toLocaleTimeString()}`;
    const runs = $("runs");
    runs.innerHTML = "";
    if (!st.runs.length) runs.innerHTML = '<p class="empty">Waiting for the first sealed step on the followed topics…</p>';
    for (const r of st.runs) runs.appendChild(renderRun(r));
    table("groups", ["group", "topic", "state", "members", "lag"],
      st.groups.map(g => [g.group, g.topic || g.error || "", g.state, String(g.members), g.error ? "—" : String(g.lag)]), "no consumer groups on the followed topics");
    table("topics", ["topic", "written by", "records", "records/s"],
      st.topics.map(t => [t.topic, t.stage, String(t.records), num(t.per_second, 1)]), "no records yet");
    const sc = st.scoring || [];
    table("scoring", ["topic set", "stage", "records", "failed", "failed (last 100)", "last error"],
      sc.map(h => [h.prefix, h.stage, String(h.records), String(h.failed), (100 * h.recent_failed_share).toFixed(0) + "%", h.last_error]),
      "no reward records yet", k => sc[k].unscored || sc[k].recent_failed_share > SCORING_ALARM ? "bad" : (sc[k].failed ? "warn" : ""));
    table("dlq", ["topic set", "stage", "reason", "count", "last error"],
      st.dead_letters.map(d => [d.prefix, d.stage, d.reason, String(d.count), d.last_error]), "no dead letters");
    $("headline").hidden = !st.headline;
    if (st.headline) {
      $("headline-line").textContent = st.headline.line;
      table("headline-arms", ["arm", "final score", "executions", "executions to target", "speedup (executions)"],
        st.headline.arms.map(h => [h.arm, num(h.final_score, 3), num(h.executions, 0), num(h.executions_to_target, 0), h.speedup == null ? "—" : num(h.speedup, 2) + "×"]), "");
    }
    const wiring = st.wiring || [];
    $("wiring-box").hidden = !wiring.length;
    $("wiring").innerHTML = wiring.map(e => `<li>${esc(e)}</li>`).join("");
    $("errors-box").hidden = !st.errors.length;
    $("errors").innerHTML = st.errors.map(e => `<li>${esc(e)}</li>`).join("");
  }

  function connect() {
    const es = new EventSource("api/events");
    const c = $("conn");
    es.onopen = () => { c.textContent = "live"; c.className = "conn on"; c.dataset.state = "live"; };
    es.onerror = () => { c.textContent = "reconnecting…"; c.className = "conn off"; c.dataset.state = "reconnecting"; };
    es.addEventListener("state", ev => { wmrl.events++; render(JSON.parse(ev.data)); });
  }
  connect();
})();
