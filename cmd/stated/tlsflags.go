package main

import (
	"crypto/tls"
	"os"

	"github.com/spf13/pflag"

	"github.com/statedhq/stated/api/client"
)

// clientTLSFlags are the TLS settings of a command that connects to a
// daemon's TCP API served with --tls-cert (and --tls-client-ca).
type clientTLSFlags struct {
	ca, cert, key string
}

func addClientTLSFlags(fl *pflag.FlagSet, f *clientTLSFlags) {
	fl.StringVar(&f.ca, "tls-ca", "", "PEM bundle of the authorities that verify an external daemon's TLS certificate; any --tls-* flag turns TLS on (or STATED_TLS_CA)")
	fl.StringVar(&f.cert, "tls-cert", "", "PEM client certificate, for a daemon that requires one (--tls-client-ca) (or STATED_TLS_CERT)")
	fl.StringVar(&f.key, "tls-key", "", "PEM private key of --tls-cert (or STATED_TLS_KEY)")
}

// config returns the TLS configuration the flags (or their environment
// variables) ask for; nil when none is set.
func (f clientTLSFlags) config() (*tls.Config, error) {
	for _, v := range []struct {
		p   *string
		env string
	}{{&f.ca, "STATED_TLS_CA"}, {&f.cert, "STATED_TLS_CERT"}, {&f.key, "STATED_TLS_KEY"}} {
		if *v.p == "" {
			*v.p = os.Getenv(v.env)
		}
	}
	if f.ca == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	return client.LoadTLS(f.ca, f.cert, f.key)
}
