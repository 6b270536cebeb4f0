package queencontainer_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/queen-go/queen/queencontainer"
)

// TestStartWithoutDockerFailsFast pins the promise the integration suite
// relies on: with no engine, Start answers ErrNoDocker within the probe
// timeout instead of hanging.
func TestStartWithoutDockerFailsFast(t *testing.T) {
	probe := 2 * time.Second
	if err := queencontainer.DockerAvailable(context.Background()); err == nil {
		t.Skip("a Docker engine answers here; this test is about machines without one")
	}
	begin := time.Now()
	c, err := queencontainer.Start(context.Background(), queencontainer.WithProbeTimeout(probe))
	took := time.Since(begin)
	if c != nil {
		t.Errorf("Start returned a container without Docker: %+v", c)
	}
	if !errors.Is(err, queencontainer.ErrNoDocker) {
		t.Fatalf("Start error = %v, want one matching ErrNoDocker", err)
	}
	// The margin tells a bounded probe from a hang; a loaded machine may
	// add seconds to the probe's 2 s.
	if took > 15*probe {
		t.Errorf("Start took %v without Docker, want about the probe timeout %v, not a hang", took, probe)
	}
}

func TestImageFromEnv(t *testing.T) {
	t.Setenv(queencontainer.ImageEnv, "")
	if got := queencontainer.ImageFromEnv(); got != queencontainer.DefaultImage {
		t.Errorf("ImageFromEnv() with %s unset = %q, want %q", queencontainer.ImageEnv, got, queencontainer.DefaultImage)
	}
	t.Setenv(queencontainer.ImageEnv, " example.com/queen:test ")
	if got := queencontainer.ImageFromEnv(); got != "example.com/queen:test" {
		t.Errorf("ImageFromEnv() = %q, want %q", got, "example.com/queen:test")
	}
}

// TestImageNoneTurnsContainersOff: QUEEN_IMAGE=none (in any case) means no
// container: Start fails with ErrDisabled before it asks any engine (with
// an engine here it would otherwise try to pull an image named "none" and
// fail with ErrNoImage; without one, with ErrNoDocker), and Run skips its
// test instead of failing it. A later WithImage wins over the environment,
// as for any other image.
func TestImageNoneTurnsContainersOff(t *testing.T) {
	for _, v := range []string{"none", " NONE ", "None"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv(queencontainer.ImageEnv, v)
			c, err := queencontainer.Start(context.Background(), queencontainer.FromEnv())
			if c != nil || !errors.Is(err, queencontainer.ErrDisabled) {
				t.Fatalf("Start with %s=%q = %v, %v; want ErrDisabled", queencontainer.ImageEnv, v, c, err)
			}
			if errors.Is(err, queencontainer.ErrNoDocker) || errors.Is(err, queencontainer.ErrNoImage) {
				t.Fatalf("Start with %s=%q asked an engine: %v", queencontainer.ImageEnv, v, err)
			}
			tb := runTB(t)
			if tb.how != "skip" || !strings.Contains(tb.why, queencontainer.ImageEnv+"=none") {
				t.Errorf("Run with %s=%q: %s (%s), want a skip naming %s=none", queencontainer.ImageEnv, v, tb.how, tb.why, queencontainer.ImageEnv)
			}
		})
	}
	t.Run("WithImage", func(t *testing.T) {
		t.Setenv(queencontainer.ImageEnv, "")
		_, err := queencontainer.Start(context.Background(), queencontainer.WithImage(queencontainer.ImageNone))
		if !errors.Is(err, queencontainer.ErrDisabled) {
			t.Fatalf("Start(WithImage(ImageNone)) = %v, want ErrDisabled", err)
		}
	})
}

// endTB is the testing.TB of a call to Run that records how the call
// ended its test, instead of ending t: a real skip would show in go test
// -v as a skipped test, which .ci/containers refuses where an engine
// answers. Skip and Fatal end the goroutine of the call, as they end a
// test's.
type endTB struct {
	testing.TB
	how, why string // "skip", "fatal", or "returned"
}

func (tb *endTB) Skip(args ...any)                 { tb.end("skip", fmt.Sprint(args...)) }
func (tb *endTB) Skipf(format string, args ...any) { tb.end("skip", fmt.Sprintf(format, args...)) }
func (tb *endTB) SkipNow()                         { tb.end("skip", "") }
func (tb *endTB) Fatal(args ...any)                { tb.end("fatal", fmt.Sprint(args...)) }
func (tb *endTB) Fatalf(format string, args ...any) {
	tb.end("fatal", fmt.Sprintf(format, args...))
}
func (tb *endTB) FailNow() { tb.end("fatal", "") }

func (tb *endTB) end(how, why string) {
	tb.how, tb.why = how, why
	runtime.Goexit()
}

// runTB calls queencontainer.Run on an endTB over t, in a goroutine of its
// own, and says how it ended. A container it returned is terminated.
func runTB(t *testing.T) *endTB {
	tb := &endTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := queencontainer.Run(tb)
		tb.how, tb.why = "returned", "container "+c.ID
	}()
	<-done
	return tb
}

// TestBadOptionsFailBeforeDocker: a wrong option is an error of Start
// before it talks to any engine.
func TestBadOptionsFailBeforeDocker(t *testing.T) {
	for name, opt := range map[string]queencontainer.Option{
		"empty host": queencontainer.WithPostgres(queencontainer.Postgres{Port: 5432}),
		"bad port":   queencontainer.WithPostgres(queencontainer.Postgres{Host: "db", Port: 70000}),
		"label key":  queencontainer.WithLabels(map[string]string{"": "x"}),
		"own label":  queencontainer.WithLabels(map[string]string{queencontainer.Label: "false"}),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := queencontainer.Start(context.Background(), opt)
			if c != nil || err == nil || errors.Is(err, queencontainer.ErrNoDocker) {
				t.Fatalf("Start = %v, %v; want an option error", c, err)
			}
		})
	}
	t.Run("QUEEN_PG_PORT", func(t *testing.T) {
		t.Setenv(queencontainer.PGHostEnv, "127.0.0.1")
		t.Setenv(queencontainer.PGPortEnv, "five")
		_, err := queencontainer.Start(context.Background(), queencontainer.FromEnv())
		if err == nil || !strings.Contains(err.Error(), queencontainer.PGPortEnv) {
			t.Fatalf("Start with %s=five: %v, want an error naming it", queencontainer.PGPortEnv, err)
		}
	})
}

// TestRunServesHealth starts the broker when Docker is there (skipped
// otherwise, by Run) and checks that it is ready when Run returns.
func TestRunServesHealth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped with -short")
	}
	broker := queencontainer.Run(t) // skips the test when no Docker engine answers
	resp, err := http.Get(broker.URL + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	defer resp.Body.Close()
	// A queen.Client pointed at broker.URL tests your code against it.
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health = %d, want 200 once Run returned", resp.StatusCode)
	}
	var health struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		t.Fatalf("decode /health: %v", err)
	}
	if health.Status != "healthy" {
		t.Errorf("/health status = %q, want healthy", health.Status)
	}
}

// TestRunLeavesNothing: the container Run started carries the package's
// label while the test runs, and is gone from the engine once the test's
// cleanup ran.
func TestRunLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped with -short")
	}
	mark := testMark(t)
	var id string
	t.Run("run", func(t *testing.T) {
		c := queencontainer.Run(t, mark.option())
		id = c.ID
		got := mark.containers(t)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("containers labelled for this test while it runs: %v, want just %s", ids(got), id)
		}
		if got[0].Labels[queencontainer.Label] != "true" {
			t.Errorf("container labels %v, want %s=true", got[0].Labels, queencontainer.Label)
		}
		if run := strings.TrimSpace(os.Getenv(queencontainer.RunEnv)); run != "" && got[0].Labels[queencontainer.RunLabel] != run {
			t.Errorf("container labels %v, want %s=%s (from %s)", got[0].Labels, queencontainer.RunLabel, run, queencontainer.RunEnv)
		}
	})
	if id == "" {
		t.Skip("Run did not start a container (see the subtest)")
	}
	if left := mark.containers(t); len(left) > 0 {
		t.Errorf("after Run's cleanup the engine still has %v", ids(left))
	}
}

// TestRunLabelsItsRun: with QUEEN_CONTAINER_RUN set, the container Run
// starts is found on the engine by the run's label and carries the
// package's label as well; once the test's cleanup ran, the engine has no
// container of that run.
func TestRunLabelsItsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped with -short")
	}
	mark := testMark(t) // a value no other run has
	run := "test-" + mark.value
	t.Setenv(queencontainer.RunEnv, run)
	var id string
	t.Run("run", func(t *testing.T) {
		c := queencontainer.Run(t)
		id = c.ID
		got := mark.byLabel(t, queencontainer.RunLabel, run)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("containers labelled %s=%s: %v, want just %s", queencontainer.RunLabel, run, ids(got), id)
		}
		if got[0].Labels[queencontainer.Label] != "true" {
			t.Errorf("container labels %v, want %s=true besides the run's", got[0].Labels, queencontainer.Label)
		}
	})
	if id == "" {
		t.Skip("Run did not start a container (see the subtest)")
	}
	if left := mark.byLabel(t, queencontainer.RunLabel, run); len(left) > 0 {
		t.Errorf("after Run's cleanup the engine still has %v of run %s", ids(left), run)
	}
}

// TestStartRemovesOnContextEnd: ending Start's ctx removes the container.
func TestStartRemovesOnContextEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped with -short")
	}
	mark := testMark(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := start(t, ctx, mark.option())
	if n := len(mark.containers(t)); n != 1 {
		t.Fatalf("%d containers labelled for this test, want 1", n)
	}
	cancel()
	// The removal began with cancel; Terminate only waits for it.
	if err := c.Terminate(context.Background()); err != nil {
		t.Fatalf("Terminate after the ctx ended: %v", err)
	}
	if left := mark.containers(t); len(left) > 0 {
		t.Errorf("after the ctx ended the engine still has %v", ids(left))
	}
	if err := c.Terminate(context.Background()); err != nil {
		t.Errorf("second Terminate: %v", err)
	}
}

// TestHostNetwork: in the host's network the broker answers on a loopback
// port of the host.
func TestHostNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped with -short")
	}
	mark := testMark(t)
	c := start(t, context.Background(), queencontainer.WithHostNetwork(), mark.option())
	defer terminate(t, c)
	if !strings.HasPrefix(c.URL, "http://127.0.0.1:") {
		t.Errorf("URL in host networking = %q, want http://127.0.0.1:<port>", c.URL)
	}
	resp, err := http.Get(c.URL + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health = %d, want 200", resp.StatusCode)
	}
}

// TestQueentestImageProfile: the repository's image serves the 0.15.1 API
// when QUEENTEST_PROFILE says so (its /health then names no engine).
func TestQueentestImageProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped with -short")
	}
	needQueentestImage(t)
	mark := testMark(t)
	c := start(t, context.Background(), queencontainer.WithEnv("QUEENTEST_PROFILE", "0.15.1"), mark.option())
	defer terminate(t, c)
	resp, err := http.Get(c.URL + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	defer resp.Body.Close()
	var health map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		t.Fatal(err)
	}
	if _, ok := health["engine"]; ok || health["version"] != "1.0.0" {
		t.Errorf("/health = %v, want the 0.15.1 profile's (version 1.0.0, no engine)", health)
	}
}

// TestStartFailureShowsLog: a broker that exits at once makes Start fail
// with the end of its log, and leaves no container behind.
func TestStartFailureShowsLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped with -short")
	}
	needQueentestImage(t)
	mark := testMark(t)
	c, err := queencontainer.Start(context.Background(), queencontainer.FromEnv(),
		queencontainer.WithEnv("QUEENTEST_PROFILE", "1.9"), // queentest refuses it and exits
		queencontainer.WithStartupTimeout(time.Minute), mark.option())
	if err == nil {
		terminate(t, c)
		t.Fatal("Start of a broker that exits at once succeeded")
	}
	for _, want := range []string{"container stopped", "exit code 2", "container log", `unknown broker profile "1.9"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start error does not say %q:\n%v", want, err)
		}
	}
	if left := mark.containers(t); len(left) > 0 {
		t.Errorf("after a failed start the engine still has %v", ids(left))
	}
}

// reaperChildEnv marks the child process of TestStartWithoutReaperImage.
const reaperChildEnv = "QUEENCONTAINER_TEST_REAPER_CHILD"

// TestStartWithoutReaperImage: with testcontainers-go's reaper on and its
// image neither on the engine nor pullable, Start fails with ErrNoReaper,
// says how to run without it, and creates nothing. testcontainers-go reads
// the reaper switch once per process, so the test runs in a child process
// whose environment turns the reaper on.
func TestStartWithoutReaperImage(t *testing.T) {
	if testing.Short() {
		t.Skip("talks to the engine; skipped with -short")
	}
	if os.Getenv(reaperChildEnv) == "" {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "TESTCONTAINERS_RYUK_DISABLED=") {
				env = append(env, kv)
			}
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestStartWithoutReaperImage$", "-test.v", "-test.timeout=3m")
		cmd.Env = append(env, reaperChildEnv+"=1", "TESTCONTAINERS_RYUK_DISABLED=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if i := strings.Index(string(out), "--- SKIP"); i >= 0 {
			t.Skipf("child skipped:\n%s", out)
		}
		if !strings.Contains(string(out), "--- PASS: TestStartWithoutReaperImage") {
			t.Fatalf("child did not pass the test:\n%s", out)
		}
		return
	}
	mark := testMark(t)
	//lint:ignore SA1019 the only exported name of the reaper's image
	reaper := testcontainers.ReaperDefaultImage
	if _, err := mark.cli.ImageInspect(context.Background(), reaper); err == nil {
		t.Skip("the reaper's image is on this engine; this test is about engines without it")
	}
	c, err := queencontainer.Start(context.Background(), queencontainer.FromEnv(), mark.option())
	if err == nil {
		terminate(t, c)
		t.Skip("the reaper started (its image was pulled); this test is about engines without it")
	}
	if errors.Is(err, queencontainer.ErrNoImage) {
		t.Skipf("the broker's image is missing, which Start checks first: %v", err)
	}
	if !errors.Is(err, queencontainer.ErrNoReaper) {
		t.Fatalf("Start with the reaper on and no reaper image: %v, want ErrNoReaper", err)
	}
	if !strings.Contains(err.Error(), "TESTCONTAINERS_RYUK_DISABLED=true") {
		t.Errorf("ErrNoReaper does not say how to run without the reaper: %v", err)
	}
	if left := mark.containers(t); len(left) > 0 {
		t.Errorf("Start created %v before it found the reaper missing", ids(left))
	}
}

// ExampleRun shows the shape of a test against a broker container.
func ExampleRun() {
	// In a test function:
	//
	//	broker := queencontainer.Run(t)          // skipped without Docker
	//	client, err := queen.New(broker.URL)
	//	if err != nil {
	//		t.Fatal(err)
	//	}
	//	defer client.Close(context.Background())
}

// start is Start with the environment's image and database, skipping the
// test where Run would.
func start(t *testing.T, ctx context.Context, opts ...queencontainer.Option) *queencontainer.Container {
	t.Helper()
	c, err := queencontainer.Start(ctx, append([]queencontainer.Option{queencontainer.FromEnv()}, opts...)...)
	if errors.Is(err, queencontainer.ErrNoDocker) ||
		(errors.Is(err, queencontainer.ErrNoImage) && queencontainer.ImageFromEnv() == queencontainer.DefaultImage) {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func terminate(t *testing.T, c *queencontainer.Container) {
	t.Helper()
	if err := c.Terminate(context.Background()); err != nil {
		t.Error(err)
	}
}

// testLabel marks the containers of one test, so that checks by label see
// only them even when other processes use the engine.
const testLabel = "dev.queen-go.queencontainer.test"

type mark struct {
	value string
	cli   *testcontainers.DockerClient
}

// testMark returns a fresh mark, and skips the test when no engine answers.
func testMark(t *testing.T) mark {
	t.Helper()
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	if err == nil {
		_, err = cli.Ping(context.Background(), client.PingOptions{})
	}
	if err != nil {
		t.Skipf("%v: %v", queencontainer.ErrNoDocker, err)
	}
	t.Cleanup(func() { cli.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	return mark{value: t.Name() + "-" + hex.EncodeToString(b[:]), cli: cli}
}

func (m mark) option() queencontainer.Option {
	return queencontainer.WithCustomizer(testcontainers.WithLabels(map[string]string{testLabel: m.value}))
}

// containers lists every container (running or not) with the mark.
func (m mark) containers(t *testing.T) []containerSummary {
	t.Helper()
	return m.byLabel(t, testLabel, m.value)
}

// byLabel lists every container (running or not) labelled key=value.
func (m mark) byLabel(t *testing.T, key, value string) []containerSummary {
	t.Helper()
	res, err := m.cli.ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", key+"="+value),
	})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	out := make([]containerSummary, len(res.Items))
	for i, it := range res.Items {
		out[i] = containerSummary{ID: it.ID, Labels: it.Labels}
	}
	return out
}

type containerSummary struct {
	ID     string
	Labels map[string]string
}

func ids(cs []containerSummary) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// needQueentestImage skips the test unless the image in use is the
// repository's queentest image (Dockerfile label org.opencontainers.image.title).
func needQueentestImage(t *testing.T) {
	t.Helper()
	image := queencontainer.ImageFromEnv()
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	if err != nil {
		t.Skipf("%v: %v", queencontainer.ErrNoDocker, err)
	}
	defer cli.Close()
	res, err := cli.ImageInspect(context.Background(), image)
	if err != nil {
		t.Skipf("needs the repository's queentest image; %s is not on the engine: %v", image, err)
	}
	if res.Config == nil || res.Config.Labels["org.opencontainers.image.title"] != "queentest" {
		t.Skipf("needs the repository's queentest image (QUEEN_IMAGE); %s is another", image)
	}
}

// TestRunUsesQueenURL: with QUEEN_URL set (and QUEEN_IMAGE unset), Run
// returns that broker and asks no engine: DOCKER_HOST points nowhere, so
// touching Docker would skip the subtest (no engine) or pull the default
// image.
func TestRunUsesQueenURL(t *testing.T) {
	t.Setenv(queencontainer.URLEnv, "http://127.0.0.1:6632/")
	t.Setenv(queencontainer.ImageEnv, "")
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	returned := false
	t.Run("run", func(t *testing.T) {
		c := queencontainer.Run(t)
		returned = true
		if c.URL != "http://127.0.0.1:6632" || c.ID != "" || c.Testcontainer() != nil {
			t.Errorf("Run = %+v, want QUEEN_URL's broker and no container", c)
		}
		if err := c.Terminate(context.Background()); err != nil {
			t.Errorf("Terminate: %v", err)
		}
	})
	if !returned {
		t.Fatal("Run did not return the QUEEN_URL broker (it skipped or failed: it tried Docker)")
	}
}

// A cluster in QUEEN_URL (a comma list): URL is its first broker, URLs all
// of them, each a URL queen.New takes.
func TestRunUsesQueenURLCluster(t *testing.T) {
	t.Setenv(queencontainer.URLEnv, " http://127.0.0.1:6632/, http://127.0.0.1:6633 ,http://127.0.0.1:6634")
	t.Setenv(queencontainer.ImageEnv, "")
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	c := queencontainer.Run(t)
	want := []string{"http://127.0.0.1:6632", "http://127.0.0.1:6633", "http://127.0.0.1:6634"}
	if c.URL != want[0] || !slices.Equal(c.URLs, want) {
		t.Errorf("Run = %q %q, want %q", c.URL, c.URLs, want)
	}
}
