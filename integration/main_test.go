package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queen-go/queen/queencontainer"
	"github.com/queen-go/queen/queentest"
)

// be is the broker every scenario runs against, chosen once by TestMain.
var be *backend

// backendKind names where the broker comes from.
type backendKind string

const (
	kindURL       backendKind = "QUEEN_URL"
	kindContainer backendKind = "container"
	kindInProcess backendKind = "queentest"
)

// backend is the broker of this run.
type backend struct {
	kind backendKind
	url  string
	// urls are every broker of a QUEEN_URL comma list, url first.
	urls []string
	// why says how the backend was chosen.
	why string
	// noContainer says why the container path is not in use ("" when it is).
	noContainer string
	// version is what /health reported ("" when it did not say).
	version string
	// profile is the broker generation: the queentest profile in process,
	// else read from /health (0.15.1 reports no engine).
	profile queentest.Profile

	srv *queentest.Server         // kindInProcess
	ctr *queencontainer.Container // kindContainer
}

// probeTimeout bounds the Docker check: no engine must mean a quick skip.
const probeTimeout = 2 * time.Second

// chooseBackend picks QUEEN_URL, then a container, then queentest.
func chooseBackend(ctx context.Context) (*backend, error) {
	if u := strings.TrimSpace(os.Getenv("QUEEN_URL")); u != "" {
		// A comma list names the brokers of one cluster: the scenarios'
		// clients get them all, raw HTTP goes to the first.
		var urls []string
		for _, f := range strings.Split(u, ",") {
			if f = strings.TrimRight(strings.TrimSpace(f), "/"); f != "" {
				urls = append(urls, f)
			}
		}
		if len(urls) == 0 {
			return nil, fmt.Errorf("QUEEN_URL %q names no URL", u)
		}
		return &backend{
			kind:        kindURL,
			url:         urls[0],
			urls:        urls,
			why:         "QUEEN_URL is set",
			noContainer: "QUEEN_URL is set, so the suite runs against that broker",
		}, nil
	}
	var noContainer string
	imageEnv := strings.TrimSpace(os.Getenv(queencontainer.ImageEnv))
	// FromEnv: QUEEN_IMAGE (none turns the container path off), and
	// QUEEN_PG_* for a broker that needs a database (a 0.15.1 broker image
	// with a PostgreSQL on the host).
	image := queencontainer.ImageFromEnv()
	c, err := queencontainer.Start(ctx, queencontainer.FromEnv(), queencontainer.WithProbeTimeout(probeTimeout))
	switch {
	case err == nil:
		why := "a Docker engine answers; container " + shortID(c.ID) + " of image " + image
		if pg := strings.TrimSpace(os.Getenv(queencontainer.PGHostEnv)); pg != "" {
			why += " with its PostgreSQL at " + pg
			if port := strings.TrimSpace(os.Getenv(queencontainer.PGPortEnv)); port != "" {
				why += ":" + port
			}
		}
		return &backend{kind: kindContainer, url: c.URL, ctr: c, why: why}, nil
	case errors.Is(err, queencontainer.ErrDisabled):
		noContainer = queencontainer.ImageEnv + "=none turns the container path off"
	case errors.Is(err, queencontainer.ErrNoDocker):
		noContainer = err.Error()
	case imageEnv != "":
		// The user asked for that image: failing to run it is an error,
		// not a reason to test something else.
		return nil, err
	default:
		noContainer = fmt.Sprintf("Docker answers but the default image could not be started (set %s to choose another): %v",
			queencontainer.ImageEnv, err)
	}
	return &backend{
		kind:        kindInProcess,
		why:         "QUEEN_URL is unset and no broker container: " + noContainer,
		noContainer: noContainer,
	}, nil
}

// shortID is the 12-character form of a container ID that docker ps shows.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ProfilesEnv lists the queentest profiles the in-process backend runs the
// suite with, comma-separated, in order (default: every profile, 2.x then
// 0.15.1). Each profile is a complete run of the suite against a fresh
// broker.
const ProfilesEnv = "QUEEN_PROFILES"

// inProcessProfiles reads ProfilesEnv.
func inProcessProfiles() ([]queentest.Profile, error) {
	v := strings.TrimSpace(os.Getenv(ProfilesEnv))
	if v == "" {
		return queentest.Profiles(), nil
	}
	var out []queentest.Profile
	for _, f := range strings.Split(v, ",") {
		p, err := queentest.ParseProfile(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ProfilesEnv, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// withProfile is the in-process backend b serving profile p.
func (b *backend) withProfile(p queentest.Profile) *backend {
	srv := queentest.NewServer(queentest.WithProfile(p))
	n := *b
	n.srv, n.url, n.profile = srv, srv.URL, p
	n.why = b.why + "; queentest profile " + string(p)
	return &n
}

// close releases the broker of the run.
func (b *backend) close() error {
	switch {
	case b.srv != nil:
		b.srv.Close()
	case b.ctr != nil:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return b.ctr.Terminate(ctx)
	}
	return nil
}

// health reads GET /health once, to fail fast on a wrong QUEEN_URL and to
// report the broker's version.
func (b *backend) health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/health", nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("broker at %s does not answer: %w", b.url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("broker at %s: GET /health = %d: %s", b.url, resp.StatusCode, body)
	}
	var h struct {
		Version string `json:"version"`
		Engine  string `json:"engine"`
	}
	if json.Unmarshal(body, &h) == nil {
		b.version = strings.TrimSpace(h.Version + " " + h.Engine)
		if b.profile == "" {
			// 2.x reports its engine; 0.15.1 does not (PROTOCOL.md §11).
			b.profile = queentest.Profile2x
			if h.Engine == "" {
				b.profile = queentest.Profile015
			}
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	b, err := chooseBackend(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: no backend:", err)
		os.Exit(1)
	}
	if b.kind != kindInProcess {
		os.Exit(run(m, b))
	}
	// In process, the suite runs once per queentest profile.
	profiles, err := inProcessProfiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(2)
	}
	code := 0
	var failed []string
	for _, p := range profiles {
		if c := run(m, b.withProfile(p)); c != 0 {
			code = c
			failed = append(failed, string(p))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "integration: the suite failed against queentest profile(s) %s\n", strings.Join(failed, ", "))
	}
	os.Exit(code)
}

// run runs the suite once against b and returns its exit code.
func run(m *testing.M, b *backend) int {
	be = b
	if err := b.health(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		_ = b.close()
		return 1
	}
	fmt.Fprintf(os.Stderr, "integration: backend %s at %s (%s, profile %s) [%s]\n", b.kind, b.url, b.version, b.profile, b.why)

	// Goroutines that exist now (the in-process broker's, testcontainers'
	// reaper and Docker connections) are not the scenarios' doing.
	baseline := goleak.IgnoreCurrent()
	code := m.Run()

	// The in-process broker promises to leave no goroutine behind on Close:
	// close it before looking. A container is removed after the check, since
	// removing it starts Docker client goroutines of its own.
	var closeErr error
	if b.kind != kindContainer {
		closeErr = b.close()
	}
	if code == 0 {
		if err := goleak.Find(baseline); err != nil {
			fmt.Fprintln(os.Stderr, "integration: leaked goroutines:", err)
			code = 1
		}
	}
	if b.kind == kindContainer {
		closeErr = b.close()
	}
	if closeErr != nil {
		fmt.Fprintln(os.Stderr, "integration: closing the backend:", closeErr)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// TestBackend reports which broker the suite ran against, and skips with
// the reason when the container path was not taken.
func TestBackend(t *testing.T) {
	t.Logf("backend %s at %s, version %q, profile %s: %s", be.kind, be.url, be.version, be.profile, be.why)
	t.Run("container", func(t *testing.T) {
		if be.kind != kindContainer {
			t.Skip("broker container not used: " + be.noContainer)
		}
	})
}
