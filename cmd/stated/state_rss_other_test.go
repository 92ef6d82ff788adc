//go:build !unix

package main

// peakRSSMiB is not measured here.
func peakRSSMiB() float64 { return 0 }
