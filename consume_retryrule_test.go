package queen_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/queen-go/queen"
)

// A failure that asking again cannot change, without any answer (here a
// broker whose TLS certificate the client does not trust), ends Execute
// too, by the same rule as the transport's.
func TestConsumeUntrustedCertificateEndsExecute(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors are expected
	srv.StartTLS()
	defer srv.Close()
	c, err := queen.New(srv.URL, queen.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = execute(t, context.Background(), func(ctx context.Context) error {
		return c.Queue("q").Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
	})
	var cv *tls.CertificateVerificationError
	if !errors.As(err, &cv) {
		t.Fatalf("Execute = %v, want the certificate verification error", err)
	}
}
