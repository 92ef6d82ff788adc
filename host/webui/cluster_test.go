package webui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/host/webui"
	"github.com/statedhq/stated/tiered/memstore"
)

// clusterPage starts three nodes of a cluster, each with its page, and
// returns the base URL of a follower's page, its id and the leader's.
func clusterPage(t *testing.T) (base, self, leader string) {
	t.Helper()
	base, self, leader, _ = clusterNodes(t)
	return base, self, leader
}

// clusterNodes is clusterPage with the nodes.
func clusterNodes(t *testing.T) (base, self, leader string, nodes []*host.Host) {
	t.Helper()
	store := memstore.New()
	var lns []net.Listener
	var peers []string
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		peers = append(peers, fmt.Sprintf("n%d=%s", i, ln.Addr()))
	}
	for i := range 3 {
		dir, err := os.MkdirTemp("", "webui")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		ln := lns[i]
		nd, err := host.Open(context.Background(), host.Options{DataDir: filepath.Join(dir, "d"), MetricsAddr: "127.0.0.1:0", NoSocket: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Store: store, NodeID: fmt.Sprintf("n%d", i), RaftAddr: ln.Addr().String(),
			RaftPeers: strings.Join(peers, ","), ClusterToken: "secret", TuneCluster: func(o *cluster.Options) {
				o.Listener = ln
				o.HeartbeatTimeout, o.ElectionTimeout = 150*time.Millisecond, 150*time.Millisecond
				o.LeaderLeaseTimeout, o.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.Cluster().WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	leader, _ = nodes[0].Cluster().Leader()
	for _, nd := range nodes {
		if !nd.Cluster().IsLeader() {
			return "http://" + nd.MetricsAddr().String(), nd.Cluster().ID(), leader, nodes
		}
	}
	t.Fatal("no follower")
	return "", "", "", nil
}

// TestClusterPageWithoutACatalog: with its peers gone, a node's page
// says that the catalog could not be read and why, and that the node
// refuses tasks, instead of "no checkpoint history".
func TestClusterPageWithoutACatalog(t *testing.T) {
	base, self, _, nodes := clusterNodes(t)
	for _, nd := range nodes {
		if nd.Cluster().ID() != self {
			_ = nd.Close()
		}
	}
	var st webui.State
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, body := get(t, base+"/ui/api/state", "")
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.Cluster != nil && st.Cluster.Problem != "" && len(st.Problems) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page of a node without a quorum: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(st.Problems[0], "the catalog could not be read") || !strings.Contains(st.Problems[0], "unreachable") ||
		!strings.Contains(st.Cluster.Problem, "no leader") {
		t.Fatalf("problems %q, cluster problem %q", st.Problems, st.Cluster.Problem)
	}
	if _, page := get(t, base+"/ui/", ""); !strings.Contains(page, "the catalog could not be read") || !strings.Contains(page, `class="cluster-problem"`) {
		t.Fatalf("the page does not say the catalog could not be read:\n%s", page)
	}
}

// TestClusterPanel: a cluster node's page and JSON show the cluster: this
// node and its role, the leader, and every member; a daemon alone's show
// none.
func TestClusterPanel(t *testing.T) {
	base, self, leader := clusterPage(t)
	code, body := get(t, base+"/ui/api/state", "")
	if code != 200 {
		t.Fatalf("state: %d %s", code, body)
	}
	var st webui.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	c := st.Cluster
	if c == nil || c.Node != self || c.Role != "follower" || c.Leader != leader || len(c.Members) != 3 || c.Problem != "" {
		t.Fatalf("cluster: %+v", c)
	}
	for _, m := range c.Members {
		if m.This != (m.ID == self) || m.Leader != (m.ID == leader) {
			t.Fatalf("member %+v", m)
		}
	}
	_, page := get(t, base+"/ui/", "")
	if !strings.Contains(page, `id="cluster"`) || !strings.Contains(page, `<b class="leader-id">`+leader+`</b>`) ||
		!strings.Contains(page, `<b class="node-role role-follower">follower</b>`) {
		t.Fatalf("the page has no cluster panel:\n%s", page)
	}
	_, alone := history(t, "")
	if _, body := get(t, alone+"/ui/api/state", ""); strings.Contains(body, `"cluster"`) {
		t.Fatal("a daemon alone shows a cluster")
	}
	if _, page := get(t, alone+"/ui/", ""); strings.Contains(page, `id="cluster"`) {
		t.Fatal("a daemon alone's page has a cluster panel")
	}
}

type memberRow struct {
	ID   string `json:"id"`
	Role string `json:"role"`
	This bool   `json:"this"`
	Bg   string `json:"bg"`
}

// TestClusterPanelInChromium: in headless Chromium the panel shows this
// node's role, the leader and a row per member, this node's row set
// apart.
func TestClusterPanelInChromium(t *testing.T) {
	exe := chromium(t)
	base, self, leader := clusterPage(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(`section#cluster`)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	role, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#cluster .node-role').innerText`))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#cluster .leader-id').innerText`))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[[]memberRow](`Array.from(document.querySelectorAll('#cluster tr.member')).map(r => ({
		id: r.dataset.member, role: r.querySelector('td.member-role').innerText, this: r.classList.contains('this'),
		bg: getComputedStyle(r.querySelector('td')).backgroundColor}))`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err == nil {
		path := filepath.Join(artifactDir(t), "webui-cluster.png")
		_ = os.WriteFile(path, shot, 0o644)
		t.Logf("screenshot: %s (%d bytes)", path, len(shot))
	}
	// The leadership may have moved since clusterPage looked (Chromium
	// takes seconds to start): the panel must agree with itself.
	if lead == "" || lead == "none known" || (role == "leader") != (lead == self) || len(rows) != 3 {
		t.Fatalf("panel: this node %s is %q, leader %q (was %s), rows %+v", self, role, lead, leader, rows)
	}
	var thisBg, otherBg string
	for _, r := range rows {
		if r.This != (r.ID == self) || (r.Role == "leader") != (r.ID == lead) {
			t.Fatalf("row %+v (this node %s, leader %s)", r, self, lead)
		}
		if r.This {
			thisBg = r.Bg
		} else {
			otherBg = r.Bg
		}
	}
	if thisBg == otherBg {
		t.Fatalf("this node's row has the others' background %s", thisBg)
	}
}
