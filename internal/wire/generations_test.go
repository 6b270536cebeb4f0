package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGenerationOf(t *testing.T) {
	assert.Equal(t, "2.x", GenerationOf(HealthResponse{Status: "healthy", Engine: "raft"}).Name)
	assert.Equal(t, "0.15.1", GenerationOf(HealthResponse{Status: "healthy", Version: "1.0.0", Database: "connected"}).Name)
}

func TestGenerationServes(t *testing.T) {
	g2, g015 := Gen2x(), Gen015()
	for _, r := range routes {
		for _, m := range []string{"GET", "POST", "DELETE"} {
			assert.True(t, g2.Serves(m, r), "2.x %s %s", m, r)
		}
	}
	assert.True(t, g2.Serves("GET", RouteMessage))
	assert.True(t, g2.Serves("DELETE", RouteMessage))
	assert.True(t, g015.Serves("GET", RouteMessage))
	assert.True(t, g015.Serves("DELETE", RouteMessage))
	assert.False(t, g015.Serves("GET", RoutePopDiscover))
	assert.False(t, g015.Serves("POST", RouteFetch))
	assert.False(t, g015.Serves("DELETE", RouteDLQ))
	assert.True(t, g015.Serves("GET", RouteDLQ))
	assert.True(t, g015.Serves("GET", RoutePopQueue))
}

func TestEmptyPopError(t *testing.T) {
	for _, e := range []string{"no_available_partition", "partition_not_found", "lease_held"} {
		assert.True(t, EmptyPopError(e), e)
		assert.True(t, Gen015().EmptyPop(e), e)
		assert.False(t, Gen2x().EmptyPop(e), e)
	}
	assert.False(t, EmptyPopError("ERROR:  relation does not exist"))
	assert.False(t, EmptyPopError(""))
}
