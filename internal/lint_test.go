package internal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// forbidden lists, per package, the project packages it must not import
// (directly or indirectly): the dependency rules of ARCHITECTURE.md's code map.
var forbidden = map[string][]string{
	"internal/clustermap":    {"internal/", "client"},
	"internal/placement":     {"internal/objstore", "internal/meta", "internal/rpc", "internal/osd", "internal/mon", "internal/cli", "internal/proto", "client"},
	"internal/proto":         {"internal/objstore", "internal/meta", "internal/rpc", "internal/osd", "internal/mon", "internal/cli", "internal/placement", "client"},
	"internal/rpc":           {"internal/objstore", "internal/meta", "internal/osd", "internal/mon", "internal/cli", "internal/placement", "client"},
	"internal/objstore":      {"internal/", "client"},
	"internal/conf":          {"internal/", "client"},
	"internal/meta":          {"internal/placement", "internal/objstore", "internal/rpc", "internal/osd", "internal/mon", "internal/cli", "client"},
	"internal/mapview":       {"internal/objstore", "internal/rpc", "internal/osd", "internal/mon", "internal/cli", "client"},
	"internal/meta/metatest": {"internal/", "client"},
	"internal/osd":           {"internal/cli", "internal/mon", "client"},
	"internal/mon":           {"internal/osd", "internal/objstore", "internal/cli", "client"},
	"internal/bench":         {"internal/osd", "internal/mon", "internal/objstore", "internal/cli", "internal/volume", "internal/nbd"},
	"internal/baseline":      {"internal/", "client"},
	"client":                 {"internal/osd", "internal/mon", "internal/objstore", "internal/cli", "internal/volume", "internal/nbd"},
	"internal/volume":        {"internal/osd", "internal/mon", "internal/objstore", "internal/cli", "internal/nbd"},
	"internal/nbd":           {"internal/", "client"},
	"internal/devcluster":    {"internal/osd", "internal/mon", "internal/objstore", "internal/cli"},
	"internal/nbdgw":         {"internal/osd", "internal/mon", "internal/objstore", "internal/cli"},
	"internal/snapset":       {"internal/", "client"},
	"internal/bufpool":       {"internal/", "client"},
	"internal/powercut":      {"internal/", "client"},
	"internal/runtimepolicy": {"internal/", "client"},
	"internal/s3/sigv4":      {"internal/", "client"},
	"internal/s3/checksum":   {"internal/", "client"},
	"internal/metricsrv":     {"internal/", "client"},
	"bench/s3load":           {"internal/", "client"},
	"internal/s3gw":          {"internal/osd", "internal/mon", "internal/objstore", "internal/cli", "internal/meta", "internal/rpc", "client"},
}

// only lists, per package, the project packages it may depend on at all
// (directly or indirectly, leaves too): the pure cores, which must stay
// free of IO so they are tested without a cluster.
var only = map[string][]string{
	"internal/keeper": {"internal/clustermap"},
	"internal/pg":     {"internal/clustermap", "internal/snapset"},
	"internal/report": {"internal/clustermap"},
	"internal/ec":     {"internal/clustermap"}, // whose ECProfile says what a layout may be
	"internal/health": {"internal/clustermap", "internal/placement", "internal/report"},
	// The dashboard reads the cluster through its Source and the catalog
	// its caller lists: it never talks to OSDs or etcd itself.
	"internal/dashboard": {"internal/clustermap", "internal/placement", "internal/report", "internal/health"},
}

// leaves are imported by any package: they import nothing of cairn.
var leaves = []string{"internal/bufpool"}

// TestImportGraph keeps dependencies pointing one way.
func TestImportGraph(t *testing.T) {
	const mod = "github.com/cairn-storage/cairn/"
	pkgs := map[string]bool{}
	for pkg := range forbidden {
		pkgs[pkg] = true
	}
	for pkg := range only {
		pkgs[pkg] = true
	}
	for pkg := range pkgs {
		bans := forbidden[pkg]
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(dep, mod)
			if !ok || rel == pkg {
				continue
			}
			if allowed, ok := only[pkg]; ok && !slices.Contains(allowed, rel) {
				t.Errorf("%s depends on %s; the architecture allows it only %s", pkg, rel, strings.Join(allowed, ", "))
			}
			if slices.Contains(leaves, rel) {
				continue
			}
			for _, ban := range bans {
				if rel == ban || strings.HasPrefix(rel, ban) && (strings.HasSuffix(ban, "/") || strings.HasPrefix(rel, ban+"/")) {
					t.Errorf("%s depends on %s, which the architecture forbids (%s)", pkg, rel, ban)
				}
			}
		}
	}
}

// TestCodeMapListsEveryPackage keeps ARCHITECTURE.md's code map true: it
// has a row for every package of the module and none for a package that
// is gone, and every package but the command wiring and the tests has
// import rules above.
func TestCodeMapListsEveryPackage(t *testing.T) {
	const mod = "github.com/cairn-storage/cairn"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{len .GoFiles}}", mod+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, files, _ := strings.Cut(line, " ")
		rel := strings.TrimPrefix(strings.TrimPrefix(path, mod), "/")
		if files != "0" || rel == "e2e" {
			pkgs = append(pkgs, rel)
		}
	}
	doc, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if name, _, ok = strings.Cut(name, "`"); ok {
				rows = append(rows, name)
			}
		}
	}
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			t.Errorf("package %s has no row in ARCHITECTURE.md's code map: add what it owns and what it must not import", p)
		}
		_, f := forbidden[p]
		_, o := only[p]
		if !f && !o && !slices.Contains([]string{"cmd/cairn", "internal/cli", "e2e"}, p) {
			t.Errorf("package %s has no import rules in lint_test.go (forbidden or only)", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("ARCHITECTURE.md's code map has a row for %s, which is not a package of the module", r)
		}
	}
}

// maxFuncLines bounds a function's length (non-test code): one that does
// not fit on a screen does more than one thing.
const maxFuncLines = 90

// TestFunctionsFitOnAScreen keeps every function of the product short
// enough to read at once.
func TestFunctionsFitOnAScreen(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines; split it into named steps (at most %d)", fset.Position(fn.Pos()), fn.Name.Name, n, maxFuncLines)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGofmt keeps every file as gofmt writes it.
func TestGofmt(t *testing.T) {
	out, err := exec.Command("gofmt", "-l", "..").CombinedOutput()
	if err != nil {
		t.Fatalf("gofmt: %v\n%s", err, out)
	}
	if files := strings.TrimSpace(string(out)); files != "" {
		t.Errorf("not gofmt-formatted (run gofmt -w on them):\n%s", files)
	}
}
