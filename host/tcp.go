package host

import (
	"crypto/tls"
	"net"
	"strings"

	"github.com/statedhq/stated/internal/tlsconf"
)

// validateTCP checks the settings of the TCP API: who may call it, and
// that its token never crosses a network in the clear unless the operator
// said so.
func validateTCP(o *Options, bad func(field, format string, args ...any)) {
	tlsOn := o.TLSCert != "" || o.TLSKey != ""
	if (o.TLSCert == "") != (o.TLSKey == "") {
		bad("TLSCert", "%s and %s go together: set both or neither", ref("TLSCert"), ref("TLSKey"))
	}
	if o.TLSClientCA != "" && !tlsOn {
		bad("TLSClientCA", "%s needs %s and %s: client certificates are only asked for over TLS", ref("TLSClientCA"), ref("TLSCert"), ref("TLSKey"))
	}
	if o.Listen == "" {
		if tlsOn || o.TLSClientCA != "" {
			bad("TLSCert", "%s is set without %s: TLS protects the TCP API only", ref("TLSCert"), ref("Listen"))
		}
		return
	}
	if o.Token == "" && o.TLSClientCA == "" {
		bad("Listen", "%s needs %s or %s: TCP clients are not protected by the socket's file mode", ref("Listen"), ref("Token"), ref("TLSClientCA"))
	}
	if !tlsOn && o.Token != "" && !o.AllowPlaintextToken && !loopback(o.Listen) {
		bad("Listen", "%s %q is not a loopback address and has no TLS: its %s would cross the network in the clear; set %s and %s, or %s to accept that",
			ref("Listen"), o.Listen, ref("Token"), ref("TLSCert"), ref("TLSKey"), ref("AllowPlaintextToken"))
	}
}

// loopback reports whether a listen address only accepts connections from
// this host: "localhost" or a loopback IP. An empty host listens on every
// interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tcpTLS loads the TLS configuration of the TCP API (nil: none).
func tcpTLS(o Options) (*tls.Config, error) {
	if o.Listen == "" || o.TLSCert == "" {
		return nil, nil
	}
	c, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: o.TLSCert, KeyFile: o.TLSKey, ClientCAFile: o.TLSClientCA})
	if err != nil {
		return nil, optionError("TLSCert", "%s: %v", ref("TLSCert"), err)
	}
	return c, nil
}
