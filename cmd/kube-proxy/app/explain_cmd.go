package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// newExplainCommand is `kube-proxy explain NAMESPACE/NAME`: it asks the daemon on
// this node, through its metrics server, what it knows of one Service.
func newExplainCommand(stdout io.Writer) *cobra.Command {
	var address, output string
	cmd := &cobra.Command{
		Use:   "explain NAMESPACE/NAME",
		Short: "Explain one Service's path through this node, as the running daemon sees it",
		Long: `Asks the kube-proxy running on this node (its metrics server, ` + metrics.ExplainPath + `)
what it knows of one Service: every address the Service is reachable at on this
node, the real servers it wants and why each endpoint is in or out, what it
believes the kernel holds and what the kernel holds now, the set members and
rules that decide its traffic, what is refused or held back, and the last sync.`,
		Args:          cobra.ExactArgs(1),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			return runExplain(cmd.Context(), stdout, address, args[0], output)
		},
	}
	cmd.Flags().StringVar(&address, "metrics-address", "127.0.0.1:10249", "The address of the daemon's metrics server (its --metrics-bind-address).")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json.")
	return cmd
}

func runExplain(ctx context.Context, stdout io.Writer, address, service, output string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	u := url.URL{Scheme: "http", Host: address, Path: metrics.ExplainPath,
		RawQuery: url.Values{"service": {service}, "format": {output}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("asking the daemon at %s: %w", address, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("reading the daemon's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the daemon at %s answered %s: %s", address, resp.Status, body)
	}
	_, err = stdout.Write(body)
	return err
}
