package queentest_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/queen-go/queen/queentest"
)

// A test waits for a request to reach the broker, not for a time: here a
// long poll, parked at the broker, is seen before it is answered.
func ExampleServer_AwaitRequests() {
	srv := queentest.NewServer()
	defer srv.Close()

	answered := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + "/api/v1/pop/queue/orders?wait=true&timeout=60000")
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	if err := srv.AwaitRequests(context.Background(), queentest.RoutePop, 1); err != nil {
		panic(err)
	}
	fmt.Println("parked pops:", srv.Requests(queentest.RoutePop))
	srv.Close() // ends the parked long poll
	<-answered
	// Output:
	// parked pops: 1
}
