package transport

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var nodes = []string{"http://broker-a:6632", "http://broker-b:6632", "http://broker-c:6632"}

// owners returns the URL index pick gives each of n keys.
func owners(e *endpoints, n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k], _ = e.pick(fmt.Sprintf("orders-%d:*:billing", k))
	}
	return out
}

func TestAffinitySpreadsAndIsStable(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := newEndpoints(nodes, 5*time.Second, clock.Now, Affinity)
	const keys = 3000
	first := owners(e, keys)
	share := make([]int, len(nodes))
	for _, i := range first {
		share[i]++
	}
	for i, n := range share {
		// An even split is 1000 each; these URLs give 1009, 1011, 980.
		assert.Greater(t, n, 850, "share of %s: %v", nodes[i], share)
		assert.Less(t, n, 1150, "share of %s: %v", nodes[i], share)
	}
	assert.Equal(t, first, owners(e, keys), "the same key goes to the same URL")

	// Another client listing the URLs in another order puts each key on
	// the same URL.
	rev := newEndpoints([]string{nodes[2], nodes[0], nodes[1]}, 5*time.Second, clock.Now, Affinity)
	for k, i := range owners(rev, keys) {
		require.Equal(t, nodes[first[k]], rev.urls[i].base, "key %d", k)
	}
}

func TestAffinityMovesOnlyTheRestingShare(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := newEndpoints(nodes, 5*time.Second, clock.Now, Affinity)
	const keys = 3000
	before := owners(e, keys)

	require.True(t, e.markDown(1))
	clock.Advance(4 * time.Second) // within the pause
	during := owners(e, keys)
	moved := map[int]int{}
	for k := range before {
		if before[k] != 1 {
			require.Equal(t, before[k], during[k], "key %d of a URL not resting moved", k)
			continue
		}
		require.NotEqual(t, 1, during[k], "key %d stayed on the resting URL", k)
		moved[during[k]]++
	}
	assert.Positive(t, moved[0], "the resting URL's keys go to both others: %v", moved)
	assert.Positive(t, moved[2], "the resting URL's keys go to both others: %v", moved)

	// After the pause the URL takes its keys back, with no probe.
	clock.Advance(2 * time.Second)
	assert.Equal(t, before, owners(e, keys))

	// A URL that answers is back at once.
	e.markDown(1)
	e.markUp(1)
	assert.Equal(t, before, owners(e, keys))
}

func TestBalanceWithoutKeyAndWhenAllRest(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	seq := func(e *endpoints, key string, n int) []int {
		out := make([]int, n)
		for j := range out {
			out[j], _ = e.pick(key)
		}
		return out
	}
	for _, b := range []Balance{RoundRobin, Affinity} {
		e := newEndpoints(nodes, 5*time.Second, clock.Now, b)
		assert.Equal(t, []int{0, 1, 2, 0, 1, 2}, seq(e, "", 6), "balance %d without a key: round robin", b)
		e.markDown(1)
		assert.Equal(t, []int{0, 2, 2, 0, 2, 2}, seq(e, "", 6), "balance %d: the resting URL is skipped", b)
	}
	rr := newEndpoints(nodes, 5*time.Second, clock.Now, RoundRobin)
	assert.Equal(t, []int{0, 1, 2}, seq(rr, "same-key", 3), "round robin ignores the key")

	fo := newEndpoints(nodes, 5*time.Second, clock.Now, Failover)
	assert.Equal(t, []int{0, 0}, seq(fo, "any", 2))
	fo.markDown(0)
	assert.Equal(t, []int{1, 1}, seq(fo, "any", 2))

	// Every URL resting: the one that failed longest ago, whatever the balance.
	for _, b := range []Balance{Failover, RoundRobin, Affinity} {
		e := newEndpoints(nodes, 5*time.Second, clock.Now, b)
		e.markDown(2)
		e.markDown(0)
		e.markDown(1)
		i, _ := e.pick("orders:*:billing")
		assert.Equal(t, 2, i, "balance %d", b)
	}
}

// A call under Affinity goes to its key's URL; when that URL fails, the
// retry goes to the next URL of the ring, and the other keys stay put.
func TestDoByAffinity(t *testing.T) {
	var bDown atomic.Bool
	srv := make([]*server, 3)
	for i := range srv {
		srv[i] = newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if i == 1 && bDown.Load() {
				drop()
			}
			_, _ = io.WriteString(w, okBody)
		})
	}
	urls := []string{srv[0].URL, srv[1].URL, srv[2].URL}
	tr, _, clock := newTransport(t, Config{URLs: urls, Balance: Affinity, Retry: RetryPolicy{FailoverPause: 5 * time.Second}})
	// One key per URL, found on the transport's own ring.
	key := map[int]string{}
	for k := 0; len(key) < 3; k++ {
		s := fmt.Sprintf("q%d:*:g", k)
		if i, _ := tr.eps.pick(s); key[i] == "" {
			key[i] = s
		}
	}
	do := func(k string) string {
		t.Helper()
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodPost, Path: "/x", Key: k})
		require.NoError(t, err)
		return resp.URL
	}
	for i := range 3 {
		for range 3 {
			assert.Equal(t, urls[i], do(key[i]))
		}
		assert.Equal(t, 3, srv[i].Hits())
	}

	bDown.Store(true)
	to := do(key[1])
	assert.NotEqual(t, urls[1], to, "the retry left the failing URL")
	assert.Equal(t, 4, srv[1].Hits(), "one failed attempt")
	assert.Equal(t, to, do(key[1]), "resting: its key stays on the next URL")
	assert.Equal(t, 4, srv[1].Hits())
	assert.Equal(t, urls[0], do(key[0]))
	assert.Equal(t, urls[2], do(key[2]))

	bDown.Store(false)
	clock.Advance(6 * time.Second)
	assert.Equal(t, urls[1], do(key[1]), "after the pause the URL takes its key back")
}

func TestConfigRefusesUnknownBalance(t *testing.T) {
	_, err := New(Config{URLs: nodes, Balance: Affinity + 1})
	require.ErrorContains(t, err, "unknown balance")
}

// The ring's hash is 64-bit FNV-1a spread by fmix64, allocation-free.
func TestHashKey(t *testing.T) {
	h := fnv.New64a()
	_, _ = h.Write([]byte("orders:*:billing"))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	assert.Equal(t, x, hashKey("orders:*:billing"))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = hashKey("orders:*:billing") }))
}

// Owner names the URL a Transport of the same URLs sends each key to,
// whatever the spelling of the URLs; a call without a key has no owner.
func TestOwner(t *testing.T) {
	urls := []string{"http://a:6632", "http://b:6632/", "https://c/prefix"}
	tr, err := New(Config{URLs: urls, Balance: Affinity})
	require.NoError(t, err)
	seen := make([]int, len(urls))
	for k := range 300 {
		key := fmt.Sprintf("q%d:*:g", k)
		want, _ := tr.eps.pick(key)
		got, err := Owner(urls, key)
		require.NoError(t, err)
		require.Equal(t, want, got, "key %s", key)
		got, err = Owner([]string{"http://a:6632/", "http://b:6632", "https://c/prefix/"}, key)
		require.NoError(t, err)
		require.Equal(t, want, got, "key %s, URLs spelt with other slashes", key)
		seen[got]++
	}
	for i, n := range seen {
		assert.Positive(t, n, "URL %d owns keys: %v", i, seen)
	}
	one, err := Owner(urls[:1], "k")
	assert.NoError(t, err)
	assert.Equal(t, 0, one)
	for _, c := range []struct {
		urls []string
		key  string
	}{{nil, "k"}, {urls, ""}, {[]string{"ftp://x"}, "k"}} {
		_, err := Owner(c.urls, c.key)
		assert.Error(t, err, "%q %q", c.urls, c.key)
	}
}

// allResting: only once every URL failed within its pause; one URL back
// (its pause over, or an answer) ends it.
func TestAllResting(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := newEndpoints(nodes[:2], 5*time.Second, clock.Now, Failover)
	assert.False(t, e.allResting())
	e.markDown(0)
	assert.False(t, e.allResting(), "b is up")
	e.markDown(1)
	assert.True(t, e.allResting())
	e.markUp(1)
	assert.False(t, e.allResting(), "b answered")
	e.markDown(1)
	clock.Advance(5 * time.Second)
	assert.False(t, e.allResting(), "the pauses are over")
}
