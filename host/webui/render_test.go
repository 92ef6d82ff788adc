package webui

import "testing"

func TestMSText(t *testing.T) {
	for v, want := range map[float64]string{0: "0.0 ms", 0.012: "12 µs", 3.25: "3.2 ms", 1500: "1.50 s", 90_000: "1m30s"} {
		if got := msText(v); got != want {
			t.Errorf("msText(%v) = %q, want %q", v, got, want)
		}
	}
}
