// Command wordcount is a small stream task that keeps its state in stated:
// it counts words read from stdin in an aggregate state, remembers the last
// line each word was seen in, and takes a checkpoint every -every lines.
// Start the daemon first (stated serve), then:
//
//	printf 'a b a\nb c\n' | go run ./examples/wordcount -socket ./stated-data/stated.sock
//
// Run it again with -restore to continue from the last checkpoint.
package main
