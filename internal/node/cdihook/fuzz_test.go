package cdihook_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/node/cdihook"
)

// FuzzReadState: any stdin gives a state with a usable pid or an error.
func FuzzReadState(f *testing.F) {
	for _, seed := range []string{state, `{"ociVersion":"1.2.0","id":"x","status":"created"}`, `{"pid":-1}`, `{"pid":1e20}`, ``, `[`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := cdihook.ReadState(bytes.NewReader(data))
		if err == nil && st.Pid <= 0 {
			t.Fatalf("accepted a state without a pid: %+v", st)
		}
	})
}

// FuzzParseLimit: an accepted --gpu value round-trips and never has soft
// above hard.
func FuzzParseLimit(f *testing.F) {
	for _, seed := range []string{"GPU-1=1024:2048", "x=0:0", "=1:2", "a=2:1", "a=1:2:3", "a=18446744073709551615:18446744073709551615"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := cdihook.ParseLimit(s)
		if err != nil {
			return
		}
		if l.Soft > l.Hard || l.UUID == "" || strings.Contains(l.UUID, "=") {
			t.Fatalf("ParseLimit(%q) = %+v", s, l)
		}
		back, err := cdihook.ParseLimit(fmt.Sprintf("%s=%d:%d", l.UUID, l.Soft, l.Hard))
		if err != nil || back != l {
			t.Fatalf("round trip of %+v: %+v %v", l, back, err)
		}
	})
}
