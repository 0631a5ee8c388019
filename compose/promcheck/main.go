// promcheck: Prometheus's own checks of what streambench serves, without building promtool or
// the server. `promcheck lint` reads an exposition on standard input and runs client_golang's
// promlint over it, the lint `promtool check metrics` runs (a problem a line on standard error,
// exit 3; an exposition it cannot parse, exit 1). `promcheck parse` reads one PromQL expression
// a line and parses each with Prometheus's own parser (promql/parser), printing for each the
// metric names its selectors name, space-separated (an expression it cannot parse: the error
// on standard error, exit 1).
package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/prometheus/promql/parser"
)

func lint() int {
	problems, err := promlint.New(os.Stdin).Lint()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error while linting:", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p.Metric, p.Text)
	}
	if len(problems) > 0 {
		return 3
	}
	return 0
}

func names(expr parser.Expr) []string {
	seen := map[string]bool{}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok && vs.Name != "" {
			seen[vs.Name] = true
		}
		return nil
	})
	found := make([]string, 0, len(seen))
	for n := range seen {
		found = append(found, n)
	}
	sort.Strings(found)
	return found
}

func parse() int {
	p := parser.NewParser(parser.Options{})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	failed := 0
	for line := 1; in.Scan(); line++ {
		text := strings.TrimSpace(in.Text())
		if text == "" {
			continue
		}
		expr, err := p.ParseExpr(text)
		if err != nil {
			fmt.Fprintf(os.Stderr, "line %d: %v\n", line, err)
			failed++
			continue
		}
		fmt.Println(strings.Join(names(expr), " "))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "error while reading:", err)
		return 1
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: promcheck lint|parse < input")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "lint":
		os.Exit(lint())
	case "parse":
		os.Exit(parse())
	default:
		fmt.Fprintln(os.Stderr, "usage: promcheck lint|parse < input")
		os.Exit(2)
	}
}
