package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/metrics"
	metricsfeatures "k8s.io/component-base/metrics/features"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"

	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
)

const componentName = "kube-proxy"

// upstreamVersion is the kube-proxy release whose interface this daemon matches.
const upstreamVersion = "v1.37.2"

// Execute runs kube-proxy with args (without the program name) and returns the
// process exit code. Errors are printed to stderr as a single line.
func Execute(args []string, stdout, stderr io.Writer) int {
	cmd := NewProxyCommand(args, stdout, stderr)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", componentName, oneLine(err.Error()))
		return 1
	}
	return 0
}

// oneLine keeps an error to one line of stderr, however the wrapped errors
// (aggregates, YAML decoders) format themselves.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// NewProxyCommand builds the cobra command. args is the command line it will
// parse; it is kept so that the flags can be parsed a second time on top of a
// --config file (flags given on the command line win over the file).
func NewProxyCommand(args []string, stdout, stderr io.Writer) *cobra.Command {
	fg := newFeatureGate()
	opts := newOptions(proxyconfigapi.NewFlagDefaultConfiguration(), fg)
	var versionFlag string

	cmd := &cobra.Command{
		Use: componentName,
		Long: `The Kubernetes network proxy runs on each node. This daemon is a drop-in
replacement for kube-proxy in IPVS mode: it reflects Services and EndpointSlices
as IPVS virtual servers, ipsets and iptables rules on the node, with the same
flags, configuration file, ipset names, iptables chains, health and metrics
endpoints as upstream kube-proxy ` + upstreamVersion + ` --proxy-mode=ipvs.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if a != "" {
					return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if versionFlag != "false" {
				return printVersion(stdout, versionFlag)
			}
			run := &invocation{opts: opts, args: args, stdout: stdout, stderr: stderr}
			return run.run(cmd.Flags())
		},
	}
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.AddCommand(newExplainCommand(stdout))
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })

	fs := cmd.Flags()
	fs.SetOutput(stderr) // where pflag prints deprecation notices
	opts.AddFlags(fs)
	addVersionFlag(fs, &versionFlag)
	_ = cmd.MarkFlagFilename("config", "yaml", "yml", "json")
	return cmd
}

// versionValue is --version with upstream's semantics: --version (true) and
// --version=raw print and exit; --version=vX.Y.Z... sets the reported version
// (component-base's dynamic version) and the daemon runs.
type versionValue struct{ val *string }

func (v versionValue) String() string   { return *v.val }
func (v versionValue) Type() string     { return "version" }
func (v versionValue) IsBoolFlag() bool { return true }
func (v versionValue) Set(s string) error {
	switch {
	case s == "raw":
		*v.val = "raw"
	case strings.HasPrefix(s, "v"):
		if err := version.SetDynamicVersion(s); err != nil {
			return err
		}
		*v.val = "false"
	default:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true, false, raw or vX.Y.Z: %w", err)
		}
		*v.val = strconv.FormatBool(b)
	}
	return nil
}

func addVersionFlag(fs *pflag.FlagSet, p *string) {
	*p = "false"
	fs.Var(versionValue{p}, "version", "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version")
	fs.Lookup("version").NoOptDefVal = "true"
}

func printVersion(w io.Writer, mode string) error {
	info := version.Get()
	if mode == "raw" {
		fmt.Fprintf(w, "%#v\n", info)
		return nil
	}
	fmt.Fprintf(w, "kube-proxy-ipvs %s (compatible with kube-proxy %s)\n", binaryVersion(), upstreamVersion)
	return nil
}

// binaryVersion is the version stamped into the binary (hack/version.sh), or
// v0.0.0-dev when it was built without -ldflags -X k8s.io/component-base/version.gitVersion=...
func binaryVersion() string {
	v := version.Get().GitVersion
	if strings.Contains(v, "$Format") {
		return "v0.0.0-dev"
	}
	return v
}

// invocation is one run of the command after cobra has parsed the flags.
type invocation struct {
	opts           *Options
	args           []string
	stdout, stderr io.Writer
}

func (r *invocation) run(fs *pflag.FlagSet) error {
	if err := r.complete(fs); err != nil {
		return err
	}
	cfg := r.opts.config
	if err := r.validate(); err != nil {
		return err
	}

	if r.opts.WriteConfigTo != "" {
		if err := proxyconfigapi.WriteFile(r.opts.WriteConfigTo, cfg, r.opts.extras()); err != nil {
			return err
		}
		fmt.Fprintf(r.stdout, "Wrote configuration to %s\n", r.opts.WriteConfigTo)
		return nil
	}

	if err := applyLogging(cfg, r.opts.featureGate); err != nil {
		return err
	}
	cliflag.PrintFlags(fs) // "FLAG: --name=value" at -v=1, as upstream logs them
	applyMetricsSettings(cfg.ShowHiddenMetricsForVersion, r.opts.featureGate)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return runProxy(ctx, r.opts)
}

// complete resolves the effective configuration: the --config file when given
// (strictly decoded and defaulted), with every flag set on the command line
// applied on top; otherwise the defaults with the flags applied.
//
// Our own settings come from the --config file's KubeProxyIPVSConfiguration, then
// the --ipvs-config file, then the flags.
func (r *invocation) complete(fs *pflag.FlagSet) error {
	var extras []*proxyconfigapi.Extras
	if r.opts.ConfigFile != "" {
		fileCfg, fileExtras, err := proxyconfigapi.LoadFileAll(r.opts.ConfigFile)
		if err != nil {
			return err
		}
		extras = append(extras, fileExtras)
		// Parse the same command line again, now bound to the file's values, so
		// that exactly the flags the user gave override the file.
		over := newOptions(fileCfg, r.opts.featureGate)
		overFS := pflag.NewFlagSet(componentName, pflag.ContinueOnError)
		overFS.SetOutput(io.Discard) // deprecation notices were printed on the first parse
		over.AddFlags(overFS)
		var ignoredVersion string
		addVersionFlag(overFS, &ignoredVersion)
		overFS.BoolP("help", "h", false, "")
		if err := overFS.Parse(r.args); err != nil {
			return fmt.Errorf("applying flags over %s: %w", r.opts.ConfigFile, err)
		}
		r.opts = over
		fs = overFS
	}
	if r.opts.ExtrasFile != "" {
		e, err := proxyconfigapi.LoadExtrasFile(r.opts.ExtrasFile)
		if err != nil {
			return err
		}
		extras = append(extras, e)
	}
	for _, e := range extras {
		r.opts.applyExtras(e, fs)
	}
	r.opts.flags = fs
	return r.opts.applyNonConfigFlags(fs)
}

func (r *invocation) validate() error {
	cfg := r.opts.config
	source := "flags"
	if r.opts.ConfigFile != "" {
		source = r.opts.ConfigFile + " and flags"
	}
	if !proxyconfigapi.IsSupportedMode(cfg.Mode) {
		return fmt.Errorf("proxy mode %q is not supported: this daemon implements the ipvs mode only (use --proxy-mode=ipvs or leave it empty)", cfg.Mode)
	}
	gates, inert := splitFeatureGates(cfg.FeatureGates, r.opts.featureGate)
	for _, name := range inert {
		klog.InfoS("Feature gate has no effect on kube-proxy-ipvs; accepted as upstream kube-proxy accepts it", "featureGate", name)
	}
	if err := r.opts.featureGate.SetFromMap(gates); err != nil {
		return fmt.Errorf("invalid feature gates (from %s): %w", source, err)
	}
	if !r.opts.featureGate.Enabled(KubeProxyIPVS) {
		return fmt.Errorf("feature gate %s is disabled: this daemon implements the ipvs mode only", KubeProxyIPVS)
	}
	if errs := proxyconfigapi.Validate(cfg, r.opts.featureGate); len(errs) > 0 {
		return fmt.Errorf("invalid configuration (from %s): %w", source, errs.ToAggregate())
	}
	if !slices.Contains(ipvsproxy.RulesBackends, r.opts.RulesBackend) {
		return fmt.Errorf("--ipvs-rules-backend=%q is not supported: want %s", r.opts.RulesBackend, strings.Join(ipvsproxy.RulesBackends, " or "))
	}
	return nil
}

// applyMetricsSettings does what upstream does before any metric is registered:
// propagate the metrics feature gates, honour --show-hidden-metrics-for-version
// and expose kubernetes_feature_enabled.
func applyMetricsSettings(showHiddenFor string, fg featuregate.MutableVersionedFeatureGate) {
	metricsfeatures.ApplyFeatureGates(fg)
	if showHiddenFor != "" {
		metrics.SetShowHidden()
	}
	fg.AddMetrics()
}

// runProxy does what the validated options ask: clean up, initialise the
// kernel only, or run the daemon until ctx ends.
func runProxy(ctx context.Context, o *Options) error {
	if o.CleanupAndExit {
		s := &ProxyServer{Config: o.config, FeatureGate: o.featureGate}
		if err := runCleanup(ctx, s); err != nil {
			return fmt.Errorf("cleanup: %w", err)
		}
		return nil
	}
	if o.InitAndExit {
		s := &ProxyServer{Config: o.config, FeatureGate: o.featureGate}
		return s.runInitOnly(ctx, defaultInitOnlyKernel())
	}
	s, err := newProxyServer(ctx, o, defaultDeps())
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// errConfigChanged ends the daemon when its --config file changes on disk, so
// that the pod restarts with the new configuration (upstream does the same).
var errConfigChanged = errors.New("configuration file changed")

func splitHostPort(addr string) (string, string, error) { return net.SplitHostPort(addr) }

func joinHostPort(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
