// Package arbiterapi is the protocol between a node agent and the arbiter: what an agent
// reports (Report), what it gets back (Lease, Grant), the rules a report must follow
// (Report.Validate, DecodeReport), the error answers (FieldErrors, ErrorBody), and the client
// an agent calls (Client.Report).
//
// Read it in this order:
//
//   - report.go, lease.go: what an agent sends and what it gets back, and what a valid report is.
//   - decode.go: decoding a report from JSON, naming the field of every problem.
//   - errors.go: field errors and the body of every error answer.
//   - client.go: what an agent calls.
//
// It imports nothing of the arbiter's server (package arbiter, which implements the other
// side), so an agent that reports to an arbiter links only this. docs/arbiter-openapi.yaml is
// the API reference.
package arbiterapi
