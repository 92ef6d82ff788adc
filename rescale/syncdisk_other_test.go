//go:build !unix

package rescale_test

func syncDisks() {}
