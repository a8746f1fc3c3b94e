// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/clientauth"
)

// TestWebhookServerCutsSlowClients: hostile clients of the admission
// server, over a real connection, each cut off by the server's own bounds
// (the timeouts here are short stand-ins for defaultWebhookTimeouts). A
// client trickles a byte every 20 ms; the server must end the exchange
// long before the client is done.
func TestWebhookServerCutsSlowClients(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	timeouts := webhookTimeouts{header: 200 * time.Millisecond, read: 400 * time.Millisecond, write: time.Second, idle: time.Second}
	srv, err := newWebhookServer(h, nil, timeouts, clientauth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		_ = srv.Close()
		<-served //nolint:errcheck // after Close, Serve returns ErrServerClosed
	}()

	const body = 200
	for _, tc := range []struct {
		name      string
		head      string // sent at once
		trickle   string // then a byte every 20 ms
		wantReply string // "" when the server only closes
	}{
		{"headers that never end", "POST /validate-resources HTTP/1.1\r\nHost: x\r\n", strings.Repeat("a", body), ""},
		{"a body that trickles", "POST /validate-resources HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", strings.Repeat("{", body), "400 Bad Request"},
		{"headers over 64 KiB", "POST /validate-resources HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 200<<10) + "\r\n\r\n", "", "431 Request Header Fields Too Large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			closed := make(chan []byte, 1)
			go func() {
				reply, _ := io.ReadAll(conn)
				closed <- reply
			}()
			_, _ = conn.Write([]byte(tc.head))
			sent := 0
			var reply []byte
		loop:
			for ; sent < len(tc.trickle); sent++ {
				select {
				case reply = <-closed:
					break loop
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := conn.Write([]byte{tc.trickle[sent]}); err != nil {
					reply = <-closed
					break
				}
			}
			if reply == nil {
				select {
				case reply = <-closed:
				case <-time.After(5 * time.Second):
					t.Fatalf("the server still holds the connection after the client sent everything (%d bytes trickled)", sent)
				}
			}
			if len(tc.trickle) > 0 && sent >= len(tc.trickle) {
				t.Errorf("the server let the client trickle all %d bytes", sent)
			}
			if tc.wantReply == "" && bytes.Contains(reply, []byte("200 OK")) || tc.wantReply != "" && !bytes.Contains(reply, []byte(tc.wantReply)) {
				t.Errorf("reply %q, want %q", firstLine(reply), tc.wantReply)
			}
		})
	}
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	return string(line)
}
