// Package plural writes counts of things in English: "1 episode", "2 episodes".
package plural

import "strconv"

// Integer is the count types Noun and Count take.
type Integer interface {
	~int | ~int32 | ~int64
}

// Noun is noun when n is 1, else noun+"s" (nouns with a regular plural only).
func Noun[N Integer](n N, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

// Count is n and Noun(n, noun): Count(1, "task") is "1 task", Count(0, "task") "0 tasks".
func Count[N Integer](n N, noun string) string {
	return strconv.FormatInt(int64(n), 10) + " " + Noun(n, noun)
}
