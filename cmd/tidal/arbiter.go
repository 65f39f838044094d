package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/tidalqos/tidal/arbiter"
)

// runArbiter is `tidal arbiter [--config FILE] [--kubeconfig FILE]`: the central arbiter,
// standalone (bearer tokens from a file, policy from a file polled for changes, state in a
// file under the state dir) or in Kubernetes (TokenReviews, a policy ConfigMap, leases on the
// Node objects, leader election). See docs/arbiter.md.
func runArbiter(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("arbiter", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML config file (see docs/arbiter.md); defaults apply without one")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (kubernetes mode); overrides kubernetes.kubeconfig")
	podName := fs.String("pod-name", os.Getenv("POD_NAME"), "kubernetes mode: this replica's own Pod, labelled "+arbiter.RoleLabel+" leader or follower for the Service (default $POD_NAME)")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	cfg := arbiter.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = arbiter.LoadConfig(*configPath); err != nil {
			return err
		}
	}
	if *kubeconfig != "" {
		if cfg.Mode != arbiter.ModeKubernetes {
			return fmt.Errorf("--kubeconfig: the arbiter is in %s mode: set \"mode: kubernetes\" in the config", cfg.Mode)
		}
		cfg.Kubernetes.Kubeconfig = *kubeconfig
	}
	if isSet(fs, "pod-name") && cfg.Mode != arbiter.ModeKubernetes {
		return fmt.Errorf("--pod-name: the arbiter is in %s mode: set \"mode: kubernetes\" in the config", cfg.Mode)
	}
	cfg.Kubernetes.PodName = *podName
	log, closeLog := newLogger(cfg.LogLevel, os.Stderr)
	defer closeLog()
	opts := arbiter.Options{
		LeaseTTL:        cfg.LeaseTTL,
		NodeTimeout:     cfg.NodeTimeout,
		MaxClockSkew:    cfg.MaxClockSkew,
		MaxReportBytes:  cfg.MaxReportBytes,
		PollInterval:    cfg.PollInterval,
		PersistInterval: cfg.PersistInterval,
		Logger:          log,
	}

	var kube *arbiter.Kubernetes
	var startLog []any
	if cfg.Mode == arbiter.ModeKubernetes {
		var err error
		if kube, err = arbiter.NewKubernetes(cfg.Kubernetes, log); err != nil {
			return err
		}
		if err := kube.Start(ctx); err != nil {
			return err
		}
		defer kube.Stop()
		kube.Apply(&opts)
		k := cfg.Kubernetes
		startLog = []any{"mode", cfg.Mode, "namespace", k.Namespace, "lease", k.LeaseName, "identity", kube.Election.Identity(),
			"pod", k.PodName, "agents", k.AgentServiceAccount, "audiences", k.Audiences, "tokenCacheTTL", k.TokenCacheTTL}
	} else {
		tokens, err := arbiter.LoadTokenFile(cfg.TokensFile)
		if err != nil {
			return err
		}
		store, err := arbiter.NewFileStore(cfg.StateDir)
		if err != nil {
			return err
		}
		opts.Policy, opts.Auth, opts.Store = arbiter.NewFilePolicy(cfg.PolicyFile), tokens, store
		startLog = []any{"mode", cfg.Mode, "tokens", tokens.Len(), "stateDir", cfg.StateDir}
	}
	srv, err := arbiter.NewServer(opts)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return err
	}
	scheme := "http"
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("tls: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	} else if host, _, _ := net.SplitHostPort(cfg.ListenAddress); !isLoopback(host) {
		log.Warn("serving plain HTTP on a non-loopback address: bearer tokens travel in clear; set tlsCertFile and tlsKeyFile", "address", cfg.ListenAddress)
	}
	p := srv.Policy()
	log.Info("arbiter listening", append([]any{"url", scheme + "://" + ln.Addr().String(), "policy", p.Source,
		"queues", len(p.Queues), "rules", len(p.Rules), "leaseTTL", cfg.LeaseTTL, "nodeTimeout", cfg.NodeTimeout}, startLog...)...)
	if kube != nil {
		err = kube.Serve(ctx, srv, ln)
	} else {
		err = srv.Serve(ctx, ln)
	}
	log.Info("arbiter stopped", "err", err)
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
