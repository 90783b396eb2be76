package pg

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Scenario scripts (testdata/*.txt) walk one PG through a story a reviewer
// wants to read, against the same decision code the OSD runs. A script is
// blocks of one command line, a line "----" and the expected output, up to
// a blank line; lines starting with # are comments. `go test
// ./internal/pg -run TestScenarios -rewrite` writes the outputs anew.
//
// Commands:
//
//	copy osd=N [obj=E'V ...]          OSD N's copy of the PG now holds exactly these objects
//	record epoch=E acting=A,B complete=C,D   the record in etcd
//	peer self=N epoch=E acting=A,B,C up=...  N peers: every up OSD of the acting set and
//	                                         the record's complete ones answer
//	recover osd=N obj=NAME            the primary copies NAME from the authoritative copy to N
//	settle                            the primary writes what recovery achieved into the record,
//	                                  unless a primary with a newer map recorded it since
var rewrite = flag.Bool("rewrite", false, "write the scenario outputs anew")

type scenario struct {
	copies  map[clustermap.OSDID]map[string]ObjState
	rec     *Record
	primary *Peered
}

func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenario scripts in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScenario(t, f) })
	}
}

func runScenario(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario{copies: map[clustermap.OSDID]map[string]ObjState{}}
	var out strings.Builder
	lines := bufio.NewScanner(strings.NewReader(string(b)))
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		var want []string
		lines.Scan() // ----
		for lines.Scan() && lines.Text() != "" {
			want = append(want, lines.Text())
		}
		got := sc.run(t, line)
		if !*rewrite && strings.Join(want, "\n") != got {
			t.Errorf("%s: %s\nwant:\n%s\ngot:\n%s", path, line, strings.Join(want, "\n"), got)
		}
		fmt.Fprintf(&out, "%s\n----\n%s\n\n", line, got)
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// run carries out one command and describes its outcome.
func (sc *scenario) run(t *testing.T, line string) string {
	f := strings.Fields(line)
	args := map[string]string{}
	var objs []string
	for _, a := range f[1:] {
		k, v, _ := strings.Cut(a, "=")
		if f[0] == "copy" && k != "osd" {
			objs = append(objs, a)
			continue
		}
		args[k] = v
	}
	switch f[0] {
	case "copy":
		c := map[string]ObjState{}
		for _, o := range objs {
			name, ver, _ := strings.Cut(o, "=")
			c[name] = ObjState{Ver: parseEVersion(t, ver)}
		}
		sc.copies[osdArg(t, args["osd"])] = c
		return "ok"
	case "record":
		sc.rec = &Record{Epoch: clustermap.Epoch(num(t, args["epoch"])), Acting: osdsArg(t, args["acting"]), Complete: osdsArg(t, args["complete"])}
		return "ok"
	case "peer":
		return sc.peer(t, args)
	case "recover":
		return sc.recover(t, osdArg(t, args["osd"]), args["obj"])
	case "settle":
		return sc.settle()
	}
	t.Fatalf("unknown command %q", f[0])
	return ""
}

func (sc *scenario) peer(t *testing.T, args map[string]string) string {
	self, acting, up := osdArg(t, args["self"]), osdsArg(t, args["acting"]), osdsArg(t, args["up"])
	epoch := clustermap.Epoch(num(t, args["epoch"]))
	if err := Replaces(sc.rec, epoch); err != nil {
		sc.primary = nil
		return "down: " + err.Error()
	}
	probe := slices.Clone(acting)
	if sc.rec != nil {
		probe = append(probe, sc.rec.Complete...)
	}
	lists := map[clustermap.OSDID]*Listing{}
	for _, o := range probe {
		if slices.Contains(up, o) {
			lists[o] = &Listing{Objs: sc.copies[o]}
		}
	}
	res, err := Decide(self, epoch, acting, sc.rec, lists)
	if err != nil {
		sc.primary = nil
		return "down: " + err.Error()
	}
	sc.primary = &res
	sc.rec = &Record{Epoch: epoch, Acting: acting, Complete: res.Complete}
	return sc.describe(fmt.Sprintf("active at epoch %d, authoritative copy on %s, versions continue after %d", epoch, res.Auth, res.LastUpdate))
}

func (sc *scenario) recover(t *testing.T, osd clustermap.OSDID, name string) string {
	if sc.primary == nil {
		return "no active primary"
	}
	if !sc.primary.ClearMissing(osd, name) {
		return fmt.Sprintf("%s does not lack %s", osd, name)
	}
	if st, ok := sc.copies[sc.primary.Auth][name]; ok {
		sc.copies[osd][name] = st
	} else {
		delete(sc.copies[osd], name)
	}
	return "ok"
}

func (sc *scenario) settle() string {
	if sc.primary == nil {
		return "no active primary"
	}
	complete, writeSet, allActing, changed := sc.primary.AfterRecovery()
	if !changed {
		return "record unchanged"
	}
	if err := Replaces(sc.rec, sc.primary.Epoch); err != nil {
		return "record not updated: " + err.Error()
	}
	sc.primary.Complete, sc.primary.WriteSet = complete, writeSet
	sc.rec = &Record{Epoch: sc.primary.Epoch, Acting: sc.primary.Acting, Complete: complete}
	head := "record updated"
	if allActing {
		head = "record updated: every acting member holds every object"
	}
	return sc.describe(head)
}

// describe prints the primary's state and the record, sorted.
func (sc *scenario) describe(head string) string {
	ps := sc.primary
	lines := []string{head,
		"complete: " + OSDList(ps.Complete),
		"write set: " + OSDList(ps.WriteSet)}
	var who []clustermap.OSDID
	for o, m := range ps.Missing {
		if len(m) > 0 {
			who = append(who, o)
		}
	}
	slices.Sort(who)
	for _, o := range who {
		var names []string
		for n := range ps.Missing[o] {
			names = append(names, n)
		}
		sort.Strings(names)
		lines = append(lines, fmt.Sprintf("%s lacks: %s", o, strings.Join(names, ", ")))
	}
	lines = append(lines, fmt.Sprintf("record: epoch %d, acting %s, complete %s", sc.rec.Epoch, OSDList(sc.rec.Acting), OSDList(sc.rec.Complete)))
	return strings.Join(lines, "\n")
}

func num(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("bad number %q", s)
	}
	return n
}

func parseEVersion(t *testing.T, s string) EVersion {
	e, v, ok := strings.Cut(s, "'")
	if !ok {
		t.Fatalf("bad eversion %q: want EPOCH'VERSION", s)
	}
	return EVersion{num(t, e), num(t, v)}
}

func osdArg(t *testing.T, s string) clustermap.OSDID { return clustermap.OSDID(num(t, s)) }

func osdsArg(t *testing.T, s string) []clustermap.OSDID {
	var out []clustermap.OSDID
	for _, f := range strings.Split(s, ",") {
		if f != "" {
			out = append(out, osdArg(t, f))
		}
	}
	return out
}
