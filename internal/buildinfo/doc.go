// Package buildinfo says which stated is running: the module version and
// the VCS revision the Go toolchain stamped into the binary. The CLI prints
// it ("stated version"), the node logs it at startup and exports it as the
// stated_build_info metric, so that an operator can tell which build
// wrote a log line or a metric.
package buildinfo
