// A cert-manager cainjector binary for distml's offline kind build: cert-manager's own
// cmd/cainjector module (tag cmd/cainjector/v1.17.2) is not served by the Go module
// proxy, so this main, written for distml, runs the v1.17.2 injectors
// (pkg/controller/cainjector) in a controller-runtime manager with the configuration's
// defaults and the flags the release manifest passes.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	config "github.com/cert-manager/cert-manager/internal/apis/config/cainjector"
	configscheme "github.com/cert-manager/cert-manager/internal/apis/config/cainjector/scheme"
	v1alpha1 "github.com/cert-manager/cert-manager/pkg/apis/config/cainjector/v1alpha1"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func configuration() (*config.CAInjectorConfiguration, error) {
	scheme, _, err := configscheme.NewSchemeAndCodecs()
	if err != nil {
		return nil, err
	}
	versioned := &v1alpha1.CAInjectorConfiguration{}
	scheme.Default(versioned)
	cfg := &config.CAInjectorConfiguration{}
	if err := scheme.Convert(versioned, cfg, nil); err != nil {
		return nil, err
	}
	fs := pflag.NewFlagSet("cainjector", pflag.ExitOnError)
	logf.AddFlags(&cfg.Logging, fs)
	fs.StringVar(&cfg.KubeConfig, "kubeconfig", cfg.KubeConfig, "kubeconfig (default: in-cluster)")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "watch only this namespace")
	fs.StringVar(&cfg.LeaderElectionConfig.Namespace, "leader-election-namespace",
		cfg.LeaderElectionConfig.Namespace, "namespace of the leader election lease")
	fs.BoolVar(&cfg.LeaderElectionConfig.Enabled, "leader-elect",
		cfg.LeaderElectionConfig.Enabled, "elect a leader before injecting")
	fs.StringVar(&cfg.MetricsListenAddress, "metrics-listen-address",
		cfg.MetricsListenAddress, "address of /metrics")
	_ = fs.Parse(os.Args[1:])
	return cfg, logf.ValidateAndApply(&cfg.Logging)
}

func manager(cfg *config.CAInjectorConfiguration) (ctrl.Manager, error) {
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.KubeConfig)
	if err != nil {
		return nil, err
	}
	rest = util.RestConfigWithUserAgent(rest, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	var namespaces map[string]cache.Config
	if cfg.Namespace != "" {
		namespaces = map[string]cache.Config{cfg.Namespace: {}}
	}
	le := cfg.LeaderElectionConfig
	return ctrl.NewManager(rest, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true, DefaultNamespaces: namespaces},
		// Secrets are read straight from the API server, not cached cluster-wide.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:                le.Enabled,
		LeaderElectionNamespace:       le.Namespace,
		LeaderElectionID:              "cert-manager-cainjector-leader-election",
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaseDuration:                 &le.LeaseDuration,
		RenewDeadline:                 &le.RenewDeadline,
		RetryPeriod:                   &le.RetryPeriod,
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsListenAddress},
	})
}

// waitForCertificatesCRD: injecting from Certificates needs their CRD served first.
func waitForCertificatesCRD(ctx context.Context, mgr ctrl.Manager) error {
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return err
	}
	name := types.NamespacedName{Name: "certificates.cert-manager.io"}
	return wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true,
		func(ctx context.Context) (bool, error) {
			err := direct.Get(ctx, name, &apiext.CustomResourceDefinition{})
			if err != nil {
				logf.Log.Info("waiting for the certificates.cert-manager.io CRD", "error", err.Error())
			}
			return err == nil, nil
		})
}

func run(ctx context.Context, cfg *config.CAInjectorConfiguration) error {
	mgr, err := manager(cfg)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if cfg.EnableDataSourceConfig.Certificates {
		if err := waitForCertificatesCRD(ctx, mgr); err != nil {
			return err
		}
	}
	inject := cfg.EnableInjectableConfig
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    cfg.Namespace,
		EnableCertificatesDataSource: cfg.EnableDataSourceConfig.Certificates,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   inject.MutatingWebhookConfigurations,
			cainjector.ValidatingWebhookConfigurationName: inject.ValidatingWebhookConfigurations,
			cainjector.APIServiceName:                     inject.APIServices,
			cainjector.CustomResourceDefinitionName:       inject.CustomResourceDefinitions,
		},
	})
	if err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}
	return mgr.Start(ctx)
}

func main() {
	logf.InitLogs()
	defer logf.FlushLogs()
	cfg, err := configuration()
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctrl.SetLogger(logf.Log)
		logf.Log.Info("starting cert-manager cainjector (distml kindbuild main)",
			"version", util.AppVersion, "commit", util.AppGitCommit)
		err = run(logf.NewContext(ctx, logf.Log, "cainjector"), cfg)
	}
	if err != nil {
		logf.Log.Error(err, "cert-manager cainjector failed")
		logf.FlushLogs()
		os.Exit(1)
	}
}
