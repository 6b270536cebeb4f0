// Package integration is the scenario suite of queen-go: one set of tests,
// run through the client against whichever broker is at hand.
//
//   - QUEEN_URL set: that broker (any version). Features it lacks, such as
//     fetch or conflation on old brokers, are detected and the scenarios that
//     need them are skipped with the reason.
//   - Else, when a Docker engine answers: a broker container (package
//     queencontainer) running QUEEN_IMAGE, by default
//     queencontainer.DefaultImage. QUEEN_IMAGE=none turns this path off.
//   - Else the in-memory broker of package queentest, in-process. This is the
//     CI path; scenarios that need fault injection run only there.
//
// The fleet scenario (TestFleetKillAndStop, issue 35) builds
// internal/fleetworker with go build and runs it as worker processes that
// reach the broker over HTTP, SIGKILLs one and SIGTERMs another.
// QUEEN_FLEET_MESSAGES sets its backlog (default 3000) for a run by hand;
// QUEEN_FLEET_LOGS names a directory where the workers' event logs are kept.
//
// The documentation page's snippets, pasted into snippets_page*_test.go,
// are checked against the page (TestPageSnippetsArePastedUnchanged) where
// it is found: QUEEN_SPEC_PAGE, else shared/spec/pop-and-consume.md in the
// working directory or a parent. A clean clone has no page beside it, and
// the check is skipped there.
//
// Every scenario uses its own queue names, so the suite can share a broker
// with other users. The package has no API: everything is in its tests.
package integration
