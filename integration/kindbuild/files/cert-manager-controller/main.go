// A cert-manager controller binary for distml's offline kind build: cert-manager's own
// cmd/controller module (tag cmd/controller/v1.17.2) is not served by the Go module
// proxy, so this main, written for distml, drives the v1.17.2 library packages itself.
// It takes the flags the v1.17.2 release manifest passes (and --kubeconfig), serves
// /livez on the healthz port, metrics on the metrics port, elects a leader and runs
// cert-manager's default controllers.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	config "github.com/cert-manager/cert-manager/internal/apis/config/controller"
	configscheme "github.com/cert-manager/cert-manager/internal/apis/config/controller/scheme"
	defaults "github.com/cert-manager/cert-manager/internal/apis/config/controller/v1alpha1"
	"github.com/cert-manager/cert-manager/pkg/acme/accounts"
	v1alpha1 "github.com/cert-manager/cert-manager/pkg/apis/config/controller/v1alpha1"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/healthz"
	dnsutil "github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/util"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/metrics"
	"github.com/cert-manager/cert-manager/pkg/util"

	// Each of these registers controllers with pkg/controller when imported.
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/vault"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/venafi"
)

func defaultConfig() (*config.ControllerConfiguration, error) {
	scheme, _, err := configscheme.NewSchemeAndCodecs()
	if err != nil {
		return nil, err
	}
	versioned := &v1alpha1.ControllerConfiguration{}
	scheme.Default(versioned)
	cfg := &config.ControllerConfiguration{}
	return cfg, scheme.Convert(versioned, cfg, nil)
}

func parseFlags(cfg *config.ControllerConfiguration) {
	fs := pflag.NewFlagSet("controller", pflag.ExitOnError)
	logf.AddFlags(&cfg.Logging, fs)
	fs.StringVar(&cfg.KubeConfig, "kubeconfig", cfg.KubeConfig, "kubeconfig (default: in-cluster)")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "watch only this namespace")
	fs.StringVar(&cfg.ClusterResourceNamespace, "cluster-resource-namespace",
		cfg.ClusterResourceNamespace, "namespace of ClusterIssuers' secrets")
	fs.StringVar(&cfg.LeaderElectionConfig.Namespace, "leader-election-namespace",
		cfg.LeaderElectionConfig.Namespace, "namespace of the leader election lease")
	fs.BoolVar(&cfg.LeaderElectionConfig.Enabled, "leader-elect",
		cfg.LeaderElectionConfig.Enabled, "elect a leader before running controllers")
	fs.StringVar(&cfg.ACMEHTTP01Config.SolverImage, "acme-http01-solver-image",
		cfg.ACMEHTTP01Config.SolverImage, "image of ACME HTTP-01 solver pods")
	fs.IntVar(&cfg.MaxConcurrentChallenges, "max-concurrent-challenges",
		cfg.MaxConcurrentChallenges, "ACME challenges processed at once")
	fs.StringVar(&cfg.HealthzListenAddress, "healthz-listen-address",
		cfg.HealthzListenAddress, "address of /livez")
	fs.StringVar(&cfg.MetricsListenAddress, "metrics-listen-address",
		cfg.MetricsListenAddress, "address of /metrics")
	_ = fs.Parse(os.Args[1:])
}

func quantity(field, value string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return q, fmt.Errorf("%s %q: %w", field, value, err)
	}
	return q, nil
}

func contextOptions(cfg *config.ControllerConfiguration) (controller.ContextOptions, error) {
	h := cfg.ACMEHTTP01Config
	acme := controller.ACMEOptions{
		HTTP01SolverImage:            h.SolverImage,
		ACMEHTTP01SolverRunAsNonRoot: h.SolverRunAsNonRoot,
		HTTP01SolverNameservers:      h.SolverNameservers,
		DNS01Nameservers:             cfg.ACMEDNS01Config.RecursiveNameservers,
		DNS01CheckRetryPeriod:        cfg.ACMEDNS01Config.CheckRetryPeriod,
		DNS01CheckAuthoritative:      !cfg.ACMEDNS01Config.RecursiveNameserversOnly,
		AccountRegistry:              accounts.NewDefaultRegistry(),
	}
	if len(acme.DNS01Nameservers) == 0 {
		acme.DNS01Nameservers = dnsutil.RecursiveNameservers
	}
	var err error
	for _, q := range []struct {
		into         *resource.Quantity
		name, value string
	}{
		{&acme.HTTP01SolverResourceRequestCPU, "solver CPU request", h.SolverResourceRequestCPU},
		{&acme.HTTP01SolverResourceRequestMemory, "solver memory request", h.SolverResourceRequestMemory},
		{&acme.HTTP01SolverResourceLimitsCPU, "solver CPU limit", h.SolverResourceLimitsCPU},
		{&acme.HTTP01SolverResourceLimitsMemory, "solver memory limit", h.SolverResourceLimitsMemory},
	} {
		if *q.into, err = quantity(q.name, q.value); err != nil {
			return controller.ContextOptions{}, err
		}
	}
	shim := cfg.IngressShimConfig
	return controller.ContextOptions{
		Kubeconfig:         cfg.KubeConfig,
		APIServerHost:      cfg.APIServerHost,
		KubernetesAPIQPS:   cfg.KubernetesAPIQPS,
		KubernetesAPIBurst: cfg.KubernetesAPIBurst,
		Namespace:          cfg.Namespace,
		Clock:              clock.RealClock{},
		Metrics:            metrics.New(logf.Log, clock.RealClock{}),
		ACMEOptions:        acme,
		SchedulerOptions:   controller.SchedulerOptions{MaxConcurrentChallenges: cfg.MaxConcurrentChallenges},
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace:        cfg.ClusterResourceNamespace,
			ClusterIssuerAmbientCredentials: cfg.ClusterIssuerAmbientCredentials,
			IssuerAmbientCredentials:        cfg.IssuerAmbientCredentials,
		},
		IngressShimOptions: controller.IngressShimOptions{
			DefaultIssuerName:                 shim.DefaultIssuerName,
			DefaultIssuerKind:                 shim.DefaultIssuerKind,
			DefaultIssuerGroup:                shim.DefaultIssuerGroup,
			DefaultAutoCertificateAnnotations: shim.DefaultAutoCertificateAnnotations,
		},
		CertificateOptions: controller.CertificateOptions{
			EnableOwnerRef:           cfg.EnableCertificateOwnerRef,
			CopiedAnnotationPrefixes: cfg.CopiedAnnotationPrefixes,
		},
	}, nil
}

// leader blocks until this process holds the lease (or ctx ends); losing it later ends
// the process, as a controller that is no longer leader must stop.
func leader(ctx context.Context, cfg *config.ControllerConfiguration, cf *controller.ContextFactory,
	adaptor *leaderelection.HealthzAdaptor, g *errgroup.Group) error {
	if !cfg.LeaderElectionConfig.Enabled {
		return nil
	}
	lctx, err := cf.Build("leader-election")
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.LeaderElectionConfig.Namespace,
		"cert-manager-controller", lctx.Client.CoreV1(), lctx.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: host + "-external-cert-manager-controller",
			EventRecorder: lctx.Recorder})
	if err != nil {
		return err
	}
	elected := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, WatchDog: adaptor,
		LeaseDuration: cfg.LeaderElectionConfig.LeaseDuration,
		RenewDeadline: cfg.LeaderElectionConfig.RenewDeadline,
		RetryPeriod:   cfg.LeaderElectionConfig.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(elected) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	g.Go(func() error {
		le.Run(ctx)
		if ctx.Err() == nil {
			return fmt.Errorf("leader election lost")
		}
		return nil
	})
	select {
	case <-elected:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func run(ctx context.Context, cfg *config.ControllerConfiguration) error {
	opts, err := contextOptions(cfg)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	cf, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	cctx, err := cf.Build()
	if err != nil {
		return err
	}
	metricsLn, err := net.Listen("tcp", cfg.MetricsListenAddress)
	if err != nil {
		return err
	}
	metricsServer := cctx.Metrics.NewServer(metricsLn)
	g.Go(func() error { <-ctx.Done(); return metricsServer.Close() })
	g.Go(func() error { _ = metricsServer.Serve(metricsLn); return nil })
	healthLn, err := net.Listen("tcp", cfg.HealthzListenAddress)
	if err != nil {
		return err
	}
	health := healthz.NewServer(cfg.LeaderElectionConfig.HealthzTimeout)
	g.Go(func() error { return health.Start(ctx, healthLn) })
	if err := leader(ctx, cfg, cf, health.LeaderHealthzAdaptor, g); err != nil {
		return fmt.Errorf("leader election: %w (and %v)", err, g.Wait())
	}
	if err := startControllers(ctx, cfg, cf, cctx, g); err != nil {
		return err
	}
	return g.Wait()
}

func startControllers(ctx context.Context, cfg *config.ControllerConfiguration,
	cf *controller.ContextFactory, cctx *controller.Context, g *errgroup.Group) error {
	known := controller.Known()
	for _, name := range defaults.DefaultEnabledControllers {
		construct, ok := known[name]
		if !ok {
			logf.Log.Info("default controller not compiled in", "controller", name)
			continue
		}
		if cfg.Namespace != "" && name == "clusterissuers" {
			continue
		}
		c, err := construct(cf)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		logf.Log.Info("starting controller", "controller", name)
		g.Go(func() error { return c.Run(cfg.NumberOfConcurrentWorkers, ctx) })
	}
	cctx.SharedInformerFactory.Start(ctx.Done())
	cctx.KubeSharedInformerFactory.Start(ctx.Done())
	cctx.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	return nil
}

func main() {
	logf.InitLogs()
	defer logf.FlushLogs()
	cfg, err := defaultConfig()
	if err == nil {
		parseFlags(cfg)
		err = logf.ValidateAndApply(&cfg.Logging)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		logf.Log.Info("starting cert-manager controller (distml kindbuild main)",
			"version", util.AppVersion, "commit", util.AppGitCommit)
		err = run(logf.NewContext(ctx, logf.Log, "controller"), cfg)
	}
	if err != nil {
		logf.Log.Error(err, "cert-manager controller failed")
		logf.FlushLogs()
		os.Exit(1)
	}
}
