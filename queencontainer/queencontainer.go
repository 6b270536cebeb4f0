// Package queencontainer starts a Queen MQ broker in a Docker container, for
// tests that want a broker over the network rather than the in-memory one of
// package queentest. It is a thin layer over testcontainers-go:
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
// # Images
//
// Start runs DefaultImage, the published Queen 2.x broker (one container,
// its own storage), unless WithImage or QUEEN_IMAGE (read by Run and FromEnv)
// names another: Image015 (the published 0.15.1 broker, which needs a
// PostgreSQL: see WithPostgres), an image built by hand, or the image this
// repository builds from its Dockerfile (cmd/queentest, the in-memory broker
// in an empty image). An image that is not on the engine is pulled once;
// ErrNoImage says when that fails (no registry, for instance).
//
// QUEEN_IMAGE=none (ImageNone, in any case) turns containers off: Start
// then fails with ErrDisabled without asking any Docker engine, and Run
// skips its test, so that a machine with Docker can run the same tests
// without containers. QUEEN_URL, naming a running broker, makes Run use it
// and start nothing.
//
// Start publishes the broker's HTTP port on a free host port (or, in host
// networking, gives the broker a free host port through PORT and
// QUEENTEST_ADDR), waits until GET /health answers 200 (a 2.x broker answers
// 503 "settling" while it starts), and returns the broker's base URL. When
// the container exits or /health never answers 200, the error carries the
// end of the container's log.
//
// A 2.x broker keeps its replicated log in QUEEN_RAFT_DIR. Start points it
// at a directory inside the container's own writable layer, so that no
// volume is needed and nothing outlives the container, and raises its disk
// high-water marks (QUEEN_RAFT_DISK_HIGH_PCT/LOW_PCT), so that a nearly full
// disk on a test machine does not make it refuse pushes with 507. WithEnv
// overrides any of these.
//
// # Cleaning up, with or without the reaper
//
// Every container Start creates carries the label Label=true, and the
// labels of WithLabels. Run removes its container when the test ends
// (tb.Cleanup); Start removes it when its ctx ends, or on
// Container.Terminate, whichever comes first. A process killed before
// either leaves the container behind: testcontainers-go's reaper (Ryuk,
// itself a container) removes such leftovers, and a CI job without it can
// remove them by label. Label alone matches the containers of everyone who
// uses this package on the engine, live tests of other runs included; so a
// job that shares its engine gives its run an ID of its own in
// QUEEN_CONTAINER_RUN (read by FromEnv, and so by Run: the label
// RunLabel=<id>) and removes only that run's containers:
//
//	export QUEEN_CONTAINER_RUN=ci-$$-$(date +%s)
//	go test ./...
//	docker rm -f $(docker ps -aq --filter label=dev.queen-go.queencontainer.run=$QUEEN_CONTAINER_RUN)
//
// The reaper's image (testcontainers.ReaperDefaultImage) must be on the
// engine or pullable; where it is not, Start fails with ErrNoReaper before
// creating anything. testcontainers-go reads whether the reaper runs from the
// environment variable TESTCONTAINERS_RYUK_DISABLED=true or the line
// ryuk.disabled=true in ~/.testcontainers.properties, once per process; it
// has no per-container switch, and this package never sets process
// environment, so set one of them yourself to run without the reaper.
package queencontainer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// DefaultImage is the broker image Start runs when no other is given: the
// published Queen 2.x broker, one container with its own storage.
const DefaultImage = "ghcr.io/queen-mq/queen:2.7.1"

// ImageNone, as the image (QUEEN_IMAGE=none, or WithImage(ImageNone)),
// turns containers off: Start fails with ErrDisabled before it talks to
// any engine, and Run skips its test. It is compared ignoring case.
const ImageNone = "none"

// Image015 is the published Queen 0.15.1 broker. It needs a PostgreSQL:
// run it with WithPostgres.
const Image015 = "smartnessai/queen-mq:0.15.1"

// Label is the label (value "true") on every container Start creates.
const Label = "dev.queen-go.queencontainer"

// RunLabel is the label whose value names the run (a CI job, a developer's
// test session) that started the container; FromEnv sets it from RunEnv.
// It lets a run that shares its Docker engine with others find and remove
// its own containers and no one else's.
const RunLabel = "dev.queen-go.queencontainer.run"

// Environment variables read by FromEnv, and so by Run. The QUEEN_PG_*
// variables describe the broker's PostgreSQL and its pools (see Postgres);
// QUEEN_PG_HOST turns them on.
const (
	ImageEnv      = "QUEEN_IMAGE"
	PGHostEnv     = "QUEEN_PG_HOST"
	PGPortEnv     = "QUEEN_PG_PORT"
	PGDatabaseEnv = "QUEEN_PG_DB"
	PGUserEnv     = "QUEEN_PG_USER"
	PGPasswordEnv = "QUEEN_PG_PASSWORD"
	// PGNumWorkersEnv, PGDBPoolSizeEnv and PGSidecarPoolSizeEnv size the
	// broker (Postgres.NumWorkers, DBPoolSize, SidecarPoolSize): positive
	// integers.
	PGNumWorkersEnv      = "QUEEN_PG_NUM_WORKERS"
	PGDBPoolSizeEnv      = "QUEEN_PG_DB_POOL_SIZE"
	PGSidecarPoolSizeEnv = "QUEEN_PG_SIDECAR_POOL_SIZE"
	// URLEnv names a running broker: Run then starts no container.
	URLEnv = "QUEEN_URL"
	// RunEnv names the run the containers belong to: FromEnv labels them
	// RunLabel=<its value>.
	RunEnv = "QUEEN_CONTAINER_RUN"
)

// HTTPPort is the broker's HTTP port inside the container.
const HTTPPort = "6632/tcp"

// DataDir is where Start makes a 2.x broker keep its data (QUEEN_RAFT_DIR),
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

// reaperImage is the image testcontainers-go runs its reaper from. The
// exported name is deprecated for an internal one, whose value it still
// carries; no other exported name says which image the reaper needs.
func reaperImage() string {
	//lint:ignore SA1019 the only exported name of the reaper's image (same value as the internal one)
	return testcontainers.ReaperDefaultImage
}

// logTail is how much of the container's log a start error carries.
const logTail = 60

var (
	// ErrNoDocker is matched (errors.Is) by the error of Start and
	// DockerAvailable when no Docker engine answers. Run skips its test on
	// it.
	ErrNoDocker = errors.New("queencontainer: no Docker engine answers")
	// ErrNoImage is matched by the error of Start when the image is not on
	// the engine and cannot be pulled. Run skips its test on it when the
	// image was not chosen (no WithImage, no QUEEN_IMAGE), and fails it
	// otherwise.
	ErrNoImage = errors.New("queencontainer: image not available")
	// ErrNoReaper is matched by the error of Start when testcontainers-go's
	// reaper is on but its image is not on the engine and cannot be pulled.
	// Nothing was created. Turn the reaper off (see the package doc) or make
	// its image available.
	ErrNoReaper = errors.New("queencontainer: the testcontainers reaper (Ryuk) cannot start")
	// ErrDisabled is matched by the error of Start when the image is
	// ImageNone (QUEEN_IMAGE=none): containers are turned off, and nothing
	// was asked of any engine. Run skips its test on it.
	ErrDisabled = errors.New("queencontainer: containers are turned off (" + ImageEnv + "=" + ImageNone + ")")
)

// Container is a running broker container.
type Container struct {
	// URL is the broker's base URL as seen from the test process, such as
	// "http://127.0.0.1:32768"; pass it to queen.New.
	URL string
	// URLs is every broker of a cluster that QUEEN_URL names as a comma
	// list, URL first (pass the rest to queen.WithURLs); nil for a
	// container.
	URLs []string
	// Image is the image the container runs.
	Image string
	// ID is the container's ID on the engine.
	ID string

	ctr *testcontainers.DockerContainer
	// stopWatch stops the removal on ctx's end; it reports false when that
	// removal has already begun.
	stopWatch func() bool

	once    sync.Once
	removed chan struct{} // closed once the container is removed (or that failed)
	err     error         // of the removal, set before removed is closed
}

// Testcontainer returns the underlying testcontainers-go container, for logs,
// exec or anything this package does not wrap.
func (c *Container) Testcontainer() *testcontainers.DockerContainer { return c.ctr }

// Terminate stops and removes the container with its data, and returns once
// it is gone. It is safe to call on a nil *Container, more than once, and
// after Start's ctx ended (it then waits for the removal that began, and
// returns its error).
func (c *Container) Terminate(ctx context.Context) error {
	if c == nil || c.ctr == nil {
		return nil
	}
	if c.stopWatch != nil && !c.stopWatch() {
		// ctx's end began the removal: wait for it.
		select {
		case <-c.removed:
			return c.err
		case <-ctx.Done():
			return fmt.Errorf("queencontainer: terminate %s: %w", c.Image, ctx.Err())
		}
	}
	c.remove(ctx)
	return c.err
}

// remove removes the container once; later calls wait for nothing and
// leave c.err as the first call set it.
func (c *Container) remove(ctx context.Context) {
	c.once.Do(func() {
		defer close(c.removed)
		if err := c.ctr.Terminate(ctx, testcontainers.StopTimeout(5*time.Second)); err != nil {
			c.err = fmt.Errorf("queencontainer: terminate %s: %w", c.Image, err)
		}
	})
}

// Option configures Start.
type Option func(*settings)

type settings struct {
	image          string
	imageChosen    bool // by WithImage (or FromEnv), rather than the default
	env            map[string]string
	labels         map[string]string // besides Label=true
	pg             *Postgres
	hostNetwork    bool
	startupTimeout time.Duration
	probeTimeout   time.Duration
	logger         tclog.Logger
	customizers    []testcontainers.ContainerCustomizer
	err            error // of an option, reported by Start
}

// Postgres is the database of a 0.15.1 broker (see WithPostgres). Empty
// fields keep the broker's own defaults (port 5432, database, user and
// password "postgres").
type Postgres struct {
	// Host is the database's address as the broker's container reaches it.
	// A loopback host ("localhost", "127.0.0.1", "::1") is the Docker host's
	// own, which a container reaches only in the host's network: it turns
	// on WithHostNetwork. "host.docker.internal" is mapped to the host's
	// gateway (Docker's host-gateway), for a database that listens on the
	// host's bridge address.
	Host     string
	Port     int
	Database string
	User     string
	Password string
	// NumWorkers, DBPoolSize and SidecarPoolSize are the broker's
	// NUM_WORKERS, DB_POOL_SIZE and SIDECAR_POOL_SIZE; zero means the
	// sizes for a test machine (2, 5 and 30).
	NumWorkers      int
	DBPoolSize      int
	SidecarPoolSize int
}

// WithImage runs ref (for example Image015 or "queen-go/queentest") instead
// of DefaultImage. An empty ref keeps the default; ImageNone turns
// containers off (Start fails with ErrDisabled).
func WithImage(ref string) Option {
	return func(s *settings) {
		if ref = strings.TrimSpace(ref); ref != "" {
			s.image = ref
			s.imageChosen = true
		}
	}
}

// WithEnv sets an environment variable of the broker, replacing the value
// Start would set (for example QUEEN_RAFT_DIR, or QUEENTEST_PROFILE=0.15.1
// for the repository's queentest image).
func WithEnv(key, value string) Option {
	return func(s *settings) { s.env[key] = value }
}

// WithLabels adds labels to the container, besides Label=true (for
// example RunLabel, to tell one run's containers from another's). A later
// value of the same key wins. A label with an empty key, or with the key
// Label, is an error of Start.
func WithLabels(labels map[string]string) Option {
	return func(s *settings) {
		for k, v := range labels {
			switch strings.TrimSpace(k) {
			case "":
				s.err = errors.New("queencontainer: WithLabels: empty label key")
				return
			case Label:
				s.err = fmt.Errorf("queencontainer: WithLabels: %s is the package's own label, always true", Label)
				return
			}
			if s.labels == nil {
				s.labels = map[string]string{}
			}
			s.labels[k] = v
		}
	}
}

// WithPostgres gives the broker its database (a 0.15.1 broker stores
// everything in PostgreSQL): it sets the broker's PG_HOST, PG_PORT, PG_DB,
// PG_USER and PG_PASSWORD from the non-empty fields of pg, and sizes the
// broker from pg's pool fields, for a test machine by default
// (NUM_WORKERS=2, DB_POOL_SIZE=5, SIDECAR_POOL_SIZE=30; WithEnv overrides
// them). The database must exist and accept the broker's connections; the
// broker applies its schema on first start. An empty pg.Host, or a
// negative size, is an error of Start.
func WithPostgres(pg Postgres) Option {
	return func(s *settings) {
		if strings.TrimSpace(pg.Host) == "" {
			s.err = errors.New("queencontainer: WithPostgres: empty Host")
			return
		}
		if pg.Port < 0 || pg.Port > 65535 {
			s.err = fmt.Errorf("queencontainer: WithPostgres: port %d out of range", pg.Port)
			return
		}
		if pg.NumWorkers < 0 || pg.DBPoolSize < 0 || pg.SidecarPoolSize < 0 {
			s.err = fmt.Errorf("queencontainer: WithPostgres: negative size (workers %d, db pool %d, sidecar pool %d)", pg.NumWorkers, pg.DBPoolSize, pg.SidecarPoolSize)
			return
		}
		p := pg
		s.pg = &p
	}
}

// WithHostNetwork runs the container in the Docker host's network instead
// of a bridge: the broker then listens on a free port of the host (Start
// sets PORT, read by the real broker, and QUEENTEST_ADDR, read by the
// repository's queentest image) and reaches the host's loopback services,
// such as a PostgreSQL on 127.0.0.1. It needs a Linux engine.
func WithHostNetwork() Option {
	return func(s *settings) { s.hostNetwork = true }
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

// FromEnv applies the environment: QUEEN_IMAGE as WithImage (so
// QUEEN_IMAGE=none turns containers off, see ImageNone), a non-empty
// QUEEN_CONTAINER_RUN as WithLabels(map[string]string{RunLabel: its
// value}), and, when QUEEN_PG_HOST is set, QUEEN_PG_HOST, QUEEN_PG_PORT,
// QUEEN_PG_DB, QUEEN_PG_USER, QUEEN_PG_PASSWORD, QUEEN_PG_NUM_WORKERS,
// QUEEN_PG_DB_POOL_SIZE and QUEEN_PG_SIDECAR_POOL_SIZE as WithPostgres. A
// QUEEN_PG_PORT that is not a port number, or a size that is not a
// positive integer, is an error of Start. Options after it win.
func FromEnv() Option {
	return func(s *settings) {
		if v := strings.TrimSpace(os.Getenv(ImageEnv)); v != "" {
			WithImage(v)(s)
		}
		if v := strings.TrimSpace(os.Getenv(RunEnv)); v != "" {
			WithLabels(map[string]string{RunLabel: v})(s)
		}
		host := strings.TrimSpace(os.Getenv(PGHostEnv))
		if host == "" {
			return
		}
		pg := Postgres{
			Host:     host,
			Database: os.Getenv(PGDatabaseEnv),
			User:     os.Getenv(PGUserEnv),
			Password: os.Getenv(PGPasswordEnv),
		}
		if v := strings.TrimSpace(os.Getenv(PGPortEnv)); v != "" {
			port, err := strconv.Atoi(v)
			if err != nil || port <= 0 || port > 65535 {
				s.err = fmt.Errorf("queencontainer: %s=%q is not a port number", PGPortEnv, v)
				return
			}
			pg.Port = port
		}
		for _, z := range []struct {
			env string
			to  *int
		}{{PGNumWorkersEnv, &pg.NumWorkers}, {PGDBPoolSizeEnv, &pg.DBPoolSize}, {PGSidecarPoolSizeEnv, &pg.SidecarPoolSize}} {
			if v := strings.TrimSpace(os.Getenv(z.env)); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n <= 0 {
					s.err = fmt.Errorf("queencontainer: %s=%q is not a positive integer", z.env, v)
					return
				}
				*z.to = n
			}
		}
		WithPostgres(pg)(s)
	}
}

// ImageFromEnv returns the image named by QUEEN_IMAGE, or DefaultImage when
// it is unset or empty. It returns the value as it is, ImageNone too.
func ImageFromEnv() string {
	if v := strings.TrimSpace(os.Getenv(ImageEnv)); v != "" {
		return v
	}
	return DefaultImage
}

// disabled reports whether image turns containers off: whether it is
// ImageNone, ignoring case and surrounding space.
func disabled(image string) bool {
	return strings.EqualFold(strings.TrimSpace(image), ImageNone)
}

// DockerAvailable reports whether a Docker engine answers a ping, within
// ctx. It finds the engine the way testcontainers-go does (DOCKER_HOST,
// Docker contexts, ~/.testcontainers.properties, the usual sockets). The
// error matches ErrNoDocker and says what was tried.
func DockerAvailable(ctx context.Context) error {
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	return cli.Close()
}

// dockerClient connects to the engine and pings it; its error matches
// ErrNoDocker.
func dockerClient(ctx context.Context) (cli *testcontainers.DockerClient, err error) {
	// testcontainers-go panics on some configurations it cannot use; treat
	// that as "no engine" rather than crash the caller's test binary.
	defer func() {
		if r := recover(); r != nil {
			cli, err = nil, fmt.Errorf("%w: %v", ErrNoDocker, r)
		}
	}()
	cli, err = testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		host := cli.DaemonHost()
		_ = cli.Close()
		return nil, fmt.Errorf("%w: ping %s: %v", ErrNoDocker, host, err)
	}
	return cli, nil
}

// plan is what Start asks of the engine, computed from the settings.
type plan struct {
	env         map[string]string
	labels      map[string]string
	hostNetwork bool
	extraHosts  []string
}

// makePlan turns the settings into a plan; hostPort is the port the broker
// gets in host networking.
func (s *settings) makePlan(hostPort func() (int, error)) (plan, error) {
	p := plan{env: maps.Clone(s.env), hostNetwork: s.hostNetwork, labels: map[string]string{Label: "true"}}
	maps.Copy(p.labels, s.labels)
	if s.pg != nil {
		pg := s.pg
		host := strings.TrimSpace(pg.Host)
		if isLoopback(host) {
			p.hostNetwork = true
		}
		if strings.EqualFold(host, "host.docker.internal") {
			p.extraHosts = append(p.extraHosts, "host.docker.internal:host-gateway")
		}
		set := func(k, v string) {
			if _, ok := s.env[k]; !ok && v != "" {
				p.env[k] = v
			}
		}
		set("PG_HOST", host)
		if pg.Port != 0 {
			set("PG_PORT", strconv.Itoa(pg.Port))
		}
		set("PG_DB", pg.Database)
		set("PG_USER", pg.User)
		set("PG_PASSWORD", pg.Password)
		size := func(n, def int) string { return strconv.Itoa(cmp.Or(n, def)) }
		set("NUM_WORKERS", size(pg.NumWorkers, 2))
		set("DB_POOL_SIZE", size(pg.DBPoolSize, 5))
		set("SIDECAR_POOL_SIZE", size(pg.SidecarPoolSize, 30))
	}
	if p.hostNetwork {
		port, err := hostPort()
		if err != nil {
			return plan{}, fmt.Errorf("queencontainer: a free host port: %w", err)
		}
		if _, ok := s.env["PORT"]; !ok {
			p.env["PORT"] = strconv.Itoa(port)
		}
		if _, ok := s.env["QUEENTEST_ADDR"]; !ok {
			p.env["QUEENTEST_ADDR"] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
	}
	return p, nil
}

// url is the broker's base URL in host networking.
func (p plan) url() (string, error) {
	port := p.env["PORT"]
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("queencontainer: host networking needs a numeric PORT, have %q", port)
	}
	return "http://" + net.JoinHostPort("127.0.0.1", port), nil
}

// isLoopback reports whether host names the machine itself.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// freePort asks the kernel for a free TCP port on the loopback interface.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start runs a broker container and returns once its /health answers 200.
// The container is removed when ctx ends or on Container.Terminate,
// whichever comes first; so ctx must outlive the container's use (Run uses
// one that never ends, and the test's cleanup). When no Docker engine
// answers within the probe timeout, the error matches ErrNoDocker and
// nothing was started; ErrNoImage and ErrNoReaper say that an image is
// missing. When the image is ImageNone, the error matches ErrDisabled and
// no engine was asked. On any later failure the container, if it was
// created, is removed before Start returns, and the error carries the end
// of its log.
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
	if s.err != nil {
		return nil, s.err
	}
	if disabled(s.image) {
		return nil, ErrDisabled
	}
	p, err := s.makePlan(freePort)
	if err != nil {
		return nil, err
	}

	probeCtx, cancelProbe := context.WithTimeout(ctx, s.probeTimeout)
	cli, err := dockerClient(probeCtx)
	cancelProbe()
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	startCtx, cancel := context.WithTimeout(ctx, s.startupTimeout)
	defer cancel()

	if err := ensureImage(startCtx, cli, s.image); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoImage, s.image, err)
	}
	if cfg := testcontainers.ReadConfig(); !cfg.RyukDisabled && cfg.Config.HubImageNamePrefix == "" {
		if err := ensureImage(startCtx, cli, reaperImage()); err != nil {
			return nil, fmt.Errorf("%w: its image %s: %v (to run without it, set TESTCONTAINERS_RYUK_DISABLED=true or ryuk.disabled=true in ~/.testcontainers.properties; queencontainer removes its own containers, labelled %s=true)",
				ErrNoReaper, reaperImage(), err, Label)
		}
	}

	custom := []testcontainers.ContainerCustomizer{
		testcontainers.WithEnv(p.env),
		testcontainers.WithLabels(p.labels),
	}
	if p.hostNetwork {
		custom = append(custom, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
		}))
	} else {
		custom = append(custom, testcontainers.WithExposedPorts(HTTPPort))
	}
	if len(p.extraHosts) > 0 {
		hosts := p.extraHosts
		custom = append(custom, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.ExtraHosts = append(hc.ExtraHosts, hosts...)
		}))
	}
	if s.logger != nil {
		custom = append(custom, testcontainers.WithLogger(s.logger))
	}
	custom = append(custom, s.customizers...)

	ctr, err := testcontainers.Run(startCtx, s.image, custom...)
	if err != nil {
		if ctr != nil {
			logs := tail(ctr)
			removeQuietly(ctr) // the start error is the one to report
			return nil, fmt.Errorf("queencontainer: start %s: %w%s", s.image, err, logs)
		}
		return nil, fmt.Errorf("queencontainer: start %s: %w", s.image, err)
	}
	c := &Container{Image: s.image, ID: ctr.GetContainerID(), ctr: ctr, removed: make(chan struct{})}
	if p.hostNetwork {
		c.URL, err = p.url()
	} else if c.URL, err = endpoint(startCtx, ctr); err != nil {
		// A container that exited at once has no published port: say
		// that it stopped, which is the cause.
		if st, serr := ctr.State(startCtx); serr == nil && !st.Running {
			err = fmt.Errorf("the container stopped (status %s, exit code %d) before /health answered 200 (%v)", st.Status, st.ExitCode, err)
		}
	}
	if err == nil {
		err = waitHealthy(startCtx, ctr, c.URL)
	}
	if err != nil {
		logs := tail(ctr)
		removeQuietly(ctr)
		return nil, fmt.Errorf("queencontainer: start %s: %w%s", s.image, err, logs)
	}
	c.stopWatch = context.AfterFunc(ctx, func() {
		rmCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.remove(rmCtx)
	})
	return c, nil
}

// endpoint is the base URL of the container's published HTTPPort. The host
// is testcontainers-go's (TESTCONTAINERS_HOST_OVERRIDE, or the engine's
// address), except when the engine shares this machine's network, which
// testcontainers-go cannot tell from inside a container that runs its own
// engine: then the gateway of the container's network is one of this
// machine's addresses, and the published port is on 127.0.0.1.
func endpoint(ctx context.Context, ctr *testcontainers.DockerContainer) (string, error) {
	port, err := ctr.MappedPort(ctx, HTTPPort)
	if err != nil {
		return "", fmt.Errorf("published port: %w", err)
	}
	host, err := ctr.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("engine host: %w", err)
	}
	if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set && engineIsLocal(ctx, ctr) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port.Port()), nil
}

// engineIsLocal reports whether the gateway of one of the container's
// networks is an address of this machine.
func engineIsLocal(ctx context.Context, ctr *testcontainers.DockerContainer) bool {
	inspect, err := ctr.Inspect(ctx)
	if err != nil || inspect.NetworkSettings == nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ep := range inspect.NetworkSettings.Networks {
		if ep == nil || !ep.Gateway.IsValid() {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(net.IP(ep.Gateway.AsSlice())) {
				return true
			}
		}
	}
	return false
}

// ensureImage makes sure ref is on the engine, pulling it once if not.
func ensureImage(ctx context.Context, cli *testcontainers.DockerClient, ref string) error {
	_, err := cli.ImageInspect(ctx, ref)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect: %w", err)
	}
	pull, err := cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return fmt.Errorf("not on the engine, and pull: %w", err)
	}
	defer pull.Close()
	if err := pull.Wait(ctx); err != nil {
		return fmt.Errorf("not on the engine, and pull: %w", err)
	}
	return nil
}

// waitHealthy polls url/health until it answers 200, the container stops
// running, or ctx ends.
func waitHealthy(ctx context.Context, ctr *testcontainers.DockerContainer, url string) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("GET /health = %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		if st, err := ctr.State(ctx); err == nil && !st.Running {
			return fmt.Errorf("the container stopped (status %s, exit code %d) before /health answered 200 (last: %s)", st.Status, st.ExitCode, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("/health did not answer 200 at %s: %w (last: %s)", url, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// tail returns the last logTail lines of the container's log, as a
// suffix for an error ("" when there is none).
func tail(ctr *testcontainers.DockerContainer) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return "; its log cannot be read: " + err.Error()
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil && len(b) == 0 {
		return "; its log cannot be read: " + err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTail {
		lines = lines[len(lines)-logTail:]
	}
	text := strings.Join(lines, "\n")
	if strings.TrimSpace(text) == "" {
		return "; its log is empty"
	}
	return fmt.Sprintf("\ncontainer log (last %d lines):\n%s", len(lines), text)
}

// removeQuietly removes a container Start created but cannot hand over,
// within 30 s; its error is dropped for the start error Start reports.
func removeQuietly(ctr *testcontainers.DockerContainer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ctr.Terminate(ctx, testcontainers.StopTimeout(5*time.Second))
}

// Run starts a broker container for the test tb and removes it when the
// test and its subtests end (tb.Cleanup). When QUEEN_URL names a broker,
// Run starts nothing and asks no Docker engine, whatever the image and
// opts: it returns a Container with that URL (the first of a comma list, all
// of them in URLs) alone (no Image, ID or
// Testcontainer; Terminate does nothing), as the repository's integration
// suite prefers QUEEN_URL too. Otherwise the environment applies first
// (FromEnv: QUEEN_IMAGE, QUEEN_CONTAINER_RUN, QUEEN_PG_*), then opts. It skips tb (tb.Skip, with
// the reason) when containers are turned off (QUEEN_IMAGE=none: see
// ImageNone), when no Docker engine answers, or when the image is
// DefaultImage (nobody chose one) and it cannot be had; it fails tb
// (tb.Fatal) on any other start error, the container's log included.
func Run(tb testing.TB, opts ...Option) *Container {
	tb.Helper()
	if env := strings.TrimSpace(os.Getenv(URLEnv)); env != "" {
		var urls []string
		for u := range strings.SplitSeq(env, ",") {
			if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
				urls = append(urls, u)
			}
		}
		if len(urls) > 0 {
			tb.Logf("queencontainer: %s=%s names the broker; no container started", URLEnv, env)
			return &Container{URL: urls[0], URLs: urls}
		}
	}
	all := append([]Option{FromEnv(), WithLogger(tclog.TestLogger(tb))}, opts...)
	var s settings
	s.env = map[string]string{}
	for _, o := range all {
		if o != nil {
			o(&s)
		}
	}
	c, err := Start(context.Background(), all...)
	if errors.Is(err, ErrDisabled) || errors.Is(err, ErrNoDocker) || (errors.Is(err, ErrNoImage) && !s.imageChosen) {
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
