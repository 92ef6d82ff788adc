// Command stated is the state daemon and its tools. Each subcommand lives in
// its own file and adds itself to rootCmd in an init function.
package main
