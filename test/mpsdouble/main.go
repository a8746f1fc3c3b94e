// Command mpsdouble stands in for NVIDIA's MPS tools on machines without a
// GPU: installed as nvidia-cuda-mps-control it is the control daemon (-d,
// -f) and its client (commands on stdin, as the real tool takes them);
// installed as nvidia-smi it accepts the compute-mode change the daemon
// template makes. The daemon listens on a socket in CUDA_MPS_PIPE_DIRECTORY
// and logs every start and command to CUDA_MPS_LOG_DIRECTORY/control.log,
// so tests pin the exact command sequence the template sends. The wire
// protocol between the double's client and daemon is its own: the real one
// is private to NVIDIA, and gpufrac only ever drives MPS through the tool.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	switch name := filepath.Base(os.Args[0]); name {
	case "nvidia-smi":
		os.Exit(smi(os.Args[1:]))
	default:
		os.Exit(control(os.Args[1:]))
	}
}

func logLine(format string, args ...any) {
	dir := os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if dir == "" {
		dir = "/var/log/nvidia-mps"
	}
	f, err := os.OpenFile(filepath.Join(dir, "control.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpsdouble:", err)
		return
	}
	defer func() { _ = f.Close() }()
	_, _ = fmt.Fprintf(f, "[%s] %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func smi(args []string) int {
	logLine("nvidia-smi %s", strings.Join(args, " "))
	return 0
}

func socketPath() string {
	dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" {
		dir = "/tmp/nvidia-mps"
	}
	return filepath.Join(dir, "control.sock")
}

func control(args []string) int {
	if len(args) > 0 && (args[0] == "-d" || args[0] == "-f") {
		return daemon(args)
	}
	switch {
	case len(args) == 1 && args[0] == "-q":
		return v3Command("quit")
	case len(args) > 0 && (args[0] == "server" || args[0] == "namespace"):
		// MPS v3's module-verb CLI: the command is the arguments.
		return v3Command(strings.Join(args, " "))
	case len(args) > 0:
		fmt.Fprintf(os.Stderr, "mpsdouble: unknown option %s\n", args[0])
		return 2
	}
	// Client: one command per stdin line, as `echo cmd | nvidia-cuda-mps-control`.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd := strings.TrimSpace(sc.Text())
		if cmd == "" {
			continue
		}
		reply, err := send(cmd)
		if err != nil {
			fmt.Fprintln(os.Stderr, "Cannot find MPS control daemon process")
			return 1
		}
		if reply != "" {
			fmt.Println(reply)
		}
	}
	return 0
}

// v3Command sends one module-verb command; like the real tool it fails
// when the daemon refuses it.
func v3Command(cmd string) int {
	reply, err := send(cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Cannot find MPS control daemon process")
		return 1
	}
	if strings.HasPrefix(reply, "ERROR") {
		fmt.Fprintln(os.Stderr, reply)
		return 1
	}
	if reply != "" {
		fmt.Println(reply)
	}
	return 0
}

func send(cmd string) (string, error) {
	conn, err := net.DialTimeout("unix", socketPath(), time.Second)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	if _, err := fmt.Fprintln(conn, cmd); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(reply), err
}

func daemon(args []string) int {
	mode := strings.Join(args, " ")
	if args[0] == "-d" {
		// The real -d forks into the background; the double stays in the
		// foreground, which is all a container or test needs.
		mode += " (foreground in the double)"
	}
	v3 := &v3State{namespaces: map[string]string{}}
	for i, a := range args {
		if a == "-a" && i+1 < len(args) {
			if err := v3.load(args[i+1]); err != nil {
				logLine("start failed: %v", err)
				fmt.Fprintln(os.Stderr, "mpsdouble:", err)
				return 1
			}
		}
	}
	path := socketPath()
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		logLine("start failed: %v", err)
		fmt.Fprintln(os.Stderr, "mpsdouble:", err)
		return 1
	}
	logLine("start %s gpu=%s", mode, os.Getenv("CUDA_VISIBLE_DEVICES"))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	quit := make(chan struct{})
	var quitOnce sync.Once
	// Per device, as the real daemon keeps it; nothing is translated
	// between UUIDs and ordinals, as NVIDIA documents.
	pinned := map[string]string{}
	go func() {
		select {
		case <-stop:
			logLine("signal")
		case <-quit:
		}
		_ = lis.Close()
	}()
	for {
		conn, err := lis.Accept()
		if err != nil {
			logLine("exit")
			return 0
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		cmd := strings.TrimSpace(line)
		logLine("command: %s", cmd)
		reply := ""
		fields := strings.Fields(cmd)
		switch {
		case cmd == "get_server_list":
		case cmd == "get_default_active_thread_percentage":
			reply = "100.0"
		case len(fields) == 2 && fields[0] == "get_default_device_pinned_mem_limit":
			reply = pinned[fields[1]]
		case len(fields) == 3 && fields[0] == "set_default_device_pinned_mem_limit":
			pinned[fields[1]] = fields[2]
		case cmd == "quit":
			quitOnce.Do(func() { close(quit) })
		case strings.HasPrefix(cmd, "set_default_active_thread_percentage "),
			strings.HasPrefix(cmd, "set_device_pinned_mem_limit "):
		case fields[0] == "server" || fields[0] == "namespace":
			reply = v3.handle(fields)
		default:
			reply = "unknown command " + cmd
		}
		_, _ = fmt.Fprintln(conn, reply)
		_ = conn.Close()
	}
}
