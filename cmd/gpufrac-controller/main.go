// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command gpufrac-controller serves gpufrac's admission webhooks: KAI
// GPU-sharing annotations become claims, and invalid gpufrac.dev configs are
// refused. The logic is in internal/controller and internal/admission; this file is
// flags and wiring.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/buildinfo"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/featureprobe"
	"github.com/gpufrac/gpufrac/internal/flagcheck"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newCommand() *cobra.Command {
	logging := logsapi.NewLoggingConfiguration()
	var kubeconfig string
	var qps float32
	var burst int
	var packingParameter string
	cfg := controller.Config{}
	cmd := &cobra.Command{
		Use:          "gpufrac-controller",
		Short:        "gpufrac's admission webhooks: KAI GPU-sharing annotations to claims, gpufrac config validation",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(cfg, qps, burst, packingParameter); err != nil {
				return err
			}
			if err := logsapi.ValidateAndApply(logging, nil); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			klog.FromContext(ctx).Info("Starting gpufrac-controller", "version", buildinfo.Version)
			restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("loading kubeconfig %q: %w", kubeconfig, err)
			}
			restConfig.UserAgent = "gpufrac-controller"
			restConfig.QPS, restConfig.Burst = qps, burst
			controller.UseProtobuf(restConfig)
			if cfg.Client, err = kubernetes.NewForConfig(restConfig); err != nil {
				return fmt.Errorf("creating the Kubernetes client: %w", err)
			}
			// Before serving: templates whose capacity the API server
			// drops would make every KAI fraction a whole GPU.
			if err := featureprobe.Controller(ctx, cfg.Client, cfg.Cert.Namespace); err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			cfg.Metrics = reg
			if packingParameter != "" {
				cfg.PackingParameter = types.NamespacedName{Namespace: cfg.Cert.Namespace, Name: packingParameter}
			}
			return controller.Run(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", envOr("KUBECONFIG", ""), "kubeconfig file; empty means in-cluster")
	fs.Float32Var(&qps, "kube-api-qps", controller.DefaultKubeAPIQPS, "sustained queries per second to the API server (the packing labels take a node patch for about every other pod scheduled)")
	fs.IntVar(&burst, "kube-api-burst", controller.DefaultKubeAPIBurst, "burst of queries to the API server")
	fs.StringVar(&cfg.WebhookAddress, "webhook-address", ":9443", "HTTPS address of the admission webhooks")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", ":8080", "address of /metrics and /healthz; empty disables")
	fs.StringVar(&cfg.ClientAuth.CAFile, "client-ca-file", "", "PEM bundle of the CAs that sign the client certificate kube-apiserver presents to webhooks (its AdmissionConfiguration's WebhookAdmission kubeConfigFile); set, every webhook connection must present a certificate they sign; empty accepts any client (the default)")
	fs.StringSliceVar(&cfg.ClientAuth.Names, "client-cert-names", nil, "with --client-ca-file: the client certificate must also carry one of these as its common name or a DNS name; empty accepts any certificate the CAs sign")
	fs.StringVar(&cfg.CertDir, "cert-dir", "", "directory with tls.crt and tls.key renewed by another tool (cert-manager), reloaded when they change; empty makes and renews a self-signed certificate")
	fs.StringVar(&cfg.Cert.Namespace, "namespace", envOr("POD_NAMESPACE", "gpufrac-system"), "namespace of the webhook Service and certificate Secret")
	fs.StringVar(&cfg.Cert.SecretName, "cert-secret", "gpufrac-webhook-tls", "Secret that keeps the self-signed certificate")
	fs.DurationVar(&cfg.Cert.Lifetime, "cert-lifetime", webhookcert.DefaultLifetime, fmt.Sprintf("lifetime of a self-signed certificate, from %s to %s", webhookcert.MinLifetime, webhookcert.MaxLifetime))
	fs.DurationVar(&cfg.Cert.RenewBefore, "cert-renew-before", 0, "renew a self-signed certificate this long before it expires, shorter than its lifetime; 0 means a third of its lifetime")
	fs.StringVar(&cfg.Cert.ServiceName, "service", "gpufrac-webhook", "the webhook Service; the certificate names it")
	fs.StringVar(&cfg.Cert.MutatingConfig, "mutating-webhook-configuration", "gpufrac", "MutatingWebhookConfiguration whose CA bundle to set; empty skips")
	fs.StringVar(&cfg.Cert.ValidatingConfig, "validating-webhook-configuration", "gpufrac", "ValidatingWebhookConfiguration whose CA bundle to set; empty skips")
	fs.BoolVar(&cfg.PackingLabels, "packing-labels", true, "keep the node labels gpufrac.dev/gpus-in-use and gpufrac.dev/fill-order that the packing webhook's node affinity prefers (needs get, list, watch and patch on nodes)")
	fs.StringVar(&packingParameter, "packing-parameter", "", "ConfigMap in --namespace where to keep the fraction templates the packing MutatingAdmissionPolicy reads (needs get, create and update on it); empty: the policy is not used, and the packing webhook serves every pod")
	fs.StringVar(&cfg.ExtenderAddress, "extender-address", "", "serve kube-scheduler's extender prioritize verb (POST /scheduler/prioritize, plain HTTP) here, for a scheduler configured with this controller as an ignorable extender; empty disables it (the default: the chart packs with the node label)")
	fs.StringVar(&cfg.KAI.TimeSlicingClass, "time-slicing-class", "gpufrac.dev", "DeviceClass for translated TimeSlicing claims")
	fs.StringVar(&cfg.KAI.SMSharingClass, "sm-sharing-class", "sm-sharing.gpufrac.dev", "DeviceClass for translated SMSharing claims")
	fs.Int64Var(&cfg.KAI.ReservedMiB, "kai-reserved-gpu-memory-mib", 0, fmt.Sprintf("MiB held back from each GPU before a KAI gpu-fraction becomes memory (KAI binder's reservedGpuMemoryMiB), from 0 to %d", int64(kai.MaxReservedMiB)))
	fs.DurationVar(&cfg.TemplateGCGrace, "template-gc-grace", controller.DefaultTemplateGCGrace, "delete a claim template gpufrac made (for KAI-annotated pods) once no pod has referred to it for this long, from 1m to 720h; 0 keeps them all")
	logsapi.AddFlags(logging, fs)
	return cmd
}

// checkFlags refuses, before anything starts, a flag value the controller
// cannot work with, naming the flag, the value and the rule.
func checkFlags(cfg controller.Config, qps float32, burst int, packingParameter string) error {
	c := cfg.Cert
	renewErr := flagcheck.Duration("--cert-renew-before", c.RenewBefore, 0, max(c.Lifetime-time.Second, 0))
	var gcErr error
	if cfg.TemplateGCGrace != 0 {
		gcErr = flagcheck.Duration("--template-gc-grace", cfg.TemplateGCGrace, time.Minute, 720*time.Hour)
	}
	reserveErr := kai.ValidateReservedMiB(cfg.KAI.ReservedMiB)
	if reserveErr != nil {
		reserveErr = fmt.Errorf("--kai-reserved-gpu-memory-mib %d: %w", cfg.KAI.ReservedMiB, reserveErr)
	}
	return flagcheck.All(
		flagcheck.KubeAPI(qps, burst),
		flagcheck.DNSLabel("--namespace", c.Namespace),
		flagcheck.DNSSubdomain("--cert-secret", c.SecretName),
		flagcheck.DNSLabel("--service", c.ServiceName),
		flagcheck.OptionalDNSSubdomain("--mutating-webhook-configuration", c.MutatingConfig),
		flagcheck.OptionalDNSSubdomain("--validating-webhook-configuration", c.ValidatingConfig),
		flagcheck.OptionalDNSSubdomain("--packing-parameter", packingParameter),
		flagcheck.DNSSubdomain("--time-slicing-class", cfg.KAI.TimeSlicingClass),
		flagcheck.DNSSubdomain("--sm-sharing-class", cfg.KAI.SMSharingClass),
		flagcheck.OptionalAbsPath("--cert-dir", cfg.CertDir),
		flagcheck.OptionalAbsPath("--client-ca-file", cfg.ClientAuth.CAFile),
		flagcheck.Lifetime("--cert-lifetime", c.Lifetime, webhookcert.MinLifetime, webhookcert.MaxLifetime, webhookcert.MinLifetimeReason),
		renewErr, reserveErr, gcErr,
	)
}
