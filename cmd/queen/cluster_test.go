package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/queen-go/queen/queentest"
)

// The brokers of a cluster: --url repeated or a comma list, or QUEEN_URL a
// comma list. The client spreads its pushes over all of them, and a
// stopped one is failed over.
func TestClusterURLs(t *testing.T) {
	c := queentest.StartCluster(t, 3)
	u := c.URLs()
	pushes := func() []int {
		out := make([]int, 3)
		for i, s := range c.Nodes() {
			out[i] = s.Requests(queentest.RoutePush)
			s.ResetCounters()
		}
		return out
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"QUEEN_URL comma list", map[string]string{"QUEEN_URL": strings.Join(u, ", ")}, nil},
		{"--url repeated and a comma list", map[string]string{"QUEEN_URL": "http://127.0.0.1:1"}, []string{"--url", u[0], "--url", u[1] + "," + u[2]}},
	} {
		// 30 queues over 3 brokers: one gets none with p = 3·(2/3)^30 ≈ 2e-5.
		for q := range 30 {
			args := append([]string{"push", fmt.Sprintf("q%d", q), `{"n":1}`}, tc.args...)
			runEnv(t, tc.env, "", args...).want(t, exitOK)
		}
		for i, n := range pushes() {
			if n == 0 {
				t.Errorf("%s: broker %d got no push", tc.name, i)
			}
		}
	}

	c.Node(0).Stop()
	env := map[string]string{"QUEEN_URL": strings.Join(u, ",")}
	for q := range 10 {
		runEnv(t, env, "", "push", fmt.Sprintf("q%d", q), `{"n":2}`).want(t, exitOK)
	}
	if p := pushes(); p[0] != 0 || p[1]+p[2] != 10 {
		t.Errorf("pushes per broker with broker 0 down: %v", p)
	}
}
