/*
Copyright The bar-controller Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command sizing-model fits the sizing model (test/bench/model) to the
// committed benchmark reports and prints its tables; with -w it writes
// them into docs/sizing-model.md instead. Run it from the repository's
// root after make bench or make bench-large.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/barcontroller/bar-controller/test/bench/model"
)

func main() {
	bench := flag.String("bench", "docs/benchmarks.md", "make bench's report")
	large := flag.String("large", "docs/benchmarks-large.md", "make bench-large's report")
	doc := flag.String("doc", "docs/sizing-model.md", "the doc whose generated part -w replaces")
	write := flag.Bool("w", false, "write the tables into -doc instead of printing them")
	flag.Parse()
	if err := run(*bench, *large, *doc, *write); err != nil {
		fmt.Fprintln(os.Stderr, "sizing-model:", err)
		os.Exit(1)
	}
}

func run(bench, large, doc string, write bool) error {
	var reports []model.Report
	for _, name := range []string{bench, large} {
		text, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		reports = append(reports, model.Report{Name: name, Text: string(text)})
	}
	m, check, err := model.Build(reports...)
	if err != nil {
		return err
	}
	out := model.Markdown(m, check)
	if !write {
		fmt.Print(out)
		return nil
	}
	text, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	spliced, err := model.Splice(string(text), out)
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	return os.WriteFile(doc, []byte(spliced), 0o644)
}
