// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Progress prints step names and, while a step runs, its elapsed time, so
// that nobody is left in front of a silent terminal during a long build. On
// a terminal the elapsed time is updated in place; elsewhere (CI logs, go
// test output) a line is printed every 30 seconds.
type Progress struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool
}

// NewProgress writes to w; a nil w discards everything.
func NewProgress(w io.Writer) *Progress {
	if w == nil {
		w = io.Discard
	}
	p := &Progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// Printf writes one message.
func (p *Progress) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.w, format, args...)
}

// Step prints the step's name and returns a function that ends it, printing
// how long it took (or that it failed).
func (p *Progress) Step(name string) func(err error) {
	start := time.Now()
	if p.tty {
		p.Printf("\033[1m==> %s\033[0m\n", name)
	} else {
		p.Printf("==> %s\n", name)
	}
	return func(err error) {
		if err != nil {
			p.Printf("    failed after %s: %v\n", round(time.Since(start)), err)
			return
		}
		p.Printf("    done in %s\n", round(time.Since(start)))
	}
}

// Run runs a command as a step. Its output is kept (the last 64 KiB) for the
// error; lines of `go build -v` and `go: downloading` are counted so the
// elapsed-time line can say what is happening.
func (p *Progress) Run(ctx context.Context, step, dir string, env []string, name string, args ...string) error {
	end := p.Step(step)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw

	var (
		mu                  sync.Mutex
		tail                bytes.Buffer
		compiled, downloads int
	)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			switch {
			case strings.HasPrefix(line, "go: downloading "):
				downloads++
			case line != "" && !strings.ContainsAny(line, " \t#:"):
				compiled++ // go build -v names each package it compiles
			default:
				tail.WriteString(line + "\n")
			}
			if tail.Len() > 64*1024 {
				tail.Next(tail.Len() - 64*1024)
			}
			mu.Unlock()
		}
	}()

	start := time.Now()
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		end(err)
		return fmt.Errorf("starting %s: %w", name, err)
	}
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		every := 30 * time.Second
		if p.tty {
			every = time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if p.tty {
					p.Printf("\r\033[K")
				}
				return
			case <-t.C:
				mu.Lock()
				msg := fmt.Sprintf("    %s elapsed, %d packages compiled", round(time.Since(start)), compiled)
				if downloads > 0 {
					msg += fmt.Sprintf(", %d modules downloaded", downloads)
				}
				mu.Unlock()
				if p.tty {
					p.Printf("\r\033[K%s", msg)
				} else {
					p.Printf("%s\n", msg)
				}
			}
		}
	}()
	err := cmd.Wait()
	_ = pw.Close()
	<-scanned
	close(stop)
	<-ticked
	if err != nil {
		mu.Lock()
		out := strings.TrimSpace(tail.String())
		mu.Unlock()
		err = fmt.Errorf("%s %s in %s: %w\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	end(err)
	return err
}

func round(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}
