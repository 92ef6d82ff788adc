// Package host assembles the stated process of a host in one place (a
// "node" of a cluster; named host so it is not mistaken for a raft
// member, cluster.Member, or for the Node.js client): the checkpoint store
// (with its meter and local cache), the backends' openers, the catalog,
// the daemon, the gRPC API on a Unix socket (and optionally TCP), the
// Prometheus registry with /metrics and /healthz, and the sweeps. Open
// builds it from Options; Shutdown stops it in reverse order and owns
// every goroutine it started. "stated serve" is flags -> Options -> Open
// -> signal -> Shutdown; tests use the same assembly with an injected
// store and their own listener. docs/host.md describes the order, the
// goroutines and the shutdown. In cluster mode it also hosts the catalog
// while the node leads (cataloghost.go) and carries changelog mode across
// the nodes (clusterlog.go; docs/cluster.md).
package host
