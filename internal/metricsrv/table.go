package metricsrv

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Table lists the metrics of reg that are cairn's own (names starting
// with prefix) as rows of a Markdown table: name, type, labels and help.
// The Go runtime's and the process's series are left out. Each daemon's
// tests keep its section of docs/metrics.md equal to it (Section).
func Table(reg *prometheus.Registry, prefix string) (string, error) {
	fams, err := reg.Gather()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		slices.Sort(labels)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.GetName(), strings.ToLower(f.GetType().String()),
			strings.Join(labels, ", "), strings.ReplaceAll(f.GetHelp(), "|", "\\|"))
	}
	return b.String(), nil
}

// Section replaces the text between the lines "<!-- begin NAME -->" and
// "<!-- end NAME -->" of doc with body; false if doc has no such section.
func Section(doc, name, body string) (string, bool) {
	begin, end := "<!-- begin "+name+" -->\n", "<!-- end "+name+" -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return doc, false
	}
	return doc[:i+len(begin)] + body + doc[j:], true
}

// CheckDoc compares section name of the Markdown file at path with reg's
// table; with update it rewrites the section instead. For the tests that
// keep docs/metrics.md true.
func CheckDoc(path, name string, reg *prometheus.Registry, update bool) error {
	tab, err := Table(reg, "cairn_")
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, ok := Section(string(b), name, tab)
	if !ok {
		return fmt.Errorf("%s has no section %q (<!-- begin %s --> … <!-- end %s -->)", path, name, name, name)
	}
	if doc == string(b) {
		return nil
	}
	if update {
		return os.WriteFile(path, []byte(doc), 0o644)
	}
	return fmt.Errorf("%s: the %s metrics changed; run the test with -update-docs and commit the file", path, name)
}
