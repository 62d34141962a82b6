package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kube-proxy/config/v1alpha1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The settings of this daemon that upstream kube-proxy does not have (its flags
// --ipvs-rules-backend, --ipvs-virtual-server-metrics and --ipvs-warm-start) live in a document of their
// own, so that the KubeProxyConfiguration stays exactly upstream's: the second YAML
// document of a --config file, or the only one of an --ipvs-config file.
const (
	ExtrasAPIVersion = "kube-proxy-ipvs.io/v1alpha1"
	ExtrasKind       = "KubeProxyIPVSConfiguration"
)

// Extras is a KubeProxyIPVSConfiguration. An unset field leaves the flag's default.
type Extras struct {
	metav1.TypeMeta `json:",inline"`
	// RulesBackend is --ipvs-rules-backend: "iptables" or "nftables".
	RulesBackend string `json:"rulesBackend,omitempty"`
	// VirtualServerMetrics is --ipvs-virtual-server-metrics.
	VirtualServerMetrics *bool `json:"virtualServerMetrics,omitempty"`
	// WarmStart is --ipvs-warm-start.
	WarmStart *bool `json:"warmStart,omitempty"`
}

// NewExtras returns an Extras with its apiVersion and kind set.
func NewExtras() *Extras {
	return &Extras{TypeMeta: metav1.TypeMeta{APIVersion: ExtrasAPIVersion, Kind: ExtrasKind}}
}

// DecodeAll strictly decodes a --config file: one KubeProxyConfiguration (defaulted,
// as Decode) and at most one KubeProxyIPVSConfiguration (nil when absent), as YAML
// documents in any order. Any other document is an error.
func DecodeAll(data []byte) (*v1alpha1.KubeProxyConfiguration, *Extras, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, nil, err
	}
	var cfg *v1alpha1.KubeProxyConfiguration
	var extras *Extras
	for i, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			_, err = Decode(doc) // says what upstream's decoder says of it
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		switch {
		case tm.APIVersion == ExtrasAPIVersion && tm.Kind == ExtrasKind:
			if extras != nil {
				return nil, nil, fmt.Errorf("document %d: a second %s", i+1, ExtrasKind)
			}
			if extras, err = DecodeExtras(doc); err != nil {
				return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
			}
		case tm.Kind == ExtrasKind:
			return nil, nil, fmt.Errorf("document %d: %s has apiVersion %q, want %s", i+1, ExtrasKind, tm.APIVersion, ExtrasAPIVersion)
		default:
			if cfg != nil {
				return nil, nil, fmt.Errorf("document %d: a second configuration (%s %s); a file holds one KubeProxyConfiguration and at most one %s", i+1, tm.APIVersion, tm.Kind, ExtrasKind)
			}
			if cfg, err = Decode(doc); err != nil {
				return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
			}
		}
	}
	if len(docs) == 0 {
		_, err := Decode(nil) // "empty configuration: ..."
		return nil, nil, err
	}
	if cfg == nil {
		return nil, nil, fmt.Errorf("no KubeProxyConfiguration: apiVersion %s and kind KubeProxyConfiguration are required", v1alpha1.SchemeGroupVersion)
	}
	return cfg, extras, nil
}

// DecodeExtras strictly decodes one KubeProxyIPVSConfiguration and checks its values.
func DecodeExtras(data []byte) (*Extras, error) {
	// Field names match exactly, as the API machinery's strict decoding does
	// (encoding/json alone would take "rulesbackend" for rulesBackend).
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", ExtrasKind, err)
	}
	var e Extras
	strictErrs, err := sigsjson.UnmarshalStrict(js, &e)
	if err == nil && len(strictErrs) > 0 {
		err = errors.Join(strictErrs...)
	}
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", ExtrasKind, err)
	}
	if e.APIVersion != ExtrasAPIVersion || e.Kind != ExtrasKind {
		return nil, fmt.Errorf("decoding %s: got apiVersion %q kind %q, want %s %s", ExtrasKind, e.APIVersion, e.Kind, ExtrasAPIVersion, ExtrasKind)
	}
	switch e.RulesBackend {
	case "", "iptables", "nftables":
	default:
		return nil, fmt.Errorf("%s: rulesBackend %q: want iptables or nftables", ExtrasKind, e.RulesBackend)
	}
	return &e, nil
}

// LoadExtrasFile reads an --ipvs-config file: one KubeProxyIPVSConfiguration.
func LoadExtrasFile(path string) (*Extras, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	docs, err := splitDocuments(data)
	if err == nil && len(docs) != 1 {
		err = fmt.Errorf("%d documents, want one %s", len(docs), ExtrasKind)
	}
	var e *Extras
	if err == nil {
		e, err = DecodeExtras(docs[0])
	}
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return e, nil
}

// LoadFileAll reads a --config file (DecodeAll). Every error names the file.
func LoadFileAll(path string) (*v1alpha1.KubeProxyConfiguration, *Extras, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading config file: %w", err)
	}
	cfg, extras, err := DecodeAll(data)
	if err != nil {
		return nil, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, extras, nil
}

// EncodeAll writes cfg and, unless it is nil, extras as two YAML documents, in the
// form DecodeAll reads back.
func EncodeAll(cfg *v1alpha1.KubeProxyConfiguration, extras *Extras) ([]byte, error) {
	out, err := Encode(cfg)
	if err != nil {
		return nil, err
	}
	if extras == nil {
		return out, nil
	}
	e := *extras
	e.TypeMeta = metav1.TypeMeta{APIVersion: ExtrasAPIVersion, Kind: ExtrasKind}
	doc, err := yaml.Marshal(&e)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", ExtrasKind, err)
	}
	return append(append(out, "---\n"...), doc...), nil
}

// splitDocuments returns the non-empty YAML documents of data (a JSON object is one).
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("splitting YAML documents: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

// stripComments drops the comment lines of a YAML document (to tell an empty one).
func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
