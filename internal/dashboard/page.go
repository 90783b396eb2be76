package dashboard

import (
	_ "embed"
	"fmt"
	"html/template"
	"strings"
	"time"
)

// shownDetail is how many lines of a finding show before "more".
const shownDetail = 5

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"bytes": func(n any) string { return humanBytes(toInt64(n)) },
	"pct": func(a, b any) string {
		if toInt64(b) <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(toInt64(a))/float64(toInt64(b)))
	},
	"bar":        func(a, b any) template.HTML { return bar(toInt64(a), toInt64(b), 0) },
	"usage":      func(a, b any) template.HTML { return bar(toInt64(a), toInt64(b), 0.85) },
	"add":        func(a, b int64) int64 { return a + b },
	"indent":     func(depth int) int { return 6 + 18*depth },
	"deref":      func(b *bool) bool { return b != nil && *b },
	"sev":        func(s string) string { return strings.TrimPrefix(s, "HEALTH_") },
	"eta":        eta,
	"first":      func(l []string) []string { return l[:min(len(l), shownDetail)] },
	"rest":       func(l []string) []string { return l[min(len(l), shownDetail):] },
	"chartOps":   func(s []Sample) template.HTML { return chart("IOPS", s, opsSeries) },
	"chartBytes": func(s []Sample) template.HTML { return chart("throughput", s, byteSeries) },
}).Parse(pageHTML))

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case uint64:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}

// bar draws a usage bar; at or past hot (0: never) it turns red.
func bar(a, b int64, hot float64) template.HTML {
	f := 0.0
	if b > 0 {
		f = min(1, max(0, float64(a)/float64(b)))
	}
	cls := "bar"
	if hot > 0 && f >= hot {
		cls += " hot"
	}
	return template.HTML(fmt.Sprintf(`<span class="%s"><i style="width:%.1f%%"></i></span>`, cls, 100*f))
}

func eta(sec float64) string {
	if sec <= 0 {
		return "–"
	}
	return (time.Duration(sec) * time.Second).String()
}
