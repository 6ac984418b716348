package sandbox

import (
	"math"
	"strings"
	"testing"
)

// TestNumericValue: an integer's digits are int64; any other number text is kept whole as a
// Decimal, whose Number is what NumericValue returned before (int64 when integral and fitting,
// else float64, else the text), the value the judge compares.
func TestNumericValue(t *testing.T) {
	huge := "1" + strings.Repeat("0", 400)
	for _, c := range []struct {
		in        any
		want, num any
	}{
		{"15", int64(15), int64(15)},
		{[]byte("-9223372036854775808"), int64(math.MinInt64), int64(math.MinInt64)},
		{[]byte("12.50"), Decimal("12.50"), 12.5},
		{"7.00", Decimal("7.00"), int64(7)},
		{"18446744073709551615", Decimal("18446744073709551615"), float64(18446744073709551615)},
		{"99999999999999999999999999999999999.123456789", Decimal("99999999999999999999999999999999999.123456789"), 1e35},
		{huge, Decimal(huge), huge},
		{"-Infinity", Decimal("-Infinity"), math.Inf(-1)},
	} {
		got := NumericValue(c.in)
		if got != c.want {
			t.Errorf("NumericValue(%q) = %#v, want %#v", c.in, got, c.want)
			continue
		}
		if d, ok := got.(Decimal); ok && d.Number() != c.num {
			t.Errorf("Decimal(%q).Number() = %#v, want %#v", d, d.Number(), c.num)
		}
	}
	if n, ok := Decimal("NaN").Number().(float64); !ok || !math.IsNaN(n) {
		t.Errorf("Decimal(NaN).Number() = %#v", Decimal("NaN").Number())
	}
	if n, err := ValueInt(Decimal("7.00")); n != 7 || err != nil {
		t.Errorf("ValueInt(7.00) = %d, %v", n, err)
	}
	if s := ValueText(Decimal("12.50")); s != "12.50" {
		t.Errorf("ValueText(12.50) = %q", s)
	}
}

// TestSizeCountsDecimal: a Decimal's digits count towards a result's size, so MaxResultBytes
// bounds a result of numerics of 100,000 digits (PostgreSQL's numeric holds 131,072 before the
// point), which a float64 held in 8 bytes before.
func TestSizeCountsDecimal(t *testing.T) {
	d := Decimal(strings.Repeat("9", 100000))
	if n := Size(&Result{Rows: [][]any{{d}}}); n < int64(len(d)) {
		t.Errorf("Size of a row of a %d-digit Decimal = %d", len(d), n)
	}
}
