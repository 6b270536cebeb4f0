package queencontainer

import (
	"reflect"
	"testing"
)

func planOf(t *testing.T, opts ...Option) plan {
	t.Helper()
	s := settings{env: map[string]string{"QUEEN_RAFT_DIR": DataDir}}
	for _, o := range opts {
		o(&s)
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	p, err := s.makePlan(func() (int, error) { return 40123, nil })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanLoopbackPostgres: a database on the host's loopback means host
// networking, with the broker on the port picked for it.
func TestPlanLoopbackPostgres(t *testing.T) {
	p := planOf(t, WithPostgres(Postgres{Host: "127.0.0.1", Port: 5433, Database: "queen", User: "u", Password: "pw"}))
	if !p.hostNetwork {
		t.Error("a loopback database did not turn on host networking")
	}
	want := map[string]string{
		"QUEEN_RAFT_DIR": DataDir,
		"PG_HOST":        "127.0.0.1", "PG_PORT": "5433", "PG_DB": "queen", "PG_USER": "u", "PG_PASSWORD": "pw",
		"NUM_WORKERS": "2", "DB_POOL_SIZE": "5", "SIDECAR_POOL_SIZE": "30",
		"PORT": "40123", "QUEENTEST_ADDR": "127.0.0.1:40123",
	}
	if !reflect.DeepEqual(p.env, want) {
		t.Errorf("env = %v\nwant %v", p.env, want)
	}
	if u, err := p.url(); err != nil || u != "http://127.0.0.1:40123" {
		t.Errorf("url = %q, %v", u, err)
	}
}

// TestPlanGatewayPostgres: host.docker.internal is mapped to the host's
// gateway and stays on a bridge; empty fields keep the broker's defaults;
// WithEnv wins over what WithPostgres sets.
func TestPlanGatewayPostgres(t *testing.T) {
	p := planOf(t, WithPostgres(Postgres{Host: "host.docker.internal"}), WithEnv("DB_POOL_SIZE", "20"))
	if p.hostNetwork {
		t.Error("host.docker.internal turned on host networking")
	}
	if !reflect.DeepEqual(p.extraHosts, []string{"host.docker.internal:host-gateway"}) {
		t.Errorf("extra hosts = %v", p.extraHosts)
	}
	for _, k := range []string{"PG_PORT", "PG_DB", "PG_USER", "PG_PASSWORD", "PORT"} {
		if v, ok := p.env[k]; ok {
			t.Errorf("env %s = %q, want it unset", k, v)
		}
	}
	if p.env["DB_POOL_SIZE"] != "20" || p.env["PG_HOST"] != "host.docker.internal" {
		t.Errorf("env = %v", p.env)
	}
}

// TestFromEnv reads the image and the database from the environment.
func TestFromEnv(t *testing.T) {
	t.Setenv(ImageEnv, "queen-real:0.15.1")
	t.Setenv(PGHostEnv, "localhost")
	t.Setenv(PGPortEnv, "5432")
	t.Setenv(PGDatabaseEnv, "")
	t.Setenv(PGUserEnv, "queen")
	t.Setenv(PGPasswordEnv, "secret")
	s := settings{env: map[string]string{}, image: DefaultImage}
	FromEnv()(&s)
	if s.err != nil || s.image != "queen-real:0.15.1" || !s.imageChosen {
		t.Fatalf("settings = %+v", s)
	}
	want := Postgres{Host: "localhost", Port: 5432, User: "queen", Password: "secret"}
	if s.pg == nil || *s.pg != want {
		t.Errorf("database = %+v, want %+v", s.pg, want)
	}

	t.Setenv(ImageEnv, "")
	t.Setenv(PGHostEnv, "")
	s = settings{env: map[string]string{}, image: DefaultImage}
	FromEnv()(&s)
	if s.pg != nil || s.imageChosen || s.image != DefaultImage {
		t.Errorf("FromEnv with nothing set changed %+v", s)
	}
}

// TestPlanLabels: the package's label is always there, WithLabels adds to
// it, and QUEEN_CONTAINER_RUN becomes the run label.
func TestPlanLabels(t *testing.T) {
	t.Setenv(RunEnv, "")
	if p := planOf(t, FromEnv()); !reflect.DeepEqual(p.labels, map[string]string{Label: "true"}) {
		t.Errorf("labels with no run = %v, want only %s=true", p.labels, Label)
	}
	t.Setenv(RunEnv, " ci-42 ")
	p := planOf(t, FromEnv(), WithLabels(map[string]string{"team": "a"}), WithLabels(map[string]string{"team": "b"}))
	want := map[string]string{Label: "true", RunLabel: "ci-42", "team": "b"}
	if !reflect.DeepEqual(p.labels, want) {
		t.Errorf("labels = %v\nwant %v", p.labels, want)
	}
	// An option after FromEnv wins, as for the image.
	p = planOf(t, FromEnv(), WithLabels(map[string]string{RunLabel: "mine"}))
	if p.labels[RunLabel] != "mine" {
		t.Errorf("run label after WithLabels = %q, want mine", p.labels[RunLabel])
	}
}

// TestWithLabelsRejects: an empty key, or the package's own label, is an
// option error (reported by Start before it talks to any engine).
func TestWithLabelsRejects(t *testing.T) {
	for name, labels := range map[string]map[string]string{
		"empty key":     {" ": "x"},
		"package label": {Label: "false"},
	} {
		t.Run(name, func(t *testing.T) {
			s := settings{env: map[string]string{}}
			WithLabels(labels)(&s)
			if s.err == nil {
				t.Fatalf("WithLabels(%v) was accepted", labels)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true,
		"db": false, "10.0.0.1": false, "host.docker.internal": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestPostgresSizes: the broker's pool sizes come from Postgres (zero: the
// test machine's), and from QUEEN_PG_NUM_WORKERS, QUEEN_PG_DB_POOL_SIZE and
// QUEEN_PG_SIDECAR_POOL_SIZE through FromEnv; a size that is not a
// positive integer is an error.
func TestPostgresSizes(t *testing.T) {
	sizes := func(p plan) [3]string {
		return [3]string{p.env["NUM_WORKERS"], p.env["DB_POOL_SIZE"], p.env["SIDECAR_POOL_SIZE"]}
	}
	if got := sizes(planOf(t, WithPostgres(Postgres{Host: "db", DBPoolSize: 12}))); got != [3]string{"2", "12", "30"} {
		t.Errorf("sizes = %v, want [2 12 30]", got)
	}
	t.Setenv(PGHostEnv, "db")
	t.Setenv(PGNumWorkersEnv, "4")
	t.Setenv(PGDBPoolSizeEnv, " 20 ")
	t.Setenv(PGSidecarPoolSizeEnv, "")
	if got := sizes(planOf(t, FromEnv())); got != [3]string{"4", "20", "30"} {
		t.Errorf("sizes from the environment = %v, want [4 20 30]", got)
	}
	// WithEnv still wins.
	if got := sizes(planOf(t, FromEnv(), WithEnv("NUM_WORKERS", "8"))); got != [3]string{"8", "20", "30"} {
		t.Errorf("sizes with WithEnv = %v, want [8 20 30]", got)
	}
	for _, bad := range []string{"0", "-1", "many"} {
		t.Setenv(PGSidecarPoolSizeEnv, bad)
		s := settings{env: map[string]string{}}
		FromEnv()(&s)
		if s.err == nil {
			t.Errorf("%s=%q accepted", PGSidecarPoolSizeEnv, bad)
		}
	}
	s := settings{env: map[string]string{}}
	WithPostgres(Postgres{Host: "db", NumWorkers: -1})(&s)
	if s.err == nil {
		t.Error("a negative NumWorkers accepted")
	}
}
