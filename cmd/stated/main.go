package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:   "stated",
	Short: "stated is a standalone state daemon for stream processors",
	Long: `stated runs next to the task processes of a host and holds their keyed state:
heap, file and LSM (Pebble) backends, incremental checkpoints, savepoints and
rescaling, behind a local gRPC API. Run "stated serve" to start the daemon.`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "stated:", err)
		os.Exit(1)
	}
}
