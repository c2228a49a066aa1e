package main

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"nodehub/hub"
)

// The design rules the code must keep (docs/ARCHITECTURE.md explains them). These tests read the
// source with the standard library only: go.mod, and each package's imports through go/build.

// directDependencies are the only modules the binary may depend on directly.
var directDependencies = []string{"golang.org/x/sys", "k8s.io/api", "k8s.io/apimachinery"}

// arrows are the allowed imports between the module's packages, as patterns ("hub/*": hub's
// sub-packages). Arrows point down: main → hub → hub's parts → {cache, filter, pool} →
// listwatch → wire; durable (files replaced whole) sits at the bottom beside wire; the node's
// features (node/*: credentials, the hub's link), which main configures and hub runs, beside
// hub's parts.
// docs/ARCHITECTURE.md shows this table; TestArchitectureDocShowsTheArrows keeps them in step.
var arrows = []struct{ from, to string }{
	{"main", "hub, node/*, cache, filter, pool, wire"},
	{"hub", "hub/*, node/*, cache, filter, pool, listwatch, wire"},
	{"hub/tokens", "durable, wire"},
	{"hub/*", "hub/tokens, cache, filter, pool, listwatch, durable, wire"},
	{"node/*", "durable, wire"},
	{"cache", "durable, wire"},
	{"filter", "wire"},
	{"pool", "listwatch, wire"},
	{"listwatch", "wire"},
	{"wire", "(nothing of ours)"},
	{"durable", "(nothing of ours)"},
	{"internal/certtest", "(nothing of ours)"}, // tests' certificates: no arrow leads to it, only tests import it
}

// pendingArrows are imports that break the table today and are being removed ("from → to").
var pendingArrows = map[string]bool{}

func TestGoModHasOnlyTheThreeDirectDependencies(t *testing.T) {
	f, err := os.Open("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var direct []string
	inRequire := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			inRequire = true
			continue
		case inRequire && line == ")":
			inRequire = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inRequire:
			continue
		}
		if line == "" || strings.HasPrefix(line, "//") || strings.Contains(line, "// indirect") {
			continue
		}
		direct = append(direct, strings.Fields(line)[0])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(direct)
	if !slices.Equal(direct, directDependencies) {
		t.Fatalf("go.mod's direct dependencies are %v; the binary may depend on %v only (test harnesses live in their own modules: test/e2e, bench)", direct, directDependencies)
	}
}

// modulePackages returns the root module's packages (not those of test/e2e or bench, which are
// modules of their own) with the imports of their non-test files, for every GOOS.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	ctx := build.Default
	ctx.UseAllFiles = true // every platform's files (listen_linux.go and listen_other.go)
	pkgs := map[string][]string{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != "." {
			return filepath.SkipDir // a module of its own
		}
		bp, err := ctx.ImportDir(p, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rel := filepath.ToSlash(p)
		if rel == "." {
			rel = "main"
		}
		pkgs[rel] = bp.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func TestImportsUseOnlyTheStandardLibraryAndTheThreeModules(t *testing.T) {
	for pkg, imports := range modulePackages(t) {
		for _, imp := range imports {
			first, _, _ := strings.Cut(imp, "/")
			if !strings.Contains(first, ".") || first == "nodehub" {
				continue // the standard library, or ours
			}
			if !slices.ContainsFunc(directDependencies, func(m string) bool { return imp == m || strings.HasPrefix(imp, m+"/") }) {
				t.Errorf("%s imports %s, from none of %v", pkg, imp, directDependencies)
			}
		}
	}
}

// allowed reports whether package from may import package to (both relative: "hub/local").
func allowed(from, to string) (ok, known bool) {
	match := func(pattern, pkg string) bool {
		m, _ := path.Match(pattern, pkg)
		return m
	}
	for _, a := range arrows {
		if !match(a.from, from) {
			continue
		}
		for _, p := range strings.Split(a.to, ", ") {
			if match(p, to) {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

func TestImportArrowsPointDown(t *testing.T) {
	pkgs := modulePackages(t)
	for _, want := range []string{"main", "hub", "cache", "filter", "pool", "wire"} {
		if _, ok := pkgs[want]; !ok {
			t.Fatalf("package %s not found; the walk is broken (found %v)", want, pkgs)
		}
	}
	for pkg, imports := range pkgs {
		for _, imp := range imports {
			to, ours := strings.CutPrefix(imp, "nodehub/")
			if !ours {
				continue
			}
			ok, known := allowed(pkg, to)
			switch {
			case !known:
				t.Errorf("package %s has no row in the arrows table (design_test.go, docs/ARCHITECTURE.md): say what it may import", pkg)
			case !ok && pendingArrows[pkg+" → "+to]:
				t.Logf("pending: %s imports %s (being removed)", pkg, to)
			case !ok:
				t.Errorf("%s imports %s: an arrow the table does not allow (arrows point down: main → hub → hub's parts → {cache, filter, pool} → listwatch → wire)", pkg, to)
			}
		}
	}
}

func TestArchitectureDocShowsTheArrows(t *testing.T) {
	doc, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arrows {
		row := fmt.Sprintf("| `%s` | %s |", a.from, a.to)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/ARCHITECTURE.md lacks the arrows row %q", row)
		}
	}
}

func TestArrowsTable(t *testing.T) {
	for _, tt := range []struct {
		from, to string
		ok       bool
	}{
		{"main", "hub", true}, {"main", "wire", true}, {"main", "hub/remote", false},
		{"hub", "hub/remote", true}, {"hub", "pool", true},
		{"hub/local", "cache", true}, {"node/certs", "durable", true}, {"main", "node/certs", true}, {"node/certs", "hub", false}, {"hub/local", "node/certs", false}, {"cache", "durable", true}, {"durable", "wire", false}, {"wire", "durable", false}, {"hub/local", "hub", false}, {"hub/local", "hub/remote", false},
		{"cache", "wire", true}, {"cache", "hub", false}, {"pool", "cache", false}, {"pool", "listwatch", true}, {"listwatch", "pool", false}, {"cache", "listwatch", false}, {"filter", "pool", false}, {"wire", "cache", false},
	} {
		if ok, known := allowed(tt.from, tt.to); ok != tt.ok || !known {
			t.Errorf("%s → %s: allowed %v (known %v), want %v", tt.from, tt.to, ok, known, tt.ok)
		}
	}
}

// README and the pages under docs/ point only inside the repository: a relative link names a
// file that exists here, and no path leaves the checkout. README is the map: it links every page.
func TestDocsPointInsideTheRepository(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`)
	pages, err := filepath.Glob("docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under docs/ (%v)", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		if !strings.Contains(string(readme), "]("+page+")") {
			t.Errorf("README does not link %s: every page under docs/ has a row in its map", page)
		}
	}
	for _, doc := range append([]string{"README.md"}, pages...) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(text), "../") {
			t.Errorf("%s names a path outside the repository (../)", doc)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links %s, which is not in the repository", doc, target)
			}
		}
	}
}

// flagDefaults are the flags whose default is a default of hub.Config: flags.go takes each from
// the hub's exported constant (hub/config.go, the one place a default is written), never a
// literal of its own.
var flagDefaults = map[string]string{
	"lb-mode":                     "hub.DefaultLBMode",
	"heartbeat-interval-seconds":  "hub.DefaultHeartbeatInterval",
	"heartbeat-timeout-seconds":   "hub.DefaultHeartbeatTimeout",
	"heartbeat-failed-retry":      "hub.DefaultHeartbeatFailed",
	"heartbeat-healthy-threshold": "hub.DefaultHeartbeatHealthy",
	"kubelet-health-grace-period": "hub.DefaultKubeletGracePeriod",
	"cache-sync-interval":         "hub.DefaultCacheSyncInterval",
	"gc-frequency":                "hub.DefaultGCFrequency",
	"pool-lease-namespace":        "hub.DefaultPoolLeaseNamespace",
	"pool-leader-timeout":         "hub.DefaultPoolLeaderTimeout",
}

func TestFlagDefaultsComeFromTheHubs(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "flags.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 3 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") {
			return true
		}
		lit, ok := call.Args[1].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, _ := strconv.Unquote(lit.Value)
		want, ok := flagDefaults[name]
		if !ok {
			return true
		}
		found[name] = true
		var def strings.Builder
		if err := printer.Fprint(&def, fset, call.Args[2]); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(def.String(), want) {
			t.Errorf("flags.go: --%s's default is %s; take it from %s (hub/config.go: a default is written in one place)", name, def.String(), want)
		}
		return true
	})
	for name := range flagDefaults {
		if !found[name] {
			t.Errorf("flags.go registers no --%s", name)
		}
	}
	// And the values agree: a hub.Config made from the default flags is the zero Config's.
	o, err := parseFlags([]string{"--server-addr=https://127.0.0.1:6443", "--node-name=n"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag      string
		got, want any
	}{
		{"lb-mode", o.lbMode, hub.DefaultLBMode},
		{"heartbeat-interval-seconds", time.Duration(o.hbInterval) * time.Second, hub.DefaultHeartbeatInterval},
		{"heartbeat-timeout-seconds", time.Duration(o.hbTimeout) * time.Second, hub.DefaultHeartbeatTimeout},
		{"heartbeat-failed-retry", o.hbFailedRetry, hub.DefaultHeartbeatFailed},
		{"heartbeat-healthy-threshold", o.hbHealthy, hub.DefaultHeartbeatHealthy},
		{"kubelet-health-grace-period", o.kubeletGrace, hub.DefaultKubeletGracePeriod},
		{"cache-sync-interval", o.cacheSync, hub.DefaultCacheSyncInterval},
		{"gc-frequency", time.Duration(o.gcFrequency) * time.Minute, hub.DefaultGCFrequency},
		{"pool-lease-namespace", o.poolLeaseNS, hub.DefaultPoolLeaseNamespace},
		{"pool-leader-timeout", o.poolLeaderTimeout, hub.DefaultPoolLeaderTimeout},
	} {
		if c.got != c.want {
			t.Errorf("--%s defaults to %v, the hub's default is %v", c.flag, c.got, c.want)
		}
	}
}

// keepRule: every cache write of a cloud answer starts in keep (hub/keep.go). In the packages that
// import the cache, only keep calls a Tee (cache.Manager.Tee, TeeDiscovery).
func TestOnlyKeepTeesIntoTheCache(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	for pkg, imports := range modulePackages(t) {
		if pkg == "cache" || !slices.Contains(imports, "nodehub/cache") {
			continue
		}
		dir := pkg
		if pkg == "main" {
			dir = "."
		}
		for file, f := range sourceFiles(t, fset, dir) {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "Tee" && sel.Sel.Name != "TeeDiscovery" {
						return true
					}
					if file == "hub/keep.go" && fn.Name.Name == "keep" {
						seen++
						return true
					}
					t.Errorf("%s: %s calls %s: a cloud answer goes into the cache through keep (hub/keep.go) only", fset.Position(call.Pos()), fn.Name.Name, sel.Sel.Name)
					return true
				})
			}
		}
	}
	if seen == 0 {
		t.Error("keep (hub/keep.go) calls no Tee: the rule's walk is broken")
	}
}

// goRule: every goroutine of the hub is one Server.Run waits for. In package hub, a go statement
// is only in the group that runs the parts (hub/group.go) and in Run's own file (hub/run.go: the
// cache beside the group, a server's Serve); a part is added with group.Go.
func TestHubStartsGoroutinesOnlyInRun(t *testing.T) {
	allowed := map[string]bool{"hub/group.go": true, "hub/run.go": true}
	fset := token.NewFileSet()
	seen := 0
	for file, f := range sourceFiles(t, fset, "hub") {
		ast.Inspect(f, func(n ast.Node) bool {
			if _, ok := n.(*ast.GoStmt); !ok {
				return true
			}
			seen++
			if !allowed[file] {
				t.Errorf("%s: a go statement outside Run: make it a part (group.Go in hub/run.go) so Run waits for it", fset.Position(n.Pos()))
			}
			return true
		})
	}
	if seen == 0 {
		t.Error("no go statement found in package hub: the rule's walk is broken")
	}
}

// sourceFiles parses the non-test Go files of dir, by their slash path ("hub/keep.go").
func sourceFiles(t *testing.T, fset *token.FileSet, dir string) map[string]*ast.File {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ast.File{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.ToSlash(file)] = f
	}
	return out
}

// pipelineRule: the request pipeline (hub/pipeline.go) is a type of its own, built with its
// dependencies; it knows nothing of the Server (listeners, lifecycle, GC, OTA) nor of Config. A
// file that holds a method of pipeline names neither.
func TestThePipelineKnowsNothingOfTheServer(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	for _, f := range sourceFiles(t, fset, "hub") {
		holds := false
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && receiverName(fn) == "pipeline" {
				holds = true
			}
		}
		if !holds {
			continue
		}
		seen++
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && (id.Name == "Server" || id.Name == "Config") {
				t.Errorf("%s: a file of the pipeline names %s: the pipeline gets what it needs from newPipeline's dependencies (hub/pipeline.go)", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
	}
	if seen == 0 {
		t.Error("no file holds a method of pipeline: the rule's walk is broken")
	}
}

// receiverName is the name of a method's receiver type.
func receiverName(fn *ast.FuncDecl) string {
	x := fn.Recv.List[0].Type
	if st, ok := x.(*ast.StarExpr); ok {
		x = st.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// onlineRule: whether the cloud is reachable has one source, the cloud state (hub/state.go),
// which follows the servers' health; everything else asks it. Outside state.go, package hub
// never reads a server's or the balancer's health (their Healthy, State, Reached).
func TestOnlyTheCloudStateDecidesOnline(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	for file, f := range sourceFiles(t, fset, "hub") {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Healthy" && sel.Sel.Name != "State" && sel.Sel.Name != "Reached" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "remote" {
				return true // remote.State, remote.Healthy: the names of the states
			}
			if file == "hub/state.go" {
				seen++
				return true
			}
			t.Errorf("%s: reads a server's health (%s): ask the cloud state (hub/state.go: Online, unreachable, answeredOnce), the one source of \"online\"", fset.Position(sel.Pos()), sel.Sel.Name)
			return true
		})
	}
	if seen == 0 {
		t.Error("state.go reads no server's health: the rule's walk is broken")
	}
}

// originRule: whether a request is the node's own is decided in one place, hub/origin.go, from
// the request's addresses and credential as it arrives. No other file of package hub reads a
// request's addresses (http.LocalAddrContextKey, Request.RemoteAddr) or asks IsLoopback, but the
// listeners' connection bound (hub/listen.go), which exempts the node's own connections.
func TestOnlyOriginDecidesTheNodesOwnRequest(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	for file, f := range sourceFiles(t, fset, "hub") {
		calls := map[*ast.SelectorExpr]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					calls[sel] = true
				}
			}
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			var what string
			switch {
			case sel.Sel.Name == "LocalAddrContextKey":
				what = "the address a request arrived on"
			case sel.Sel.Name == "RemoteAddr" && !calls[sel]:
				what = "a request's remote address"
			case sel.Sel.Name == "IsLoopback" && file != "hub/listen.go":
				what = "a loopback test"
			default:
				return true
			}
			if file == "hub/origin.go" {
				seen++
				return true
			}
			t.Errorf("%s: reads %s: whether a request is the node's own is decided in hub/origin.go (originOf, fromLoopback) only", fset.Position(sel.Pos()), what)
			return true
		})
	}
	if seen == 0 {
		t.Error("origin.go reads no request's address: the rule's walk is broken")
	}
}
