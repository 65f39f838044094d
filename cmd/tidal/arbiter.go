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

// runArbiter is `tidal arbiter [--config FILE]`: the central arbiter, standalone (bearer tokens
// from a file, policy from a file polled for changes, state in a file under the state dir).
// See docs/arbiter.md.
func runArbiter(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("arbiter", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML config file (see docs/arbiter.md); defaults apply without one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := arbiter.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = arbiter.LoadConfig(*configPath); err != nil {
			return err
		}
	}
	log := newLogger(cfg.LogLevel, os.Stderr)

	tokens, err := arbiter.LoadTokenFile(cfg.TokensFile)
	if err != nil {
		return err
	}
	store, err := arbiter.NewFileStore(cfg.StateDir)
	if err != nil {
		return err
	}
	srv, err := arbiter.NewServer(arbiter.Options{
		Policy:          arbiter.NewFilePolicy(cfg.PolicyFile),
		Auth:            tokens,
		Store:           store,
		LeaseTTL:        cfg.LeaseTTL,
		NodeTimeout:     cfg.NodeTimeout,
		MaxClockSkew:    cfg.MaxClockSkew,
		MaxReportBytes:  cfg.MaxReportBytes,
		PollInterval:    cfg.PollInterval,
		PersistInterval: cfg.PersistInterval,
		Logger:          log,
	})
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
	log.Info("arbiter listening", "url", scheme+"://"+ln.Addr().String(), "policy", p.Source,
		"queues", len(p.Queues), "rules", len(p.Rules), "tokens", tokens.Len(), "stateDir", cfg.StateDir,
		"leaseTTL", cfg.LeaseTTL, "nodeTimeout", cfg.NodeTimeout)
	err = srv.Serve(ctx, ln)
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
