// Like browser_test.go, without the race detector (make test runs it in its non-race pass).

//go:build !race

package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// The page's states as a browser renders them, checked by computed style (what the user sees),
// not by class names: a masked share above half is red (a more specific CSS rule used to keep it
// black), an ended run says so, runs are newest first, a run whose head Redis lost says it is
// being rebuilt, anchor groups whose world-model scores failed are counted instead of "no anchor
// rollouts yet", a z-space map stays inside its own chart, and a topic set whose rollouts
// nothing scores is named in red. The model is fed through the calls the follower makes for
// decoded records (follow_test.go covers the decoding on a broker). Screenshots go to
// $WMRL_TEST_ARTIFACTS (default .local/test-artifacts).
func TestDashboardStatesInBrowser(t *testing.T) {
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		testenv.SkipOrFail(t, "no chromium on PATH (Debian: apt-get install -y chromium)")
	}
	now := time.Now()
	m := NewModel("p.", 100)
	feedStates(m, now)
	srv := httptest.NewServer(Handler(m))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1500, 1200))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL), waitFor(`document.querySelectorAll(".run").length === 3 && !document.getElementById("wiring-box").hidden`)); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	const red, green = "rgb(187, 34, 34)", "rgb(46, 139, 87)"
	card := func(id string) string { return `document.querySelector('.run[data-run="` + id + `"]')` }
	color := func(sel string) string { return `getComputedStyle(` + sel + `).color` }
	checks := []struct{ name, js, want string }{
		{"newest first", `[...document.querySelectorAll(".run")].map(c => c.dataset.run).join(" ")`, "p.c-new/main p.b-masked/main p.a-old/main"},
		{"masked share above half is red", color(card("p.b-masked/main") + `.querySelector(".masked")`), red},
		{"masked share below half is green", color(card("p.c-new/main") + `.querySelector(".masked")`), green},
		{"ended run", card("p.a-old/main") + `.querySelector(".state").textContent`, "ended after step 2 (marker)"},
		{"ended card is set apart", `getComputedStyle(` + card("p.a-old/main") + `).borderTopStyle`, "dashed"},
		{"live run", card("p.c-new/main") + `.querySelector(".state").textContent`, "active"},
		{"Redis lost", card("p.b-masked/main") + `.querySelector(".head").dataset.state + " " + ` + color(card("p.b-masked/main")+`.querySelector(".head")`), "lost " + red},
		{"Redis lost says rebuilding", `String(` + card("p.b-masked/main") + `.querySelector(".head").textContent.startsWith("Redis lost this run's head; rebuilding"))`, "true"},
		{"ended run's expired head is not an alarm", card("p.a-old/main") + `.querySelector(".head").dataset.state + " " + ` + color(card("p.a-old/main")+`.querySelector(".head")`), "gone rgb(119, 119, 136)"},
		{"anchor groups counted from the manifests", card("p.b-masked/main") + `.querySelector(".anchor-groups").textContent`, "8"},
		{"calibration error without pairs names the anchor groups", card("p.b-masked/main") + `.querySelector('.chart[data-chart="calibration-error"] .plot text').textContent`,
			"8 anchor groups ran, 0 pairs: see Scoring failures"},
		{"z-space map on its own chart", card("p.c-new/main") + `.querySelector('.chart[data-chart="zspace-map"] svg').dataset.maps`, "1"},
		{"z-space map not on the score chart", card("p.c-new/main") + `.querySelector('.chart[data-chart="calibration-map"]').dataset.steps`, "0"}, // the identity in force after step 0 only
		{"z-space points inside the plot", `(() => { const svg = ` + card("p.c-new/main") + `.querySelector('.chart[data-chart="zspace-map"] svg');
			const r = svg.querySelector("g.axes rect"), x0 = +r.getAttribute("x"), y0 = +r.getAttribute("y"), x1 = x0 + +r.getAttribute("width"), y1 = y0 + +r.getAttribute("height");
			const pts = [...svg.querySelectorAll("circle.pt")];
			return pts.length + " " + pts.filter(c => +c.getAttribute("cx") < x0 || +c.getAttribute("cx") > x1 || +c.getAttribute("cy") < y0 || +c.getAttribute("cy") > y1).length; })()`, "5 0"},
		{"unscored topic set in red", `(() => { const tr = [...document.querySelectorAll("#scoring tr")].find(tr => tr.cells[0].textContent === "q.");
			return tr ? getComputedStyle(tr.cells[5]).backgroundColor + " " + tr.cells[1].textContent : "no row"; })()`, "rgb(251, 227, 227) world model and sandbox"},
		{"unscored topic set named under Wiring", `String([...document.querySelectorAll("#wiring li")].some(li => li.textContent.startsWith("nothing scores the rollouts of q.")))`, "true"},
	}
	for _, c := range checks {
		if got := eval(c.js); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("WMRL_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", ".local", "test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard-states.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	// One screenshot per state, for notes and reviews.
	for name, sel := range map[string]string{
		"dashboard-state-live-zspace.png":       `.run[data-run="p.c-new/main"]`,
		"dashboard-state-masked-redis-lost.png": `.run[data-run="p.b-masked/main"]`,
		"dashboard-state-ended.png":             `.run[data-run="p.a-old/main"]`,
		"dashboard-state-unscored-scoring.png":  `#scoring`,
		"dashboard-state-unscored-wiring.png":   `#wiring-box`,
	} {
		b, err := chromedp.Run(bctx, chromedp.Screenshot(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("screenshot of %s: %v", sel, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// feedStates builds three runs of topic set p. and an unscored topic set q.:
//   - a-old: ended two hours ago after step 2; Redis no longer holds its head;
//   - b-masked: the judge fails, so its 8 anchor groups give no pairs and 6 of the last step's
//     8 rows are masked; Redis held its head, then lost it;
//   - c-new: healthy, newest, a z-space map in force; Redis holds its head.
func feedStates(m *Model, now time.Time) {
	snap := func(run string, step int64, at time.Time) {
		m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: run, Stream: "main", Step: step, AnchorWeight: 1, FitVersion: uint64(step)}, at)
	}
	manifest := func(run string, step int64, at time.Time) {
		m.Manifest("p.steps.v1", "p.", topics.StepManifest{RunID: run, Step: step, Groups: []topics.GroupManifest{
			{GroupID: "g0", Stream: "main", Size: 4, Anchor: true}, {GroupID: "g1", Stream: "main", Size: 4, Anchor: true}}}, at)
	}
	adv := func(run string, step int64, masked int, pairs bool, at time.Time) {
		var rs []topics.AdvantageRow
		for i := range 8 {
			rs = append(rs, topics.AdvantageRow{RunID: run, Stream: "main", Step: step, GroupID: fmt.Sprint("g", i/4), RolloutID: fmt.Sprint(i),
				Source: topics.SourceAnchor, Predicted: 0.4, PredictedOK: pairs, Calibrated: 0.45, Executed: 0.5, ExecutedOK: true, Mask: i >= masked})
		}
		m.Advantages("p.advantages.v1", "p.", rs, at)
	}
	old := now.Add(-2 * time.Hour)
	for v := range int64(3) {
		manifest("a-old", v, old)
		adv("a-old", v, 0, true, old)
		snap("a-old", v, old)
	}
	m.End("p.calibration.v1", "p.", topics.CalibrationEnd{RunID: "a-old", LastStep: 2, EndedAt: old, Reason: topics.EndReasonMarker})
	mid := now.Add(-time.Minute)
	for v := range int64(4) {
		manifest("b-masked", v, mid)
		m.Reward("p.rewards.predicted.v1", "p.", "b-masked", "main", v, mid, "error: judge answered 500")
		adv("b-masked", v, 6, false, mid)
		snap("b-masked", v, mid)
	}
	for v := range int64(4) {
		manifest("c-new", v, now)
		m.Reward("p.rewards.predicted.v1", "p.", "c-new", "main", v, now, "")
		adv("c-new", v, 1, true, now)
		snap("c-new", v, now)
	}
	for range 40 {
		m.Count("q.rollouts.v1")
	}
	m.SetGroups([]GroupLag{{Group: "p.wmrl-worldmodel", Topic: "p.rollouts.v1", State: "Stable", Members: 1},
		{Group: "p.wmrl-correct", Topic: "p.rewards.predicted.v1", State: "Stable", Members: 1}})
	key := func(run string) runKey { return runKey{"p.", run, "main"} }
	m.RedisMissing(key("a-old"), "wmrl")
	m.SetRedis(key("b-masked"), &RedisHead{Prefix: "wmrl", SealedStep: 2, State: HeadOK})
	m.RedisMissing(key("b-masked"), "wmrl")
	m.SetRedis(key("c-new"), &RedisHead{Prefix: "wmrl", SealedStep: 3, FitVersion: 3, AnchorWeight: 1, State: HeadOK})
	m.SetRedisMap(key("c-new"), Map{Step: 3, FitVersion: 3, Space: MapSpaceZ,
		X: []float64{-2.7, -1.1, 0.05, 1.3, 3.4}, Y: []float64{-1.9, -0.8, 0.1, 0.9, 2.2}})
}

// waitFor polls a JavaScript condition until it holds (a throwing expression counts as false).
func waitFor(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for {
			ok, err := chromedp.Evaluate[bool]("(() => { try { return !!("+cond+"); } catch (e) { return false; } })()")(ctx, t)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", cond, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}
