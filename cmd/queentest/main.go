// Command queentest runs the in-memory Queen broker of package queentest as
// a standalone program, so that a service in any language can use it during
// development:
//
//	queentest [-addr 127.0.0.1:6632] [-profile 2.x|0.15.1] [-pidfile PATH] [-v]
//	queentest [-addr ...] probe [URL]
//
// It serves the Queen 2.x HTTP API, or with -profile 0.15.1 that of a Queen
// 0.15.1 broker (see queentest.Broker015), until interrupted (SIGINT or
// SIGTERM). Everything is kept in memory and lost on exit.
//
// -pidfile PATH writes the broker's process id to PATH (replacing the
// file) once it listens, before it prints its address, and removes the
// file when it stops. Under `go run` the process that a script started is
// the Go tool, and stopping it leaves the broker running: stop the pid in
// the file instead (or build the binary and run that).
//
// The environment variables QUEENTEST_ADDR and QUEENTEST_PROFILE give the
// defaults of -addr and -profile, so that a container of the image built by
// the repository's Dockerfile is configured without a command line; a flag
// wins over its variable.
//
// "queentest probe" is the health check of that image, which has no shell
// or curl: it sends GET URL/health once (URL defaults to the -addr address,
// an unspecified host such as 0.0.0.0 read as 127.0.0.1) and exits 0 when
// the answer is 200, 1 otherwise (the reason on stderr), within 5 seconds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/queen-go/queen/queentest"
)

// Environment variables that give the flags' defaults.
const (
	addrEnv    = "QUEENTEST_ADDR"
	profileEnv = "QUEENTEST_PROFILE"
)

// probeTimeout bounds one probe.
const probeTimeout = 5 * time.Second

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command with its arguments, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("queentest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr(addrEnv, "127.0.0.1:6632"), "listen address (default from "+addrEnv+")")
	verbose := fs.Bool("v", false, "log every request to stderr")
	pidfile := fs.String("pidfile", "", "write the broker's process id to this file while it runs")
	profileName := fs.String("profile", envOr(profileEnv, string(queentest.Profile2x)),
		"broker generation to imitate: 2.x or 0.15.1 (default from "+profileEnv+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if rest := fs.Args(); len(rest) > 0 {
		if rest[0] != "probe" || len(rest) > 2 {
			fmt.Fprintf(stderr, "queentest: unexpected arguments %q (the only command is: probe [URL])\n", rest)
			return 2
		}
		target := ""
		if len(rest) == 2 {
			target = rest[1]
		}
		return probe(target, *addr, stderr)
	}
	profile, err := queentest.ParseProfile(*profileName)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Signals are caught before the address is announced, so that a
	// supervisor that reads it and stops us at once gets a clean stop.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := queentest.Listen(queentest.WithAddr(*addr), queentest.WithLogger(logger), queentest.WithProfile(profile))
	if err != nil {
		fmt.Fprintln(stderr, "queentest:", err)
		return 1
	}
	if *pidfile != "" {
		if err := writePidfile(*pidfile); err != nil {
			srv.Close()
			fmt.Fprintln(stderr, "queentest:", err)
			return 1
		}
		defer os.Remove(*pidfile)
	}
	api := queentest.Version
	if profile == queentest.Profile015 {
		api = string(queentest.Profile015)
	}
	fmt.Fprintf(stdout, "queentest broker (Queen %s API, in memory) listening on %s\n", api, srv.URL)

	<-ctx.Done()
	srv.Close()
	fmt.Fprintln(stdout, "queentest broker stopped")
	return 0
}

// writePidfile writes the process id to path, through a file renamed into
// place so that a reader never sees it half written.
func writePidfile(path string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("pidfile: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pidfile: %w", err)
	}
	return nil
}

// envOr returns the environment variable key, or def when it is unset or
// blank.
func envOr(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}

// probe sends GET <base>/health once; base is target, or the broker's own
// address addr when target is empty. It returns 0 on a 200 answer.
func probe(target, addr string, stderr io.Writer) int {
	base, err := probeBase(target, addr)
	if err != nil {
		fmt.Fprintln(stderr, "queentest probe:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		fmt.Fprintln(stderr, "queentest probe:", err)
		return 2
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "queentest probe:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "queentest probe: GET %s/health = %d: %s\n", base, resp.StatusCode, strings.TrimSpace(string(body)))
		return 1
	}
	return 0
}

// probeBase is the base URL a probe targets: target without its trailing
// slash, or http://addr with an unspecified or empty host read as
// 127.0.0.1.
func probeBase(target, addr string) (string, error) {
	if target != "" {
		if !strings.HasPrefix(target, "http://") && !strings.HasPrefix(target, "https://") {
			return "", fmt.Errorf("URL %q: want http:// or https://", target)
		}
		return strings.TrimRight(target, "/"), nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", addr, err)
	}
	if port == "0" {
		return "", errors.New("address " + addr + " has no fixed port to probe; give a URL")
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
