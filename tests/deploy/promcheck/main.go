// Command promcheck checks Prometheus rule files as Prometheus loads them (the rulefmt parser
// promtool uses): the YAML's fields, each expression's PromQL, each label and annotation
// template. It prints "ok FILE: N rules" or one line per error, and exits 1 on an error.
//
// tests/deploy runs it on the alert rules the Helm chart and the compose Prometheus load
// (deploy/helm/cutover-router/files/alerts.yaml): a rule file Prometheus refuses stops it.
package main

import (
	"fmt"
	"os"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	failed := false
	for _, file := range os.Args[1:] {
		groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation,
			parser.NewParser(parser.Options{}), promslog.NewNopLogger())
		for _, err := range errs {
			fmt.Printf("error %v\n", err)
			failed = true
		}
		if len(errs) == 0 {
			n := 0
			for _, g := range groups.Groups {
				n += len(g.Rules)
			}
			fmt.Printf("ok %s: %d rules\n", file, n)
		}
	}
	if failed {
		os.Exit(1)
	}
}
