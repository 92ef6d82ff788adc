package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/internal/buildinfo"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the VCS revision and the Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Read()
			fmt.Fprintln(cmd.OutOrStdout(), in.String())
			if in.Revision != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "revision %s modified %v\n", in.Revision, in.Modified)
			}
			return nil
		},
	}
}

func init() {
	rootCmd.AddCommand(newVersionCmd())
	// --version prints the same first line as "stated version".
	rootCmd.Version = buildinfo.Read().String()
	rootCmd.SetVersionTemplate("{{.Version}}\n")
}
