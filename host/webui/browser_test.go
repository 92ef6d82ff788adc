package webui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds the browser: $STATED_CHROMIUM, else chromium (Debian's
// package) or chromium-browser on PATH, else /usr/bin/chromium. Without
// one the test fails when STATED_REQUIRE_BROWSER=1 (scripts/test.sh sets
// it after installing chromium) and is skipped otherwise, saying how to
// run it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STATED_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	const how = "no chromium found (install Debian's package: apt-get install -y chromium, or set STATED_CHROMIUM); scripts/test.sh installs it"
	if os.Getenv("STATED_REQUIRE_BROWSER") == "1" {
		t.Fatal("STATED_REQUIRE_BROWSER=1: " + how)
	}
	t.Skip(how)
	return ""
}

// artifactDir is where the screenshot goes: $STATED_TEST_ARTIFACTS when
// set (CI keeps it), else the test's temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("STATED_TEST_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

type row struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Failed bool   `json:"failed"`
	Reason string `json:"reason"`
	Bg     string `json:"bg"`
	Sync   string `json:"sync"`
	Badges string `json:"badges"`
}

type requestRow struct {
	Store    string `json:"store"`
	Kind     string `json:"kind"`
	Requests string `json:"requests"`
	PerCP    string `json:"perCheckpoint"`
	Dollars  string `json:"dollars"`
}

type bar struct {
	ID     string  `json:"id"`
	Class  string  `json:"cls"`
	Height float64 `json:"h"`
	Fill   string  `json:"fill"`
}

// TestPageInChromium drives the page in headless Chromium: a daemon with
// three completed checkpoints and a failed one; the page shows the four
// rows newest first, the failed one set apart with its reason, and both
// charts with a bar per checkpoint (the failed one red, the sizes
// growing), and checkpoint 2 pinned and marked as the one the open
// instance was restored from; then checkpoint 3's state page, reached by
// its link: the state table and a heat strip of one cell per key group,
// darker for more bytes. It saves a screenshot of each.
func TestPageInChromium(t *testing.T) {
	exe := chromium(t)
	_, base := history(t, "")

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1800),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()

	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(`table.history`)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	run := func(what string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("chromium: %s: %v", what, err)
		}
	}
	var (
		title          string
		rows           []row
		duration, size []bar
		shot           []byte
		err            error
	)
	run("title", func() error { title, err = chromedp.Run(bctx, chromedp.Title()); return err })
	run("rows", func() error {
		rows, err = chromedp.Run(bctx, chromedp.Evaluate[[]row](`Array.from(document.querySelectorAll('tr.checkpoint')).map(r => ({
			id: r.dataset.id, status: r.dataset.status, failed: r.classList.contains('failed'),
			reason: r.querySelector('td.reason').innerText,
			bg: getComputedStyle(r.querySelector('td')).backgroundColor,
			sync: r.querySelectorAll('td')[4].innerText,
			badges: Array.from(r.querySelectorAll('.badge')).map(b => b.innerText).join(',')}))`))
		return err
	})
	run("duration chart", func() error {
		duration, err = chromedp.Run(bctx, chromedp.Evaluate[[]bar](barsJS("duration")))
		return err
	})
	run("size chart", func() error { size, err = chromedp.Run(bctx, chromedp.Evaluate[[]bar](barsJS("size"))); return err })
	var requests []requestRow
	var billing string
	run("requests table", func() error {
		requests, err = chromedp.Run(bctx, chromedp.Evaluate[[]requestRow](`Array.from(document.querySelectorAll('#requests tr.request')).map(r => ({
			store: r.dataset.store, kind: r.dataset.kind, requests: r.querySelectorAll('td')[2].innerText,
			perCheckpoint: r.querySelectorAll('td')[4] ? r.querySelectorAll('td')[4].innerText : '',
			dollars: r.querySelector('td.dollars').innerText}))`))
		return err
	})
	run("requests total", func() error {
		billing, err = chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#requests strong.total').innerText`))
		return err
	})
	run("screenshot", func() error { shot, err = chromedp.Run(bctx, chromedp.FullScreenshot(100)); return err })
	path := filepath.Join(artifactDir(t), "webui.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))
	if len(shot) < 1000 {
		t.Fatalf("screenshot of %d bytes", len(shot))
	}

	// The requests table: the checkpoint store's five kinds and its
	// storage. The three completed checkpoints put objects (estimated
	// from calls on a local store) and priced them.
	kinds := map[string]requestRow{}
	for _, r := range requests {
		if r.Store != "checkpoint" {
			t.Errorf("request row of store %q", r.Store)
		}
		kinds[r.Kind] = r
	}
	if len(kinds) != 6 || kinds["storage"].Store == "" {
		t.Fatalf("requests table rows: %+v", requests)
	}
	put := kinds["put"]
	if n, err := strconv.Atoi(put.Requests); err != nil || n < 3 || put.PerCP == "-" || put.Dollars == "$0.00" || !strings.HasPrefix(put.Dollars, "$") {
		t.Errorf("put row: %+v", put)
	}
	if kinds["delete"].Dollars != "$0.00" {
		t.Errorf("deletes are free on S3 Standard: %+v", kinds["delete"])
	}
	if !strings.HasPrefix(billing, "$") || billing == "$0.00" {
		t.Errorf("the estimated bill reads %q", billing)
	}

	if !strings.Contains(title, "stated") {
		t.Errorf("title %q", title)
	}
	if len(rows) != 4 {
		t.Fatalf("rows: %+v", rows)
	}
	for i, r := range rows {
		if want := []string{"4", "3", "2", "1"}[i]; r.ID != want {
			t.Fatalf("row %d is checkpoint %s, want %s", i, r.ID, want)
		}
	}
	failed, ok := rows[0], rows[1]
	if !failed.Failed || failed.Status != "aborted" || !strings.Contains(failed.Reason, failReason) {
		t.Errorf("failed row: %+v", failed)
	}
	if failed.Bg == ok.Bg {
		t.Errorf("the failed row's background %s is the completed rows' (%s): it does not stand out", failed.Bg, ok.Bg)
	}
	if ok.Failed || ok.Reason != "" || ok.Sync == "-" || ok.Sync == "" {
		t.Errorf("completed row: %+v", ok)
	}
	// The open instance was restored from 2, no-claim: pinned.
	if rows[2].Badges != "retained,pinned,restored from" || rows[1].Badges != "retained" {
		t.Errorf("badges: 3 %q, 2 %q", rows[1].Badges, rows[2].Badges)
	}

	// One duration bar per checkpoint, the failed one red; sync parts on
	// top of the completed ones.
	byID := map[string]bar{}
	for _, b := range duration {
		if b.Class == "bar ok" || b.Class == "bar failed" {
			byID[b.ID] = b
		}
	}
	if len(byID) != 4 || byID["4"].Class != "bar failed" || byID["4"].Fill != "rgb(192, 38, 45)" || byID["3"].Fill == byID["4"].Fill {
		t.Errorf("duration bars: %+v", duration)
	}
	for _, id := range []string{"1", "2", "3", "4"} {
		if byID[id].Height <= 0 {
			t.Errorf("duration bar of %s has height %v", id, byID[id].Height)
		}
	}
	// Full sizes grow with the state: 1 < 2 < 3.
	full := map[string]float64{}
	for _, b := range size {
		if b.Class == "bar full" {
			full[b.ID] = b.Height
		}
	}
	if len(full) != 3 || !(full["1"] < full["2"] && full["2"] < full["3"]) {
		t.Errorf("size bars: %+v", size)
	}

	// Checkpoint 3's state page, reached by its link in the history: the
	// per-state table and one heat-strip cell per key group, the hottest
	// the darkest and empty ones pale.
	var (
		states []stateRow
		cells  []heatCell
	)
	run("open checkpoint 3's state", func() error {
		return chromedp.Do(bctx, chromedp.Click(`tr.checkpoint[data-id="3"] a.state-link`),
			chromedp.WaitReady(`svg.heat`))
	})
	run("state table", func() error {
		states, err = chromedp.Run(bctx, chromedp.Evaluate[[]stateRow](`Array.from(document.querySelectorAll('tr.state')).map(r => ({
			state: r.dataset.state, entries: r.querySelectorAll('td')[3].innerText, bar: r.querySelector('.sharebar').getBoundingClientRect().width}))`))
		return err
	})
	run("heat strip", func() error {
		cells, err = chromedp.Run(bctx, chromedp.Evaluate[[]heatCell](`Array.from(document.querySelectorAll('svg.heat rect.cell')).map(r => ({
			kg: +r.dataset.kg, bytes: +r.dataset.bytes, fill: getComputedStyle(r).fill, w: r.getBBox().width}))`))
		return err
	})
	run("state screenshot", func() error { shot, err = chromedp.Run(bctx, chromedp.FullScreenshot(100)); return err })
	spath := filepath.Join(artifactDir(t), "webui-state.png")
	if err := os.WriteFile(spath, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", spath, len(shot))
	if len(states) != 1 || states[0].State != "v" || states[0].Entries != "1200" || states[0].Bar < 150 {
		t.Errorf("state table: %+v, want state v with 1200 entries and a full share bar", states)
	}
	if len(cells) != 128 {
		t.Fatalf("heat strip: %d cells, want 128", len(cells))
	}
	hot, empty := cells[0], heatCell{Bytes: -1}
	for _, c := range cells {
		if c.Width <= 0 {
			t.Fatalf("cell %d is not drawn: %+v", c.KG, c)
		}
		if c.Bytes > hot.Bytes {
			hot = c
		}
		if c.Bytes == 0 {
			empty = c
		}
	}
	for _, c := range cells {
		if c.Bytes > 0 && c.Bytes < hot.Bytes && green(t, c.Fill) <= green(t, hot.Fill) {
			t.Errorf("key group %d (%d bytes) is as dark as the hottest, %d (%d bytes): %s vs %s", c.KG, c.Bytes, hot.KG, hot.Bytes, c.Fill, hot.Fill)
		}
	}
	if empty.Bytes == 0 && green(t, empty.Fill) <= green(t, hot.Fill) {
		t.Errorf("an empty key group is drawn as dark as the hottest: %s", empty.Fill)
	}
}

type stateRow struct {
	State   string  `json:"state"`
	Entries string  `json:"entries"`
	Bar     float64 `json:"bar"`
}

type heatCell struct {
	KG    int     `json:"kg"`
	Bytes int64   `json:"bytes"`
	Fill  string  `json:"fill"`
	Width float64 `json:"w"`
}

// green is the green channel of a computed "rgb(r, g, b)": the heat
// colours darken by losing green.
func green(t *testing.T, fill string) int {
	t.Helper()
	var r, g, b int
	if _, err := fmt.Sscanf(fill, "rgb(%d, %d, %d)", &r, &g, &b); err != nil {
		t.Fatalf("fill %q: %v", fill, err)
	}
	return g
}

// barsJS lists the bars of a job's chart as the browser laid them out.
func barsJS(chart string) string {
	return `Array.from(document.querySelectorAll('svg[data-chart="` + chart + `"] rect')).map(r => ({
		id: r.dataset.id, cls: r.getAttribute('class'), h: r.getBBox().height, fill: getComputedStyle(r).fill}))`
}
