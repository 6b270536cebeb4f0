// Command queentest runs the in-memory Queen broker of package queentest as
// a standalone program, so that a service in any language can use it during
// development:
//
//	queentest -addr 127.0.0.1:6632 [-profile 2.x|0.15.1]
//
// It serves the Queen 2.x HTTP API, or with -profile 0.15.1 that of a Queen
// 0.15.1 broker (see queentest.Broker015), until interrupted (SIGINT or
// SIGTERM).
// Everything is kept in memory and lost on exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/queen-go/queen/queentest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6632", "listen address")
	verbose := flag.Bool("v", false, "log every request to stderr")
	profileName := flag.String("profile", string(queentest.Profile2x), "broker generation to imitate: 2.x or 0.15.1")
	flag.Parse()
	profile, err := queentest.ParseProfile(*profileName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// Signals are caught before the address is announced, so that a
	// supervisor that reads it and stops us at once gets a clean stop.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := queentest.Listen(queentest.WithAddr(*addr), queentest.WithLogger(logger), queentest.WithProfile(profile))
	if err != nil {
		fmt.Fprintln(os.Stderr, "queentest:", err)
		stop()
		os.Exit(1)
	}
	api := queentest.Version
	if profile == queentest.Profile015 {
		api = string(queentest.Profile015)
	}
	fmt.Printf("queentest broker (Queen %s API, in memory) listening on %s\n", api, srv.URL)

	<-ctx.Done()
	srv.Close()
	fmt.Println("queentest broker stopped")
}
