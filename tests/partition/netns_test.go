//go:build linux

package partition

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// nsPrefix starts the name of every namespace the suite creates, followed
// by the pid of the test process that owns it: a later run deletes the
// namespaces of an owner that died (see cleanStale).
const nsPrefix = "stated-part-"

// subnet is the private range the nodes' addresses are in. It exists only
// inside the suite's namespaces: the bridge lives in a namespace of its
// own with no uplink, and the node namespaces have no other interface
// than their veth end and loopback, so no packet leaves the machine and
// concurrent runs (one hub each) do not meet.
const subnet = "10.213.0"

// ip runs iproute2's ip with args.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// netnsUnavailable says why the suite cannot build namespaces here, or
// "" when it can.
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "it needs root (ip netns add, veth pairs, ip rule)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "iproute2's ip is not installed (apt-get install iproute2)"
	}
	name := fmt.Sprintf("%s%d-probe", nsPrefix, os.Getpid())
	if err := ip("netns", "add", name); err != nil {
		return "ip netns does not work here: " + err.Error()
	}
	defer func() { _ = ip("netns", "del", name) }()
	if err := ip("-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1"); err != nil {
		return "veth pairs do not work here: " + err.Error()
	}
	return ""
}

// cleanStale deletes the namespaces of earlier runs whose test process is
// gone (a run killed before its cleanup), after killing, by pid, the
// processes still in them (stated nodes of that run; they die with their
// parent, so normally there are none). Deleting a namespace deletes the
// veth ends in it, and with them their peers.
func cleanStale(t testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || ownerAlive(pid) {
			continue
		}
		if pids, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
			for _, f := range strings.Fields(string(pids)) {
				if p, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
		if err := ip("netns", "del", name); err != nil {
			t.Logf("stale namespace %s: %v", name, err)
		} else {
			t.Logf("deleted the stale namespace %s of a run that died", name)
		}
	}
}

// ownerAlive says whether pid is a live partition test process.
func ownerAlive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmd, []byte("partition"))
}

// network is the suite's namespaces: one per node, each with eth0 (a veth
// end) at subnet.(10+i), the other end in the hub namespace's bridge.
//
// Cuts:
//   - isolate: the node's link into the bridge goes down (a pulled
//     cable: nothing in or out);
//   - drop(from, to): a policy rule in to's namespace throws away every
//     packet from from's address as it arrives, silently (no ICMP, no
//     reset): from's packets to to are lost, to's packets to from are
//     not. TCP needs both directions, so a connection between the two
//     fails either way, but what to receives before its own answers are
//     lost it does act on: a one-way link failure.
type network struct {
	t   testing.TB
	id  string
	hub string
	ns  []string

	mu    sync.Mutex
	down  map[int]bool
	drops map[[2]int]bool
}

func newNetwork(t testing.TB, n int) *network {
	cleanStale(t)
	id := fmt.Sprintf("%s%d", nsPrefix, os.Getpid())
	nw := &network{t: t, id: id, hub: id + "-hub", down: map[int]bool{}, drops: map[[2]int]bool{}}
	t.Cleanup(nw.close)
	must := func(args ...string) {
		t.Helper()
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("netns", "add", nw.hub)
	must("-n", nw.hub, "link", "add", "br0", "type", "bridge")
	must("-n", nw.hub, "link", "set", "br0", "up")
	for i := range n {
		ns := fmt.Sprintf("%s-n%d", id, i)
		must("netns", "add", ns)
		nw.ns = append(nw.ns, ns)
		port := fmt.Sprintf("n%d", i)
		// Created in the hub, its peer straight in the node's namespace:
		// no interface of the suite ever exists in the root namespace.
		must("-n", nw.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		must("-n", nw.hub, "link", "set", port, "master", "br0", "up")
		must("-n", ns, "link", "set", "lo", "up")
		must("-n", ns, "addr", "add", nw.addr(i)+"/24", "dev", "eth0")
		must("-n", ns, "link", "set", "eth0", "up")
		// The local table's rule comes first by default, and it takes
		// every packet addressed to this node: move it behind the drop
		// rules (priority 10), so that they see arriving packets.
		must("-n", ns, "rule", "add", "pref", "32765", "table", "local")
		must("-n", ns, "rule", "del", "pref", "0")
	}
	return nw
}

// addr is node i's address.
func (nw *network) addr(i int) string { return fmt.Sprintf("%s.%d", subnet, 10+i) }

// isolate pulls node i's cable.
func (nw *network) isolate(i int) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if err := ip("-n", nw.hub, "link", "set", fmt.Sprintf("n%d", i), "down"); err != nil {
		return err
	}
	nw.down[i] = true
	return nil
}

// drop loses every packet from node from to node to.
func (nw *network) drop(from, to int) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.drops[[2]int{from, to}] {
		return nil
	}
	if err := ip("-n", nw.ns[to], "rule", "add", "pref", "10", "from", nw.addr(from), "blackhole"); err != nil {
		return err
	}
	nw.drops[[2]int{from, to}] = true
	return nil
}

// heal undoes every cut.
func (nw *network) heal() error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for i := range nw.down {
		if err := ip("-n", nw.hub, "link", "set", fmt.Sprintf("n%d", i), "up"); err != nil {
			return err
		}
		delete(nw.down, i)
	}
	for d := range nw.drops {
		if err := ip("-n", nw.ns[d[1]], "rule", "del", "pref", "10", "from", nw.addr(d[0]), "blackhole"); err != nil {
			return err
		}
		delete(nw.drops, d)
	}
	return nil
}

// close kills, by pid, whatever still runs in the namespaces (the nodes
// are stopped before; this is a safety net) and deletes them.
func (nw *network) close() {
	for _, ns := range append(append([]string{}, nw.ns...), nw.hub) {
		if pids, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, f := range strings.Fields(string(pids)) {
				if p, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
		if err := ip("netns", "del", ns); err != nil {
			nw.t.Logf("delete namespace: %v", err)
		}
	}
}
