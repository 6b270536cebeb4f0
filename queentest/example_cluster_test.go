package queentest_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/queen-go/queen/queentest"
)

// A cluster serves one broker state on several nodes, as 0.15.1 brokers
// over one PostgreSQL do: what is pushed through one node is popped
// through another, even once the first is down. (The client's own
// example, queen.ExampleWithLoadBalancing, spreads its calls over them.)
func ExampleCluster() {
	cluster := queentest.NewCluster(2)
	defer cluster.Close()
	first, second := cluster.Node(0), cluster.Node(1)

	resp, err := http.Post(first.URL+"/api/v1/push", "application/json",
		strings.NewReader(`{"items":[{"queue":"orders","payload":{"total":10}}]}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("push through node 0:", resp.StatusCode)

	first.Stop()
	if _, err := http.Get(first.URL + "/health"); err != nil {
		fmt.Println("node 0 is down")
	}
	resp, err = http.Get(second.URL + "/api/v1/pop/queue/orders?wait=false")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("pop through node 1:", resp.StatusCode)
	fmt.Println("pops per node:", first.Requests(queentest.RoutePop), second.Requests(queentest.RoutePop))

	if err := first.Resume(); err != nil {
		panic(err)
	}
	resp, err = http.Get(first.URL + "/health")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("node 0 is back:", resp.StatusCode)
	// Output:
	// push through node 0: 201
	// node 0 is down
	// pop through node 1: 200
	// pops per node: 0 1
	// node 0 is back: 200
}
