package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/storeurl"
)

// s3Flags are the S3 settings of every command that opens the checkpoint
// store (serve, checkpoints, verify, gc). Each flag also reads
// STATED_<FLAG> (STATED_S3_ENDPOINT, ...). What they leave unset comes
// from the store URL's query, then from AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, then from the AWS SDK's
// default chain (shared config files, instance roles); see storeurl.
type s3Flags struct {
	endpoint        string
	region          string
	pathStyle       optBool
	accessKeyID     string
	secretAccessKey string
	// requestsPerSecond and burst pace each store's requests (0: no
	// limit).
	requestsPerSecond float64
	burst             int
}

// s3FlagNames are the flags addS3Flags adds.
var s3FlagNames = []string{"s3-endpoint", "s3-region", "s3-path-style", "s3-access-key-id", "s3-secret-access-key",
	"s3-requests-per-second", "s3-request-burst"}

func addS3Flags(fs *pflag.FlagSet, f *s3Flags) {
	fs.StringVar(&f.endpoint, "s3-endpoint", "", "S3 service URL of s3:// stores, e.g. http://127.0.0.1:7070 for MinIO or versitygw (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
	fs.StringVar(&f.region, "s3-region", "", "S3 signing region (default $AWS_REGION, $AWS_DEFAULT_REGION)")
	fs.Var(&f.pathStyle, "s3-path-style", "S3 path-style addressing (http://host/bucket/key); default on with an endpoint, off for AWS; =false forces virtual-host style")
	fs.Lookup("s3-path-style").NoOptDefVal = "true"
	fs.StringVar(&f.accessKeyID, "s3-access-key-id", "", "S3 access key id, with --s3-secret-access-key (default $AWS_ACCESS_KEY_ID, else the AWS SDK's default chain)")
	fs.StringVar(&f.secretAccessKey, "s3-secret-access-key", "", "S3 secret access key; prefer $STATED_S3_SECRET_ACCESS_KEY or $AWS_SECRET_ACCESS_KEY: a flag's value shows in the process list (default $AWS_SECRET_ACCESS_KEY)")
	fs.Float64Var(&f.requestsPerSecond, "s3-requests-per-second", 0, "client-side limit of each S3 store's HTTP requests per second, retries included (a token bucket; requests wait for a token rather than draw SlowDown answers); 0: no limit")
	fs.IntVar(&f.burst, "s3-request-burst", 0, "requests an S3 store may send at once under --s3-requests-per-second (default: the rate rounded up)")
}

// validate reports every problem of the S3 flags (node's rules).
func (f *s3Flags) validate() error { return flagErrors(host.ValidateS3(f.options())) }

// options are the storeurl options the flags give.
func (f *s3Flags) options() storeurl.Options {
	o := storeurl.Options{Endpoint: f.endpoint, Region: f.region, AccessKeyID: f.accessKeyID, SecretAccessKey: f.secretAccessKey}
	o.S3.RequestsPerSecond, o.S3.Burst = f.requestsPerSecond, f.burst
	if f.pathStyle.set {
		o.Addressing = storeurl.AddressingVirtual
		if f.pathStyle.v {
			o.Addressing = storeurl.AddressingPath
		}
	}
	return o
}

// optBool is a boolean flag that knows whether it was set.
type optBool struct{ v, set bool }

func (b *optBool) String() string {
	if !b.set {
		return ""
	}
	return strconv.FormatBool(b.v)
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean", s)
	}
	b.v, b.set = v, true
	return nil
}

func (b *optBool) Type() string { return "bool" }

// cliStore is the checkpoint store of a CLI command: --data-dir,
// --checkpoint-store (or its deprecated alias --store) and the S3 flags,
// resolved as "stated serve" resolves them.
type cliStore struct {
	url string
	s3  s3Flags
	// changelogURL is the daemon's --changelog-store ("": the checkpoint
	// store holds the changelog's segments).
	changelogURL string
	// dataDir is --data-dir: the store defaults to its checkpoints
	// directory, as the daemon's does.
	dataDir string
	// explicit says the store was named (--checkpoint-store, --store or
	// STATED_CHECKPOINT_STORE) rather than derived from the data dir.
	explicit bool
	// legacy is the deprecated --store.
	legacy string
	// recorded: the store is the one the daemon serving from the data
	// dir recorded there (node.StoreFile), not its default.
	recorded bool
}

// storeFlags adds --data-dir, --checkpoint-store, the deprecated --store,
// --changelog-store and the S3 flags to cmd. Each reads STATED_<FLAG> when
// not given, as "stated serve" does, so that a command run with the
// daemon's environment reads the daemon's store.
func storeFlags(cmd *cobra.Command, dst *cliStore) {
	fl := cmd.Flags()
	fl.StringVar(&dst.dataDir, "data-dir", host.DefaultDataDir, "the daemon's data directory: the checkpoint store defaults to <data-dir>/checkpoints (env STATED_DATA_DIR)")
	fl.StringVar(&dst.url, "checkpoint-store", "", "checkpoint storage URL: file:///dir, a directory or s3://bucket/prefix (env STATED_CHECKPOINT_STORE; default file://<data-dir>/checkpoints)")
	fl.StringVar(&dst.legacy, "store", "", "deprecated: use --checkpoint-store")
	_ = fl.MarkDeprecated("store", "use --checkpoint-store (the flag of \"stated serve\")")
	fl.StringVar(&dst.changelogURL, "changelog-store", "",
		"the daemon's --changelog-store, if it has one: where the changelog's segments are (env STATED_CHANGELOG_STORE)")
	addS3Flags(fl, &dst.s3)
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := dst.resolve(cmd.Flags()); err != nil {
			return err
		}
		if err := dst.s3.validate(); err != nil {
			return err
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

// storeFlagNames are the flags storeFlags reads from the environment.
var storeFlagNames = append([]string{"data-dir", "checkpoint-store", "changelog-store"}, s3FlagNames...)

// resolve fills the flags not given from the environment and derives the
// store URL: --checkpoint-store, else --store, else
// file://<absolute data dir>/checkpoints.
func (st *cliStore) resolve(fs *pflag.FlagSet) error {
	legacySet := fs.Changed("store")
	sub := pflag.NewFlagSet("store", pflag.ContinueOnError)
	for _, n := range storeFlagNames {
		// The deprecated flag on the command line wins over the
		// environment, as any flag does.
		if n == "checkpoint-store" && legacySet {
			continue
		}
		sub.AddFlag(fs.Lookup(n))
	}
	if err := flagsFromEnv(sub); err != nil {
		return err
	}
	storeSet := fs.Changed("checkpoint-store")
	switch {
	case storeSet && legacySet && st.legacy != st.url:
		return fmt.Errorf("--store %q and --checkpoint-store %q disagree: --store is the old name of --checkpoint-store, give only that", st.legacy, st.url)
	case legacySet:
		st.url = st.legacy
	}
	st.explicit = storeSet || legacySet
	if st.dataDir == "" {
		return errors.New("--data-dir is empty")
	}
	if st.url == "" {
		// A node whose store is elsewhere (a cluster node's shared one)
		// recorded it in its data dir.
		rec, err := host.RecordedStore(st.dataDir)
		if err != nil {
			return err
		}
		st.url, st.recorded = rec, rec != ""
		if rec == "" {
			st.url = host.DefaultCheckpointStore(st.dataDir)
		}
	}
	if err := refuseMemStore("checkpoint-store", st.url); err != nil {
		return err
	}
	return refuseMemStore("changelog-store", st.changelogURL)
}

// announce says on w which store the command reads, so that an operator
// who reads another store than the daemon's sees it.
func (st cliStore) announce(w io.Writer) {
	how := "from --data-dir " + st.dataDir
	switch {
	case st.recorded:
		how = "recorded in " + filepath.Join(st.dataDir, host.StoreFile) + " by the daemon"
	case st.explicit:
		how = "named by --checkpoint-store or STATED_CHECKPOINT_STORE"
	}
	fmt.Fprintf(w, "reading checkpoint store %s (%s)\n", redactStoreURL(st.url), how)
	if st.changelogURL != "" {
		fmt.Fprintf(w, "reading changelog store %s\n", redactStoreURL(st.changelogURL))
	}
}

// redactStoreURL drops a URL's query, which may carry settings an
// operator does not want in a log.
func redactStoreURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?..."
	}
	return u
}

// openCLIStore opens the checkpoint store for a CLI command. A local
// directory must exist and is opened without creating anything or clearing
// the temporary files of a daemon running on it; writable says whether
// deletes are allowed (stated gc). Nothing here ever writes an object, and
// nothing is cached: the CLI reads the store itself.
func openCLIStore(ctx context.Context, st cliStore, writable bool) (tiered.Store, error) {
	return openCLIURL(ctx, st.url, st.s3, writable)
}

// openCLICatalog opens the store and the catalog on it, as the commands
// that read or change the history do; closeAll closes both. The catalog's
// options that steer deletes do not matter to these commands: Open only
// reads, and each command's own call says what it changes.
func openCLICatalog(ctx context.Context, st cliStore, writable bool) (c *catalog.Catalog, closeAll func(), err error) {
	s, err := openCLIStore(ctx, st, writable)
	if err != nil {
		return nil, nil, err
	}
	c, err = catalog.Open(ctx, catalog.Options{Store: s})
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); s.Close() }, nil
}

// openCLILogStore opens the changelog store --changelog-store names; nil
// when it names none (the checkpoint store holds the segments).
func openCLILogStore(ctx context.Context, st cliStore, writable bool) (tiered.Store, error) {
	if st.changelogURL == "" {
		return nil, nil
	}
	s, err := openCLIURL(ctx, st.changelogURL, st.s3, writable)
	if err != nil {
		return nil, fmt.Errorf("changelog store: %w", err)
	}
	return s, nil
}

// cliStoreWrap, when set, wraps every store a CLI command opens (tests
// slow it down).
var cliStoreWrap func(tiered.Store) tiered.Store

func openCLIURL(ctx context.Context, url string, s3 s3Flags, writable bool) (tiered.Store, error) {
	s, err := openCLIURLUnwrapped(ctx, url, s3, writable)
	if err != nil || cliStoreWrap == nil {
		return s, err
	}
	return cliStoreWrap(s), nil
}

func openCLIURLUnwrapped(ctx context.Context, url string, s3 s3Flags, writable bool) (tiered.Store, error) {
	loc, err := storeurl.Parse(url)
	if err != nil {
		return nil, err
	}
	if loc.Scheme == "file" {
		s, err := localfs.OpenWith(loc.Path, localfs.Options{ReadOnly: !writable, MustExist: true})
		if err != nil {
			return nil, fmt.Errorf("checkpoint store %s: %w (give the daemon's --data-dir or --checkpoint-store, or set STATED_DATA_DIR or STATED_CHECKPOINT_STORE as for \"stated serve\")", loc.Path, err)
		}
		return s, nil
	}
	return storeurl.Open(ctx, url, cliS3Options(s3, os.Stderr))
}

// cliS3Options are the storeurl options of a CLI command: the S3 flags,
// with the SDK's own warnings written to w as structured log lines
// (component=aws) rather than in the SDK's format.
func cliS3Options(s3 s3Flags, w io.Writer) storeurl.Options {
	o := s3.options()
	o.S3.Logger = host.SDKLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})))
	return o
}

// cacheFlags are the tiered-cache options of "stated serve".
type cacheFlags struct {
	dir   string
	bytes string
}

// defaultCacheBytes is the default of --cache-bytes.
const defaultCacheBytes = "1GiB"

func addCacheFlags(fs *pflag.FlagSet, f *cacheFlags) {
	fs.StringVar(&f.dir, "cache-dir", "", "local cache of the checkpoint store: uploaded checkpoint files are kept there and restores read them from there (local recovery), checked against their CRC, falling back to the store; default <data-dir>/cache for s3:// stores, no cache for local ones")
	fs.StringVar(&f.bytes, "cache-bytes", defaultCacheBytes, "bound of the cache; least recently used files are evicted; 0 turns the cache off")
}

// refuseMemStore refuses a mem:// store URL given to flag. storeurl opens
// mem:// as a new, empty in-memory store for tests; a daemon on one would
// report checkpoints completed that vanish when the process exits, and a
// CLI command would read an empty store, so the CLI accepts only stores
// that outlive it (tests inject memory stores through node.Options.Store).
func refuseMemStore(flag, url string) error {
	if url == "" {
		return nil
	}
	loc, err := storeurl.Parse(url)
	if err != nil || loc.Scheme != "mem" {
		return nil // storeurl reports a bad URL where it is opened
	}
	return fmt.Errorf("--%s %s: an in-memory store is for tests only (its checkpoints vanish when the process exits); give file:///dir, a directory or s3://bucket/prefix", flag, url)
}
