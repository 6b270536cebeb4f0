// Package queencontainer starts a Queen MQ broker in a Docker container, for
// tests that want the real broker rather than the in-memory one of package
// queentest. It is a thin layer over testcontainers-go:
//
//	func TestRunServesHealth(t *testing.T) {
//		broker := queencontainer.Run(t) // skips the test when no Docker engine answers
//		resp, err := http.Get(broker.URL + "/health")
//		if err != nil {
//			t.Fatalf("GET /health: %v", err)
//		}
//		defer resp.Body.Close()
//		// A queen.Client pointed at broker.URL tests your code against it.
//	}
//
// (That test is this package's own, run by its tests.)
//
// Start pulls the image if needed (DefaultImage, or QUEEN_IMAGE through
// ImageFromEnv), publishes the broker's HTTP port on a free host port, waits
// until GET /health answers 200 (a 2.x broker answers 503 "settling" while it
// starts), and returns the broker's base URL. Terminate removes the
// container and its data.
//
// The broker keeps its replicated log in QUEEN_RAFT_DIR. Start points it at a
// directory inside the container's own writable layer, so that no volume is
// needed and nothing outlives the container, and raises the broker's disk
// high-water marks (QUEEN_RAFT_DISK_HIGH_PCT/LOW_PCT), so that a nearly full
// disk on a test machine does not make it refuse pushes with 507. WithEnv
// overrides any of these.
package queencontainer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultImage is the broker image Start runs when no other is given.
const DefaultImage = "ghcr.io/queen-mq/queen:2.7.1"

// ImageEnv is the environment variable ImageFromEnv reads.
const ImageEnv = "QUEEN_IMAGE"

// HTTPPort is the broker's HTTP port inside the container.
const HTTPPort = "6632/tcp"

// DataDir is where Start makes the broker keep its data (QUEEN_RAFT_DIR),
// inside the container.
const DataDir = "/tmp/queen-raft"

// Defaults of the options.
const (
	// DefaultStartupTimeout bounds the whole start: pull, create, and the
	// wait for /health. A first pull of the image can take a while.
	DefaultStartupTimeout = 3 * time.Minute
	// DefaultProbeTimeout bounds the check that a Docker engine answers.
	DefaultProbeTimeout = 3 * time.Second
)

// ErrNoDocker is matched (errors.Is) by the error of Start and DockerAvailable
// when no Docker engine answers. Run skips its test on it.
var ErrNoDocker = errors.New("queencontainer: no Docker engine answers")

// Container is a running broker container.
type Container struct {
	// URL is the broker's base URL as seen from the test process, such as
	// "http://localhost:32768"; pass it to queen.New.
	URL string
	// Image is the image the container runs.
	Image string

	ctr *testcontainers.DockerContainer
}

// Testcontainer returns the underlying testcontainers-go container, for logs,
// exec or anything this package does not wrap.
func (c *Container) Testcontainer() *testcontainers.DockerContainer { return c.ctr }

// Terminate stops and removes the container with its data. It is safe to
// call on a nil *Container and more than once.
func (c *Container) Terminate(ctx context.Context) error {
	if c == nil || c.ctr == nil {
		return nil
	}
	ctr := c.ctr
	c.ctr = nil
	if err := ctr.Terminate(ctx); err != nil {
		return fmt.Errorf("queencontainer: terminate %s: %w", c.Image, err)
	}
	return nil
}

// Option configures Start.
type Option func(*settings)

type settings struct {
	image          string
	env            map[string]string
	startupTimeout time.Duration
	probeTimeout   time.Duration
	logger         tclog.Logger
	customizers    []testcontainers.ContainerCustomizer
}

// WithImage runs ref (for example "ghcr.io/queen-mq/queen:2.7.1") instead of
// DefaultImage. An empty ref keeps the default.
func WithImage(ref string) Option {
	return func(s *settings) {
		if ref != "" {
			s.image = ref
		}
	}
}

// WithEnv sets an environment variable of the broker, replacing the value
// Start would set (for example QUEEN_RAFT_DIR).
func WithEnv(key, value string) Option {
	return func(s *settings) { s.env[key] = value }
}

// WithStartupTimeout bounds the start (pull, create, /health wait);
// default DefaultStartupTimeout.
func WithStartupTimeout(d time.Duration) Option {
	return func(s *settings) {
		if d > 0 {
			s.startupTimeout = d
		}
	}
}

// WithProbeTimeout bounds the check that a Docker engine answers, done
// before anything else; default DefaultProbeTimeout.
func WithProbeTimeout(d time.Duration) Option {
	return func(s *settings) {
		if d > 0 {
			s.probeTimeout = d
		}
	}
}

// WithLogger sends testcontainers' own progress lines (pull, create, wait)
// to l. Run sets a logger that writes to the test's log.
func WithLogger(l tclog.Logger) Option {
	return func(s *settings) { s.logger = l }
}

// WithCustomizer passes extra testcontainers-go customizers (mounts,
// networks, log consumers, ...) through to the container request. They are
// applied after this package's own settings.
func WithCustomizer(c ...testcontainers.ContainerCustomizer) Option {
	return func(s *settings) { s.customizers = append(s.customizers, c...) }
}

// ImageFromEnv returns the image named by QUEEN_IMAGE, or DefaultImage when
// it is unset or empty.
func ImageFromEnv() string {
	if v := strings.TrimSpace(os.Getenv(ImageEnv)); v != "" {
		return v
	}
	return DefaultImage
}

// DockerAvailable reports whether a Docker engine answers a ping, within
// ctx. It finds the engine the way testcontainers-go does (DOCKER_HOST,
// Docker contexts, ~/.testcontainers.properties, the usual sockets). The
// error matches ErrNoDocker and says what was tried.
func DockerAvailable(ctx context.Context) (err error) {
	// testcontainers-go panics on some configurations it cannot use; treat
	// that as "no engine" rather than crash the caller's test binary.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrNoDocker, r)
		}
	}()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("%w: ping %s: %v", ErrNoDocker, cli.DaemonHost(), err)
	}
	return nil
}

// Start runs a broker container and returns once its /health answers 200.
// When no Docker engine answers within the probe timeout, the error matches
// ErrNoDocker and nothing was started. On any later failure the container,
// if it was created, is removed before Start returns.
func Start(ctx context.Context, opts ...Option) (*Container, error) {
	s := settings{
		image:          DefaultImage,
		startupTimeout: DefaultStartupTimeout,
		probeTimeout:   DefaultProbeTimeout,
		env: map[string]string{
			"QUEEN_RAFT_DIR":           DataDir,
			"QUEEN_RAFT_DISK_HIGH_PCT": "99",
			"QUEEN_RAFT_DISK_LOW_PCT":  "98",
		},
	}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}

	probeCtx, cancelProbe := context.WithTimeout(ctx, s.probeTimeout)
	err := DockerAvailable(probeCtx)
	cancelProbe()
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, s.startupTimeout)
	defer cancel()

	custom := []testcontainers.ContainerCustomizer{
		testcontainers.WithExposedPorts(HTTPPort),
		testcontainers.WithEnv(maps.Clone(s.env)),
		testcontainers.WithWaitStrategyAndDeadline(s.startupTimeout,
			wait.ForHTTP("/health").
				WithPort(HTTPPort).
				WithStatusCodeMatcher(func(status int) bool { return status == 200 }).
				WithPollInterval(200*time.Millisecond)),
	}
	if s.logger != nil {
		custom = append(custom, testcontainers.WithLogger(s.logger))
	}
	custom = append(custom, s.customizers...)

	ctr, err := testcontainers.Run(ctx, s.image, custom...)
	if err != nil {
		if ctr != nil {
			removeQuietly(ctr) // the start error is the one to report
		}
		return nil, fmt.Errorf("queencontainer: start %s: %w", s.image, err)
	}
	endpoint, err := ctr.PortEndpoint(ctx, HTTPPort, "http")
	if err != nil {
		removeQuietly(ctr)
		return nil, fmt.Errorf("queencontainer: endpoint of %s: %w", s.image, err)
	}
	return &Container{URL: endpoint, Image: s.image, ctr: ctr}, nil
}

// removeQuietly removes a container Start created but cannot hand over,
// within 30 s; its error is dropped for the start error Start reports.
func removeQuietly(ctr *testcontainers.DockerContainer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ctr.Terminate(ctx)
}

// Run starts a broker container for the test tb and removes it when the
// test and its subtests end (tb.Cleanup). It skips tb (tb.Skip, with the
// reason) when no Docker engine answers, and fails it (tb.Fatal) on any
// other start error. The image is QUEEN_IMAGE when set (ImageFromEnv), else
// DefaultImage; a WithImage option wins over both.
func Run(tb testing.TB, opts ...Option) *Container {
	tb.Helper()
	all := append([]Option{WithImage(ImageFromEnv()), WithLogger(tclog.TestLogger(tb))}, opts...)
	c, err := Start(context.Background(), all...)
	if errors.Is(err, ErrNoDocker) {
		tb.Skip(err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Terminate(ctx); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return c
}
