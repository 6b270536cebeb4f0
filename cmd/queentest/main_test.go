package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryServesAndStops builds the command, runs it on a free port with
// each profile and checks /health, then stops it with SIGTERM; an unknown
// profile is a usage error.
func TestBinaryServesAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := buildBinary(t, t.TempDir())
	for _, tc := range []struct {
		args        []string
		wantVersion string
		wantEngine  bool
	}{
		{nil, "2.2.0-queentest", true},
		{[]string{"-profile", "2.x"}, "2.2.0-queentest", true},
		{[]string{"-profile", "0.15.1"}, "1.0.0", false},
	} {
		t.Run(strings.Join(append([]string{"args"}, tc.args...), " "), func(t *testing.T) {
			runBinary(t, bin, tc.args, nil, tc.wantVersion, tc.wantEngine)
		})
	}
	t.Run("profile from QUEENTEST_PROFILE", func(t *testing.T) {
		runBinary(t, bin, nil, []string{"QUEENTEST_PROFILE=0.15.1"}, "1.0.0", false)
	})
	t.Run("flag wins over QUEENTEST_PROFILE", func(t *testing.T) {
		runBinary(t, bin, []string{"-profile", "2.x"}, []string{"QUEENTEST_PROFILE=0.15.1"}, "2.2.0-queentest", true)
	})
	t.Run("unknown profile", func(t *testing.T) {
		err := exec.Command(bin, "-addr", "127.0.0.1:0", "-profile", "1.9").Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("-profile 1.9: %v, want exit status 2", err)
		}
	})
}

func runBinary(t *testing.T, bin string, args, env []string, wantVersion string, wantEngine bool) {
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("no URL in %q", line)
	}
	url := strings.TrimSpace(line[i:])
	// The probe mode (the image's health check) agrees that it is up.
	if out, err := exec.Command(bin, "probe", url).CombinedOutput(); err != nil {
		t.Errorf("probe %s: %v: %s", url, err, out)
	}
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var health struct {
		Version string  `json:"version"`
		Engine  *string `json:"engine"`
	}
	err = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("health: %d %v", resp.StatusCode, err)
	}
	if health.Version != wantVersion || (health.Engine != nil) != wantEngine {
		t.Errorf("health version %q, engine present %v; want %q, %v", health.Version, health.Engine != nil, wantVersion, wantEngine)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, cmd, "did not stop on SIGTERM")
}

// buildBinary builds the command into dir and returns its path.
func buildBinary(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "queentest")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// awaitExit fails t unless cmd exits with status 0 within 10 s (a hang
// guard; hang names what did not happen).
func awaitExit(t *testing.T, cmd *exec.Cmd, hang string) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(hang)
	}
}

// TestPidfile: -pidfile names the broker's own process, written before the
// address is printed; stopping that pid stops the broker, and the file is
// removed.
func TestPidfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	pidfile := filepath.Join(dir, "queentest.pid")
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-pidfile", pidfile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("pidfile once the address is printed: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid != cmd.Process.Pid {
		t.Fatalf("pidfile holds %q, want %d", b, cmd.Process.Pid)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, cmd, "did not stop on SIGTERM to the pid in the file")
	if _, err := os.Stat(pidfile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pidfile after the stop: %v, want it removed", err)
	}
	// A pidfile that cannot be written: exit 1, nothing left listening.
	err = exec.Command(bin, "-addr", "127.0.0.1:0", "-pidfile", filepath.Join(dir, "no", "such", "dir", "pid")).Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("unwritable pidfile: %v, want exit status 1", err)
	}
}
