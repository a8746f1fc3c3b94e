// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/gpufrac/gpufrac/internal/cli/status"
	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
)

// Map widths: piped, the map is 80 columns; on a terminal, the terminal's
// width up to maxMapWidth (wider, a bar's cell is too fine to read).
const (
	pipedMapWidth = 80
	maxMapWidth   = 120
)

// printMap writes `status -o map`: coloured straight to the terminal (the
// map escapes every name itself and prints no escape but its colours),
// plain through the safetext writer otherwise. With promURL it draws the
// used memory that Prometheus reports; when the query fails the map is
// drawn without, and says why.
func printMap(ctx context.Context, streams IOStreams, gpus []status.GPU, pools []fragmentation.Pool, promURL string) error {
	o := mapOptions(streams.rawOut, os.Getenv("NO_COLOR"))
	if promURL != "" {
		o.UsageFrom = promURL
		usage, err := queryUsage(ctx, promURL)
		if err != nil {
			o.UsageErr = err.Error()
		}
		o.Usage = usage
	}
	out := streams.Out
	if o.Colour {
		out = streams.rawOut
	}
	_, err := io.WriteString(out, status.Map(gpus, pools, o))
	return err
}

// mapOptions colours the map only on a terminal and only when NO_COLOR is
// unset or empty (https://no-color.org), and fits it to the terminal.
func mapOptions(out io.Writer, noColor string) status.MapOptions {
	o := status.MapOptions{Width: pipedMapWidth}
	f, ok := out.(interface{ Fd() uintptr })
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return o
	}
	o.Colour = noColor == ""
	if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
		o.Width = min(w, maxMapWidth)
	}
	return o
}
