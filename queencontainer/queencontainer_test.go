package queencontainer_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

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

// TestRunServesHealth starts the real broker when Docker is there (skipped
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
