// The browser test runs without the race detector (make test runs it in its own non-race pass):
// under -race the demo's exact evaluator alone takes about 40 s on a loaded 2-core machine. The
// dashboard's own code is covered under -race by the model, handler and follower tests.

//go:build !race

package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wmrl/wmrl/dashboard"
	"github.com/wmrl/wmrl/demo"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/sim"
)

// EnvArtifacts names the directory the browser test writes its screenshots to; default
// .local/test-artifacts at the repository root (git-ignored).
const EnvArtifacts = "WMRL_TEST_ARTIFACTS"

// chromium finds Debian's chromium (or another Chrome). Missing is a skip on a developer's
// machine and a failure where tests are required (CI, make test), like the real services.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.SkipOrFail(t, "no chromium on PATH (Debian: apt-get install -y chromium)")
	return ""
}

func artifactDir(t *testing.T) string {
	dir := os.Getenv(EnvArtifacts)
	if dir == "" {
		dir = filepath.Join("..", ".local", "test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// pageRun is what the test reads back from the page for one run.
type pageRun struct {
	ID     string `json:"id"`
	Sealed int    `json:"sealed"`
	// Steps are each chart's data-steps attribute, split.
	Steps map[string]string `json:"steps"`
	Pairs int               `json:"pairs"`
	Maps  int               `json:"maps"`
	// LatestFit is the fit version of the newest map drawn, LastFit the last sealed step's.
	LatestFit int `json:"latest_fit"`
	LastFit   int `json:"last_fit"`
	// Masked is the card's "masked rows" fact and its colour class.
	Masked      string `json:"masked"`
	MaskedClass string `json:"masked_class"`
	// MaskedColor is the fact's computed colour: what the user sees, whatever rule wins.
	MaskedColor string   `json:"masked_color"`
	XTicks      []string `json:"xticks"`
	Dots        int      `json:"dots"`
}

// The dashboard in a real browser during a demo run: the page loads while the arms are held
// after their first step, then follows the rest of the run through server-sent events without a
// reload, and its charts show exactly the steps and anchor pairs the demo's trainers saw.
func TestDashboardInBrowserDuringDemo(t *testing.T) {
	exe := chromium(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	emb, err := demo.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	cfg := demo.Config{Sim: sim.DefaultConfig(), AnchorFraction: 0.5, Seed: 3, EvalProblems: 1, Embedded: emb,
		StallTimeout: 2 * time.Minute}
	// 30 steps, as the quick demo: enough anchor pairs for the map to be refitted many times
	// between the snapshots that carry breakpoints (every 64 steps).
	cfg.Sim.Steps, cfg.Sim.Groups, cfg.Sim.GroupSize = 30, 3, 4
	// This small workload has ~6 anchor pairs a step; a lower MinPairs than the default 200
	// makes the map refit from step ~4 on, as the quick demo's larger workload does from ~13.
	cfg.Arms = demo.Arms(cfg.AnchorFraction)
	for i := range cfg.Arms {
		cfg.Arms[i].Correction.MinPairs = 24
	}

	fol, err := dashboard.NewFollower(dashboard.Config{KafkaOpts: emb.KafkaOpts, Redis: emb.Redis, TopicPrefix: demo.DefaultTopicPrefix,
		RedisPrefix: cfg.RedisPrefixOf, PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFollower := context.WithCancel(ctx)
	folDone := make(chan error, 1)
	go func() { folDone <- fol.Run(fctx) }()
	defer func() {
		stopFollower()
		if err := <-folDone; err != nil {
			t.Errorf("follower: %v", err)
		}
	}()
	srv := httptest.NewServer(dashboard.Handler(fol.Model()))
	defer srv.Close()

	// Every arm's progress callback waits for release after its first step, so the page is
	// loaded early in the run and everything after that has to arrive live.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cfg.OnStep = func(string, sim.StepRecord) {
		once.Do(func() { close(held) })
		<-release
	}
	type result struct {
		out *demo.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := demo.Run(ctx, cfg)
		done <- result{out, err}
	}()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	select {
	case <-held:
	case r := <-done:
		t.Fatalf("demo ended before its first step was reported: %v", r.err)
	case <-ctx.Done():
		t.Fatal("no step within the deadline")
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1500, 1200))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	arms := len(demo.Arms(cfg.AnchorFraction))
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL),
		waitJS(fmt.Sprintf(`document.getElementById("conn").dataset.state === "live" && document.querySelectorAll(".run").length === %d`, arms)),
	); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	before, err := chromedp.Run(bctx, chromedp.Evaluate[[]int](`window.__loadedOnce = true; wmrl.state.runs.map(r => r.steps.length)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range before {
		if n >= cfg.Sim.Steps {
			t.Fatalf("page loaded after the run: sealed steps %v", before)
		}
	}
	t.Logf("%s: page loaded with sealed steps %v of %d", time.Since(start).Round(time.Millisecond), before, cfg.Sim.Steps)
	released = true
	close(release)

	dir := artifactDir(t)
	half := cfg.Sim.Steps / 2
	if err := chromedp.Do(bctx, waitJS(fmt.Sprintf(`wmrl.state.runs.some(r => r.steps.length >= %d)`, half))); err != nil {
		t.Fatalf("live updates: %v", err)
	}
	mid, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	writeArtifact(t, filepath.Join(dir, "dashboard-live.png"), mid)

	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("demo did not finish")
	}
	if r.err != nil {
		t.Fatalf("demo: %v", r.err)
	}
	t.Logf("%s: demo finished (evaluator %s, pipeline %s)", time.Since(start).Round(time.Millisecond), r.out.Eval.Round(time.Millisecond), r.out.Elapsed.Round(time.Millisecond))
	// As `wmrl demo --dashboard` does: the finished demo's headline numbers go on the page.
	fol.Model().SetHeadline(r.out.Headline())
	if err := chromedp.Do(bctx,
		waitJS(fmt.Sprintf(`!document.getElementById("headline").hidden && wmrl.state.runs.length === %d && wmrl.state.runs.every(r => r.steps.length === %d && r.redis && r.redis.sealed_step === %d && r.steps.every(s => s.rows > 0 && s.latency_ms != null))`,
			arms, cfg.Sim.Steps, cfg.Sim.Steps-1)),
	); err != nil {
		t.Fatalf("final state on the page: %v", err)
	}
	reloaded, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.__loadedOnce !== true`))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := chromedp.Run(bctx, chromedp.Evaluate[string](pageProbe))
	if err != nil {
		t.Fatal(err)
	}
	final, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	writeArtifact(t, filepath.Join(dir, "dashboard-final.png"), final)
	if reloaded {
		t.Fatal("the page was reloaded; updates must arrive live")
	}
	var got []pageRun
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	all := make([]string, cfg.Sim.Steps)
	for i := range all {
		all[i] = strconv.Itoa(i)
	}
	fitted := 0
	for _, res := range r.out.Results {
		id := cfg.ArmTopicPrefix(res.Arm) + sim.RunID(cfg.Seed) + "/" + sim.Stream
		i := slices.IndexFunc(got, func(p pageRun) bool { return p.ID == id })
		if i < 0 {
			t.Errorf("%s: no card %q on the page", res.Arm, id)
			continue
		}
		p := got[i]
		for _, chart := range []string{"anchor-weight", "fit-version", "latency"} {
			if p.Steps[chart] != strings.Join(all, ",") {
				t.Errorf("%s: chart %s shows steps %q, want 0..%d", res.Arm, chart, p.Steps[chart], cfg.Sim.Steps-1)
			}
		}
		var anchored []string
		for _, s := range res.Steps {
			if !math.IsNaN(s.RawMAE) {
				anchored = append(anchored, strconv.Itoa(s.Step))
			}
		}
		if p.Steps["calibration-error"] != strings.Join(anchored, ",") {
			t.Errorf("%s: calibration-error chart shows steps %q, the trainer saw anchor pairs in steps %q", res.Arm, p.Steps["calibration-error"], anchored)
		}
		if p.Dots != 2*len(anchored) {
			t.Errorf("%s: calibration-error chart has %d points, want raw + debiased for %d steps", res.Arm, p.Dots, len(anchored))
		}
		if p.Pairs != len(res.Pairs) {
			t.Errorf("%s: map chart shows %d anchor pairs, the trainer saw %d", res.Arm, p.Pairs, len(res.Pairs))
		}
		if p.Maps < 1 {
			t.Errorf("%s: no calibration map drawn", res.Arm)
		}
		// The newest map drawn is the fit in force after the last step, although snapshots carry
		// breakpoints only every 64 steps (the follower reads it from Redis).
		t.Logf("%s: newest map drawn: fit %d; last step fit %d; %d maps", res.Arm, p.LatestFit, p.LastFit, p.Maps)
		if p.LastFit > 0 {
			fitted++
		}
		if p.LatestFit != p.LastFit {
			t.Errorf("%s: map chart's newest map is fit %d, the last step's fit is %d", res.Arm, p.LatestFit, p.LastFit)
		}
		if !strings.HasSuffix(p.Masked, fmt.Sprintf(" of %d", cfg.Sim.Groups*cfg.Sim.GroupSize)) || !strings.Contains(p.MaskedClass, "ok") || p.MaskedColor != "rgb(46, 139, 87)" {
			t.Errorf("%s: masked rows fact %q (class %q, colour %s), want \"N of %d\" in the ok colour rgb(46, 139, 87)", res.Arm, p.Masked, p.MaskedClass, p.MaskedColor, cfg.Sim.Groups*cfg.Sim.GroupSize)
		}
		for _, tick := range p.XTicks {
			if _, err := strconv.Atoi(tick); err != nil {
				t.Errorf("%s: step axis tick %q is not an integer", res.Arm, tick)
			}
		}
	}
	if fitted == 0 {
		t.Error("no arm refitted its map: the map chart test proves nothing")
	}
	headline, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[document.getElementById("headline-line").textContent, ...[...document.querySelectorAll("#headline-arms tr")].slice(1).map(tr => tr.textContent)]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(headline) != 1+arms || headline[0] != r.out.FinalLine {
		t.Errorf("headline on the page %q, want the final line %q and one row per arm", headline, r.out.FinalLine)
	}
	// The scoring table lists each arm's world model (and the sandbox where it executes), none
	// in red in a healthy demo.
	scoring, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#scoring tr")].slice(1).map(tr => tr.className + "|" + tr.cells[1].textContent + "|" + tr.cells[3].textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	wmRows := 0
	for _, row := range scoring {
		if strings.HasPrefix(row, "bad|") {
			t.Errorf("scoring row in red in a healthy demo: %s", row)
		}
		if strings.Contains(row, "|world model|") {
			wmRows++
		}
	}
	if wmRows == 0 {
		t.Errorf("scoring table rows %q: no world-model row", scoring)
	}
	t.Logf("%s: screenshots: %s, %s", time.Since(start).Round(time.Millisecond), filepath.Join(dir, "dashboard-live.png"), filepath.Join(dir, "dashboard-final.png"))
}

// pageProbe reads every run card's charts back from the DOM (not from wmrl.state): what is drawn.
const pageProbe = `JSON.stringify([...document.querySelectorAll(".run")].map(card => {
  const chart = name => card.querySelector('.chart[data-chart="' + name + '"]');
  const steps = {};
  for (const c of card.querySelectorAll(".chart")) steps[c.dataset.chart] = c.dataset.steps;
  const m = chart("calibration-map").querySelector("svg");
  const ce = chart("anchor-weight");
  return {id: card.dataset.run, sealed: +card.querySelector(".sealed").textContent, steps,
    pairs: +m.dataset.pairs, maps: +m.dataset.maps, latest_fit: +m.dataset.latestFit,
    last_fit: wmrl.state.runs.find(r => r.id === card.dataset.run).steps.slice(-1)[0].fit_version,
    masked: card.querySelector(".masked").textContent, masked_class: card.querySelector(".masked").className,
    masked_color: getComputedStyle(card.querySelector(".masked")).color,
    xticks: [...ce.querySelectorAll("text.xtick")].map(t => t.textContent),
    dots: chart("calibration-error").querySelectorAll("circle.pt").length};
}))`

// waitJS polls a JavaScript condition until it holds (a throwing expression counts as false).
func waitJS(cond string) chromedp.Action[chromedp.Void] {
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

func writeArtifact(t *testing.T, path string, b []byte) {
	t.Helper()
	if len(b) == 0 {
		t.Fatalf("%s: empty screenshot", path)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
