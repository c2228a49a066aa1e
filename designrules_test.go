package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The design rules docs/ARCHITECTURE.md states, checked on the type-checked module
// (designtypes_test.go): on what a name refers to, wherever it is spelt and however the package
// that holds it is imported.

// objKey names an object as "pkgpath.Name", a method or field as "pkgpath.Recv.Name".
func objKey(obj types.Object) string {
	if obj.Pkg() == nil {
		return obj.Name()
	}
	if f, ok := obj.(*types.Func); ok {
		if recv := f.Signature().Recv(); recv != nil {
			return obj.Pkg().Path() + "." + namedOf(recv.Type()) + "." + obj.Name()
		}
	}
	if v, ok := obj.(*types.Var); ok && v.IsField() {
		return obj.Pkg().Path() + "." + fieldOwner(v) + "." + obj.Name()
	}
	return obj.Pkg().Path() + "." + obj.Name()
}

// namedOf is the name of a (pointer to a) named type, "" for others.
func namedOf(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

// fieldOwner is the name of the package-level struct type that declares field v ("" if none).
func fieldOwner(v *types.Var) string {
	scope := v.Pkg().Scope()
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok {
			continue
		}
		st, ok := tn.Type().Underlying().(*types.Struct)
		if !ok {
			continue
		}
		for i := range st.NumFields() {
			if st.Field(i) == v {
				return name
			}
		}
	}
	return ""
}

// onlineRule: whether the cloud is reachable has one source, the cloud state (the type
// cloudState), which follows the health checker's verdicts on the servers. The verdict
// accessors are every method of hub/remote that reports a server's or the balancer's health (its
// result is a remote.State, or it is Healthy or Reached); outside hub/remote only cloudState's
// methods call them, whichever package imports hub/remote.
func TestOnlyTheCloudStateReadsTheVerdicts(t *testing.T) {
	m := typed(t)
	remote := m.pkg(t, "hub/remote").types
	state := remote.Scope().Lookup("State")
	if state == nil {
		t.Fatal("hub/remote declares no State: the rule's walk is broken")
	}
	verdict := map[types.Object]bool{}
	for _, name := range remote.Scope().Names() {
		tn, ok := remote.Scope().Lookup(name).(*types.TypeName)
		if !ok || !tn.Exported() {
			continue
		}
		ms := types.NewMethodSet(types.NewPointer(tn.Type()))
		for i := range ms.Len() {
			f := ms.At(i).Obj().(*types.Func)
			res := f.Signature().Results()
			if f.Name() == "Healthy" || f.Name() == "Reached" || res.Len() > 0 && res.At(0).Type() == state.Type() {
				verdict[f] = true
			}
		}
	}
	for _, want := range []struct{ typ, name string }{{"Backend", "Healthy"}, {"Backend", "State"}, {"Backend", "Reached"}, {"Balancer", "State"}} {
		if !verdict[m.method(t, "hub/remote", want.typ, want.name)] {
			t.Errorf("remote.%s.%s is not found among the verdict accessors: the rule's walk is broken", want.typ, want.name)
		}
	}
	seen := 0
	m.uses(func(o types.Object) bool { return verdict[o] }, func(u use) {
		switch {
		case u.pkg.rel == "hub/remote":
		case u.fn != nil && u.fn.Recv != nil && receiverName(u.fn) == "cloudState":
			seen++
		default:
			t.Errorf("%s: %s reads a server's health (%s): ask the cloud state (cloudState: Online, unreachable, answeredOnce), the one source of \"online\"",
				m.pos(u.id), funcName(u.fn), objKey(u.obj))
		}
	})
	if seen == 0 {
		t.Error("cloudState reads no verdict: the rule's walk is broken")
	}
}

// keepRule: every cache write of a cloud answer starts in Keep (hub/serve/keep.go). The cache's tees
// are its functions that take a cloud answer (an *http.Response); outside the cache only the
// function Keep calls them.
func TestOnlyKeepTeesIntoTheCache(t *testing.T) {
	m := typed(t)
	cache := m.pkg(t, "cache").types
	tees := map[types.Object]bool{}
	for _, name := range cache.Scope().Names() {
		obj := cache.Scope().Lookup(name)
		if f, ok := obj.(*types.Func); ok && takesResponse(f) {
			tees[f] = true
		}
		if tn, ok := obj.(*types.TypeName); ok {
			ms := types.NewMethodSet(types.NewPointer(tn.Type()))
			for i := range ms.Len() {
				if f := ms.At(i).Obj().(*types.Func); f.Exported() && takesResponse(f) {
					tees[f] = true
				}
			}
		}
	}
	if !tees[m.method(t, "cache", "Manager", "Tee")] {
		t.Fatal("cache.Manager.Tee is not found among the tees: the rule's walk is broken")
	}
	seen := 0
	m.uses(func(o types.Object) bool { return tees[o] }, func(u use) {
		switch {
		case u.pkg.rel == "cache":
		case funcName(u.fn) == "Keep":
			seen++
		default:
			t.Errorf("%s: %s calls %s: a cloud answer goes into the cache through Keep (hub/serve/keep.go) only",
				m.pos(u.id), funcName(u.fn), objKey(u.obj))
		}
	})
	if seen == 0 {
		t.Error("Keep calls no tee: the rule's walk is broken")
	}
}

// takesResponse reports whether f has a parameter of type *net/http.Response.
func takesResponse(f *types.Func) bool {
	params := f.Signature().Params()
	for i := range params.Len() {
		p, ok := params.At(i).Type().(*types.Pointer)
		if !ok {
			continue
		}
		if n, ok := p.Elem().(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "net/http" && n.Obj().Name() == "Response" {
			return true
		}
	}
	return false
}

// originRule: whether a request is the node's own is decided in one place, the file origin.go
// (originOf, FromLoopback), from the addresses a request arrived on and came from. Nothing else the
// binary links reads them (http.Request.RemoteAddr, http.LocalAddrContextKey, a connection's
// addresses) but the listeners' connection bound (hub/listen.go), which exempts the node's own
// connections, and the proxy port's lane (hub/lane: Lane.serveConn), which sets them on each
// request as net/http's server does; a package that needs the answer gets it from the hub (hub/ota: Handler.FromNode).
func TestOnlyOriginDecidesTheNodesOwnRequest(t *testing.T) {
	m := typed(t)
	addresses := map[string]string{
		"net/http.Request.RemoteAddr":  "a request's remote address",
		"net/http.LocalAddrContextKey": "the address a request arrived on",
		"net.Conn.RemoteAddr":          "a connection's remote address",
		"net.Conn.LocalAddr":           "a connection's local address",
		"net.conn.RemoteAddr":          "a connection's remote address",
		"net.conn.LocalAddr":           "a connection's local address",
		"crypto/tls.Conn.RemoteAddr":   "a connection's remote address",
		"crypto/tls.Conn.LocalAddr":    "a connection's local address",
	}
	seen := 0
	m.uses(func(o types.Object) bool { return addresses[objKey(o)] != "" }, func(u use) {
		switch {
		case path.Base(u.file) == "origin.go":
			seen++
		case u.file == "hub/listen.go":
		case u.file == "hub/lane/lane.go" && funcName(u.fn) == "Lane.serveConn":
			// A server: it gives each request the addresses its connection has, as net/http's does.
		default:
			t.Errorf("%s: %s reads %s: whether a request is the node's own is decided in origin.go (originOf, FromLoopback) only",
				m.pos(u.id), funcName(u.fn), addresses[objKey(u.obj)])
		}
	})
	if seen == 0 {
		t.Error("origin.go reads no request's address: the rule's walk is broken")
	}
}

// The packages' "what it does not do" (docs/ARCHITECTURE.md's packages table), where it shows in
// what a package imports or uses: a standard package it may not import, or an object of one it
// may not use ("net/http.Client" covers its methods too).
var doesNot = []struct {
	pkg, what string
	imports   []string
	objects   []string
}{
	{"filter", "no I/O", noIO, nil},
	{"hub/endpointfix", "no I/O", noIO, nil},
	{"listwatch", "no object decoding", []string{"encoding/json", "k8s.io/api/*", "k8s.io/apimachinery/*"}, nil},
	{"wire", "no I/O of its own", noIO[:4], outbound},
	{"hub/local", "no cloud access", []string{"net"}, outbound},
	{"hub/autonomy", "no cloud access of its own", []string{"net"}, outbound},
	{"hub/nodelease", "no choice of server", []string{"net"}, outbound},
	{"hub/topology", "no cloud access of its own", []string{"net", "net/http"}, nil},
	{"hub/identity", "no HTTP", []string{"net", "net/http"}, nil},
	{"hub/tokens", "no HTTP serving", []string{"net"}, serving},
	{"cache", "no HTTP serving", []string{"net"}, serving},
	{"pool", "no cache files, no listening", []string{"os"}, listening},
	{"durable", "no append-only logs", nil, []string{"os.O_APPEND"}},
	{"node/dummyif", "raw rtnetlink: no `ip` binary", []string{"os/exec"}, nil},
	// "A body is bytes": the stores hold and serve objects undecoded.
	{"cache", "no object decoding", []string{"k8s.io/*"}, nil},
	{"pool", "no object decoding into k8s.io/api types", []string{"k8s.io/api/*"}, nil},
}

var (
	noIO      = []string{"os", "net", "syscall", "golang.org/x/sys/*", "net/http", "io/fs", "os/exec"}
	outbound  = []string{"net/http.Client", "net/http.Transport", "net/http.DefaultClient", "net/http.DefaultTransport", "net/http.Get", "net/http.Post", "net/http.Head", "net.Dial", "net.DialTimeout", "net.Dialer", "crypto/tls.Dial", "crypto/tls.Dialer"}
	serving   = []string{"net/http.ResponseWriter", "net/http.Handler", "net/http.HandlerFunc", "net/http.ServeMux", "net/http.Server"}
	listening = []string{"net.Listen", "net.ListenConfig", "net.ListenTCP", "crypto/tls.Listen", "crypto/tls.NewListener", "net/http.ListenAndServe", "net/http.ListenAndServeTLS", "net/http.Server.ListenAndServe", "net/http.Server.ListenAndServeTLS", "net/http.Server.Serve", "net/http.Server.ServeTLS"}
)

func TestPackagesDoNotWhatTheMapSaysTheyDoNot(t *testing.T) {
	m := typed(t)
	imports := modulePackages(t)
	for _, d := range doesNot {
		p := m.pkg(t, d.pkg)
		for _, imp := range imports[d.pkg] {
			if slices.ContainsFunc(d.imports, func(pattern string) bool { ok, _ := path.Match(pattern, imp); return ok }) {
				t.Errorf("%s imports %s: the map says of it %q", d.pkg, imp, d.what)
			}
		}
		for file, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				id, ok := n.(*ast.Ident)
				if !ok || p.info.Uses[id] == nil {
					return true
				}
				key := objKey(p.info.Uses[id])
				if slices.ContainsFunc(d.objects, func(o string) bool { return key == o || strings.HasPrefix(key, o+".") }) {
					t.Errorf("%s (%s): uses %s: the map says of %s %q", m.pos(id), file, key, d.pkg, d.what)
				}
				return true
			})
		}
	}
}

// The map names only what is there: every file it names exists (a bare name.go in some package
// of the module), every test it names is a test of the module, and every Go name it spells as
// pkg.Name, Type.Method or pkg.Type.Method is declared (docs/ARCHITECTURE.md).
func TestArchitectureDocNamesWhatExists(t *testing.T) {
	doc, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	m := typed(t)
	tests := map[string]bool{}
	for k := range testFuncs(t, "Test") {
		tests[k[strings.Index(k, ":")+1:]] = true
	}
	code := regexp.MustCompile("`([^`]+)`")
	camel := regexp.MustCompile(`^[a-z]+[A-Z]\w*$|^[A-Z][a-z]+[A-Z]\w*$`) // chainFor, WatchWriter: a name of the code, not a word
	goName := regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*){1,2}$`)
	for _, l := range regexp.MustCompile(`\]\(([^)#]+\.md)#([^)]+)\)`).FindAllStringSubmatch(string(doc), -1) {
		if !hasHeading(t, filepath.Join("docs", l[1]), l[2]) {
			t.Errorf("docs/ARCHITECTURE.md links %s#%s: %s has no such heading", l[1], l[2], l[1])
		}
	}
	text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(doc), "")
	for _, c := range code.FindAllStringSubmatch(text, -1) {
		s := c[1]
		switch {
		case strings.HasSuffix(s, ".go") || strings.HasSuffix(s, "go.mod") || strings.HasSuffix(s, "go.sum") || strings.HasSuffix(s, ".sh"):
			if !fileInModule(s) {
				t.Errorf("docs/ARCHITECTURE.md names %s, which is not in the repository", s)
			}
		case strings.HasPrefix(s, "Test"):
			if !tests[s] {
				t.Errorf("docs/ARCHITECTURE.md names the test %s, which the module does not hold", s)
			}
		case camel.MatchString(s) && !apiNames[s]:
			if !m.declaresAnywhere(s) {
				t.Errorf("docs/ARCHITECTURE.md names %s, which no package of the module declares", s)
			}
		case goName.MatchString(s) && !strings.HasSuffix(s, ".md") && !outsideModule[strings.Split(s, ".")[0]]:
			if !m.declares(s) {
				t.Errorf("docs/ARCHITECTURE.md names %s, which no package of the module declares", s)
			}
		}
	}
}

// hasHeading reports whether the markdown file holds a heading whose anchor (GitHub's: lower
// case, punctuation dropped, spaces as hyphens) is anchor.
func hasHeading(t *testing.T, file, anchor string) bool {
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, line := range strings.Split(string(text), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(title)), ""), " ", "-") == anchor {
			return true
		}
	}
	return false
}

// apiNames are names the map spells in code that are Kubernetes' or the standard library's.
var apiNames = map[string]bool{"sendInitialEvents": true, "SelfSubjectReview": true, "IsLoopback": true,
	"ReverseProxy": true, "ModifyResponse": true, "ErrorHandler": true}

// outsideModule are packages of the repository's other modules the map names (test/e2e).
var outsideModule = map[string]bool{"harness": true}

// fileInModule reports whether name (a slash path, or a bare file name found in any directory)
// is a file of the repository.
func fileInModule(name string) bool {
	if strings.Contains(name, "/") {
		_, err := os.Stat(filepath.FromSlash(name))
		return err == nil
	}
	found := false
	_ = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name {
			found = true
		}
		return nil
	})
	return found
}

// testFuncs are the test functions of the module's packages whose name starts with prefix
// ("Test", "Fuzz"), as "package:Name" ("cache:FuzzResync"; the root package is "main").
func testFuncs(t *testing.T, prefix string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	for rel := range modulePackages(t) {
		dir := rel
		if rel == "main" {
			dir = "."
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		for _, file := range files {
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, prefix) {
					names[rel+":"+fn.Name.Name] = true
				}
			}
		}
	}
	return names
}

// declares reports whether s ("pkg.Name", "Type.Method", "pkg.Type.Method") is declared in the
// module: pkg is a package's last element; Type, a type of any package.
func (m *typedModule) declares(s string) bool {
	parts := strings.Split(s, ".")
	for _, p := range m.pkgs {
		scope := p.types.Scope()
		if path.Base(p.rel) == parts[0] || p.rel == parts[0] {
			if obj := scope.Lookup(parts[1]); obj != nil && (len(parts) == 2 || hasMember(obj, parts[2])) {
				return true
			}
		}
		if len(parts) == 2 {
			if obj := scope.Lookup(parts[0]); obj != nil && hasMember(obj, parts[1]) {
				return true
			}
		}
		for _, imp := range p.types.Imports() {
			if imp.Name() == parts[0] {
				if obj := imp.Scope().Lookup(parts[1]); obj != nil && (len(parts) == 2 || hasMember(obj, parts[2])) {
					return true
				}
			}
		}
	}
	return false
}

// hasMember reports whether obj is a type with a method or field name.
func hasMember(obj types.Object, name string) bool {
	tn, ok := obj.(*types.TypeName)
	if !ok {
		return false
	}
	f, _, _ := types.LookupFieldOrMethod(types.NewPointer(tn.Type()), true, tn.Pkg(), name)
	return f != nil
}

// declaresAnywhere reports whether some package of the module declares name at its top level,
// or as a method or field of one of its types.
func (m *typedModule) declaresAnywhere(name string) bool {
	for _, p := range m.pkgs {
		scope := p.types.Scope()
		if scope.Lookup(name) != nil {
			return true
		}
		for _, n := range scope.Names() {
			if hasMember(scope.Lookup(n), name) {
				return true
			}
		}
	}
	return false
}

// A response filter is one file of package filter and a row of its table (docs/ARCHITECTURE.md,
// "where each kind of change goes"): each type of the package that implements filter.Filter is
// declared in a file of its own, and the table (table.go's table) builds it.
func TestEachFilterIsOneFileAndARowOfTheTable(t *testing.T) {
	m := typed(t)
	p := m.pkg(t, "filter")
	iface, ok := p.types.Scope().Lookup("Filter").Type().Underlying().(*types.Interface)
	if !ok {
		t.Fatal("filter.Filter is not an interface: the rule's walk is broken")
	}
	inTable := map[types.Object]bool{}
	byFile := map[string][]string{}
	for file, f := range p.files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "table" {
				ast.Inspect(fn, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok && p.info.Uses[id] != nil {
						inTable[p.info.Uses[id]] = true
					}
					return true
				})
			}
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				obj := p.info.Defs[s.(*ast.TypeSpec).Name]
				if _, isIface := obj.Type().Underlying().(*types.Interface); !isIface && types.Implements(types.NewPointer(obj.Type()), iface) {
					byFile[file] = append(byFile[file], obj.Name())
				}
			}
		}
	}
	if len(inTable) == 0 || len(byFile) == 0 {
		t.Fatal("no table or no filter found in package filter: the rule's walk is broken")
	}
	for file, names := range byFile {
		if len(names) > 1 {
			t.Errorf("%s declares the filters %v: one file per filter", file, names)
		}
		for _, name := range names {
			if !inTable[p.types.Scope().Lookup(name)] {
				t.Errorf("%s: the filter %s is not a row of the table (table.go)", file, name)
			}
		}
	}
}

// Inside cache, the log engine (the disk, the log file and its records as bytes: the files
// cacheEngine names) knows nothing of what the cache means by a record (cache's package comment,
// "The code"): its files use no type of the cache but the engine's own (declared in its files,
// and the two it shares with the Store: pending, what the next sync makes durable; counters) —
// not the Store, an index, an owner, an object, a list or a key — nor any method or field of one.
func TestTheLogEngineKnowsNothingOfTheCachesMeaning(t *testing.T) {
	m := typed(t)
	p := m.pkg(t, "cache")
	engineFile := map[string]bool{}
	for _, name := range cacheEngine {
		if _, ok := p.files["cache/"+name]; !ok {
			t.Fatalf("cache/%s is not a file of package cache: the engine's list is stale", name)
		}
		engineFile["cache/"+name] = true
	}
	own := func(tn *types.TypeName) bool {
		file := filepath.ToSlash(m.fset.Position(tn.Pos()).Filename)
		return tn.Name() == "pending" || tn.Name() == "counters" || slices.ContainsFunc(cacheEngine, func(n string) bool { return strings.HasSuffix(file, "/cache/"+n) })
	}
	seen := 0
	m.uses(func(o types.Object) bool { return o.Pkg() == p.types }, func(u use) {
		if u.pkg != p || !engineFile[u.file] {
			return
		}
		seen++
		var tn *types.TypeName
		switch o := u.obj.(type) {
		case *types.TypeName:
			tn = o
		case *types.Func:
			if recv := o.Signature().Recv(); recv != nil {
				tn = p.types.Scope().Lookup(namedOf(recv.Type())).(*types.TypeName)
			}
		case *types.Var:
			if o.IsField() {
				if owner := fieldOwner(o); owner != "" {
					tn = p.types.Scope().Lookup(owner).(*types.TypeName)
				}
			}
		}
		if tn != nil && !own(tn) {
			t.Errorf("%s: the log engine uses %s (of the cache's %s), which is the cache's meaning", m.pos(u.id), u.obj.Name(), tn.Name())
		}
	})
	if seen == 0 {
		t.Error("the log engine's files use nothing of the cache: the rule's walk is broken")
	}
}

// cacheEngine are the log engine's files (cache's package comment, "The code").
var cacheEngine = []string{"disk.go", "readonly.go", "quarantine.go", "smallfile.go", "frame.go", "logfile.go", "logscan.go", "resync.go", "crcshift.go", "logrewrite.go"}

// Every file the hub keeps is replaced whole through one package, durable (docs/ARCHITECTURE.md,
// "What survives a crash"): outside it no package creates, writes or renames a file, but the
// cache's log engine for what has a contract of its own (logfile.go: the append-only logs;
// dir.go: the directory's lock; quarantine.go: a bad region kept for a look).
func TestFilesAreReplacedWholeThroughDurable(t *testing.T) {
	m := typed(t)
	writes := []string{"os.WriteFile", "os.Create", "os.CreateTemp", "os.OpenFile", "os.Rename", "os.Link", "os.Symlink",
		"os.Root.WriteFile", "os.Root.Create", "os.Root.OpenFile", "os.Root.Rename", "os.Root.Link", "os.Root.Symlink"}
	own := map[string]bool{"cache/logfile.go": true, "cache/dir.go": true, "cache/quarantine.go": true}
	seen := 0
	m.uses(func(o types.Object) bool { return slices.Contains(writes, objKey(o)) }, func(u use) {
		switch {
		case u.pkg.rel == "durable":
			seen++
		case own[u.file]:
		default:
			t.Errorf("%s: %s writes a file (%s): a file the hub keeps is replaced whole through durable (WriteFile, Batch, CreateIn)", m.pos(u.id), funcName(u.fn), objKey(u.obj))
		}
	})
	if seen == 0 {
		t.Error("durable writes no file: the rule's walk is broken")
	}
}

// Every fuzz target of the module runs in make test: the Makefile's FUZZ_TARGETS lists each
// (package:target), and lists only targets there are (docs/ARCHITECTURE.md: a new parser gets one).
func TestEveryFuzzTargetRunsInMakeTest(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?m)^FUZZ_TARGETS := \\\n((?:.*\\\n)*.*)`).FindSubmatch(mk)
	if block == nil {
		t.Fatal("the Makefile has no FUZZ_TARGETS: the rule's walk is broken")
	}
	listed := map[string]bool{}
	for _, f := range strings.Fields(strings.ReplaceAll(string(block[1]), "\\", " ")) {
		listed[f] = true
	}
	found := testFuncs(t, "Fuzz")
	for _, target := range onlyIn(found, listed) {
		t.Errorf("the fuzz target %s is not in the Makefile's FUZZ_TARGETS: make test does not run it", target)
	}
	for _, target := range onlyIn(listed, found) {
		t.Errorf("the Makefile's FUZZ_TARGETS lists %s, which is no fuzz target of the module", target)
	}
}

// No global mutable state (docs/ARCHITECTURE.md, "Rules every change keeps"): a package-level
// variable of the module is a table, a constant value or a pool of scratch buffers (sync.Pool),
// written only where it is declared: no function (init aside) assigns to it or to an element or
// field of it, deletes from it, clears it or takes its address, and none is a lock or an atomic.
func TestNoGlobalMutableState(t *testing.T) {
	m := typed(t)
	globals := map[types.Object]bool{}
	for rel, p := range m.pkgs {
		if !p.inBinary {
			continue
		}
		for _, name := range p.types.Scope().Names() {
			v, ok := p.types.Scope().Lookup(name).(*types.Var)
			if !ok {
				continue
			}
			globals[v] = true
			if n, ok := v.Type().(*types.Named); ok && n.Obj().Pkg() != nil {
				if path := n.Obj().Pkg().Path(); path == "sync/atomic" || path == "sync" && n.Obj().Name() != "Pool" {
					t.Errorf("%s: the package-level %s is a %s: state belongs to a value someone owns", rel, name, v.Type())
				}
			}
		}
	}
	if len(globals) == 0 {
		t.Fatal("no package-level variable found: the rule's walk is broken")
	}
	m.decls(func(p *typedPkg, _ string, d ast.Decl) {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || fn.Recv == nil && fn.Name.Name == "init" {
			return
		}
		for _, x := range written(fn.Body) {
			if id := rootIdent(p.info, x); id != nil && globals[p.info.Uses[id]] {
				t.Errorf("%s: %s writes the package-level %s: no global mutable state", m.pos(x), funcName(fn), id.Name)
			}
		}
	})
}

// written are the expressions body writes to: assigned, incremented, deleted from, cleared, or
// whose address it takes.
func written(body *ast.BlockStmt) []ast.Expr {
	var out []ast.Expr
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok != token.DEFINE {
				out = append(out, n.Lhs...)
			}
		case *ast.IncDecStmt:
			out = append(out, n.X)
		case *ast.UnaryExpr:
			if n.Op == token.AND {
				out = append(out, n.X)
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "delete" || id.Name == "clear") && len(n.Args) > 0 {
				out = append(out, n.Args[0])
			}
		}
		return true
	})
	return out
}

// rootIdent is the variable an lvalue is of (x of x.f[i], v of pkg.v), nil if none.
func rootIdent(info *types.Info, x ast.Expr) *ast.Ident {
	for {
		switch e := x.(type) {
		case *ast.Ident:
			return e
		case *ast.SelectorExpr:
			if id, ok := e.X.(*ast.Ident); ok {
				if _, isPkg := info.Uses[id].(*types.PkgName); isPkg {
					return e.Sel
				}
			}
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.StarExpr:
			x = e.X
		case *ast.ParenExpr:
			x = e.X
		default:
			return nil
		}
	}
}

// The node's identity (remote.Node) is lent to a client's request in one place, origin.go
// (origin.identity: a request on the plain port, over loopback from loopback, without a credential
// of its own). Elsewhere it is only compared (== or !=), or given to the hub's own requests: its
// client (cloudClient) and the heartbeat (serverAsNode), which carry no client's request.
func TestOnlyOriginLendsTheNodesIdentity(t *testing.T) {
	m := typed(t)
	node := m.pkg(t, "hub/remote").types.Scope().Lookup("Node")
	if node == nil {
		t.Fatal("hub/remote declares no Node: the rule's walk is broken")
	}
	compared := map[*ast.Ident]bool{}
	for _, p := range m.pkgs {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				if b, ok := n.(*ast.BinaryExpr); ok && (b.Op == token.EQL || b.Op == token.NEQ) {
					for _, x := range []ast.Expr{b.X, b.Y} {
						if sel, ok := x.(*ast.SelectorExpr); ok {
							compared[sel.Sel] = true
						}
					}
				}
				return true
			})
		}
	}
	seen := 0
	m.uses(func(o types.Object) bool { return o == node }, func(u use) {
		switch {
		case u.pkg.rel == "hub/remote" || compared[u.id]:
		case path.Base(u.file) == "origin.go":
			seen++
		case slices.Contains([]string{"cloudClient", "serverAsNode"}, strings.Split(funcName(u.fn), ".")[0]):
		default:
			t.Errorf("%s: %s gives a request the node's identity: only origin.go lends it (a request over loopback from loopback on the plain port, without a credential of its own)", m.pos(u.id), funcName(u.fn))
		}
	})
	if seen == 0 {
		t.Error("origin.go lends no request the node's identity: the rule's walk is broken")
	}
}
