// Command xcheck writes and reads the state that the Node client's
// conformance script (clients/node/conformance.js) cross-checks with the Go
// client: one client writes a checkpoint, the other restores it and checks
// every entry, so the two agree on key groups, encodings and restore.
//
//	xcheck write <socket> <job> <writer>   write the data set, checkpoint 1
//	xcheck read <socket> <job> <writer>    restore the job's latest, check it
//	xcheck bench <socket> <job> <keys>     the conformance script's --bench, in Go
//
// The data set (the same in conformance.js) is, for i in 0..49 and key
// "x<i>": value state "v" = "<writer>-<i>"; list "l" = ["<writer>", "<i>"];
// map "m" with user key "u" = "<writer>"; int64 sum "sum" = i+1; timer
// "t" at 1000+i; and the split operator list "ops" = ["<writer>"]. The
// instance is task (<job>, "op", 0) with parallelism 1 on the file backend.
package main
