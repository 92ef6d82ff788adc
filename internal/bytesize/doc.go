// Package bytesize formats byte counts for people: the one rendering the
// CLI's tables and the benchmark tool's reports share.
package bytesize
