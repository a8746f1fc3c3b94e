// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// On a terminal (a real pseudo-terminal here) the map takes the
// terminal's width and colours, unless NO_COLOR is set to anything but "".
func TestMapOptionsTerminal(t *testing.T) {
	tty := openPTY(t)
	for _, tc := range []struct {
		cols    uint16
		noColor string
		colour  bool
		width   int
	}{
		{60, "", true, 60},
		{60, "1", false, 60},
		{200, "", true, maxMapWidth},
		{80, "0", false, 80}, // any value, "0" included, turns colour off
	} {
		if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: tc.cols, Row: 24}); err != nil {
			t.Fatal(err)
		}
		if o := mapOptions(tty, tc.noColor); o.Colour != tc.colour || o.Width != tc.width {
			t.Errorf("%d columns, NO_COLOR=%q: %+v, want colour %v width %d", tc.cols, tc.noColor, o, tc.colour, tc.width)
		}
	}
}

// openPTY opens a pseudo-terminal pair and returns its terminal end.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	mustrun.Need(t, err == nil, fmt.Sprintf("a pseudo-terminal for the map's terminal test (/dev/ptmx: %v)", err))
	t.Cleanup(func() { _ = ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	return tty
}
