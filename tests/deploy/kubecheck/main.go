// Command kubecheck decodes Kubernetes manifests with Kubernetes' own types, strictly: a field
// the type does not have, a field given twice or a value of the wrong type is an error. It
// reads YAML documents on stdin and prints one line per document: "valid KIND NAME",
// "invalid KIND: reason", or "unknown GROUP/VERSION KIND" for kinds outside the built-in API
// (custom resources, which it cannot check). It exits 1 when a document is invalid.
//
// The chart's and the Spark examples' tests run it on what they render (tests/deploy); it
// checks types and field names, not what only an API server decides (defaults, admission).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

func main() {
	decoder := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme,
		scheme.Scheme, json.SerializerOptions{Yaml: true, Strict: true})
	reader := yaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	failed := false
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Printf("unreadable: %v\n", err)
			os.Exit(1)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		switch {
		case runtime.IsNotRegisteredError(err):
			fmt.Printf("unknown %s/%s %s\n", gvk.Group, gvk.Version, gvk.Kind)
		case err != nil:
			kind := "document"
			if gvk != nil {
				kind = gvk.Kind
			}
			fmt.Printf("invalid %s: %v\n", kind, err)
			failed = true
		default:
			name := ""
			if accessor, err := meta.Accessor(obj); err == nil {
				name = accessor.GetName()
			}
			fmt.Printf("valid %s %s\n", gvk.Kind, name)
		}
	}
	if failed {
		os.Exit(1)
	}
}
