// A cert-manager webhook binary for distml's offline kind build: cert-manager's own
// cmd/webhook module (tag cmd/webhook/v1.17.2) is not served by the Go module proxy, so
// this main, written for distml, parses the webhook's flags with the v1.17.2 options
// package and runs the v1.17.2 webhook server.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/cert-manager/cert-manager/internal/webhook"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
	"github.com/cert-manager/cert-manager/pkg/webhook/options"
)

func run(ctx context.Context) error {
	cfg, err := options.NewWebhookConfiguration()
	if err != nil {
		return err
	}
	fs := pflag.NewFlagSet("webhook", pflag.ExitOnError)
	options.AddConfigFlags(fs, cfg) // the logging flags (--v) included
	_ = fs.Parse(os.Args[1:])
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return err
	}
	if err := logf.ValidateAndApply(&cfg.Logging); err != nil {
		return err
	}
	log := logf.FromContext(ctx, "webhook")
	log.Info("starting cert-manager webhook (distml kindbuild main)",
		"version", util.AppVersion, "commit", util.AppGitCommit)
	srv, err := webhook.NewCertManagerWebhookServer(log, *cfg)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

func main() {
	logf.InitLogs()
	defer logf.FlushLogs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(logf.NewContext(ctx, logf.Log)); err != nil {
		logf.Log.Error(err, "cert-manager webhook failed")
		logf.FlushLogs()
		os.Exit(1)
	}
}
