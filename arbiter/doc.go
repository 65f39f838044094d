// Package arbiter is tidal's central arbiter: node agents report what they can lend, the
// arbiter applies the lending policy and answers each report with the node's lease.
//
// Read it in this order:
//
//   - arbiterapi/: the protocol, shared with the agents: what an agent sends (Report), what it
//     gets back (Lease, Grant), decoding and validating a report, error answers, and the
//     client an agent calls (Client.Report).
//   - window.go: daily time windows in a time zone ("22:00-08:00" in Europe/Berlin),
//     across midnight and DST changes.
//   - policy.go, yaml.go: the policy file (queues, the shared queue, lending rules), parsed
//     strictly; every problem is reported with file:line: key.
//   - decide.go: Decide, the pure function from (policy, clock, report, previous lease) to a lease.
//   - view.go: the cluster view, pure and clock-injected: nodes, their leases, expiry, and the
//     per-queue and per-rule aggregates.
//   - auth.go, store.go, source.go: the parts a Kubernetes deployment swaps out, each behind a
//     small interface (Authenticator, Store, PolicySource).
//   - server.go, metrics.go: the HTTP JSON API and its Prometheus metrics. Under leader
//     election (Options.Leadership) only the leader decides; followers answer 503.
//   - kube.go and kube_*.go, leader.go: the kubernetes mode. TokenReviewer (agents' tokens
//     through TokenReviews, bound to their pod's node), ConfigMapPolicy, NodeStore (lending
//     rules select by the Node's labels; leases kept in a Node annotation), LeaderElection (a
//     coordination.k8s.io Lease), and Kubernetes, which wires them to the API server.
//   - config.go: the `tidal arbiter` process configuration.
//
// Nothing here holds global mutable state; every goroutine is started by Server.Run,
// Server.Serve, Kubernetes.Start or Kubernetes.Serve and stops when their context ends (or
// Kubernetes.Stop is called). docs/arbiter.md is the operator's guide and
// docs/arbiter-openapi.yaml the API reference.
package arbiter
