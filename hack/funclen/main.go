// Command funclen fails when a hand-written function of the main module is longer
// than 100 lines, counted from `func` to the closing brace (doc comments excluded).
// hack/lint.sh runs it from the repository's root:
//
//	go run ./hack/funclen [-max 100] [-exceptions=false] [DIR...]   (default: pkg cmd hack test)
//
// Each offender is printed as `LINES path:line name`, longest first; the exit status
// is 1 when there is one. _test.go files, generated files (the "Code generated ...
// DO NOT EDIT." header), testdata and vendor directories, and directories of other
// modules (a nested go.mod) are not read.
//
// Past 100 lines a function usually does several things, and a newcomer reads it
// with no name to tell them where one stops.
// The tooling and test helpers under hack/ and test/ are read by the same people,
// so they are held to the same bound as the daemon's pkg/ and cmd/.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// exception lets one function over the bound through, as long as it does not grow.
type exception struct {
	dir      string // the package's directory, slash-separated, from the repository root
	name     string // as printed: "Func" or "Type.Method"
	maxLines int    // its length when it was listed: longer fails too
}

// exceptions are the functions over the bound that are being split elsewhere.
// Remove an entry when its function is split: an entry that matches no function over
// the bound fails the check, so the list only shrinks.
var exceptions = []exception{}

// funcLength is one function declaration and its length in lines.
type funcLength struct {
	path  string // slash-separated, as walked
	line  int
	name  string
	lines int
}

func (f funcLength) String() string {
	return fmt.Sprintf("%d %s:%d %s", f.lines, f.path, f.line, f.name)
}

func main() {
	maxLines := flag.Int("max", 100, "longest function allowed, in lines from `func` to the closing brace")
	useExceptions := flag.Bool("exceptions", true, "let the listed exceptions through (false: report every function over -max)")
	flag.Parse()
	roots := flag.Args()
	if len(roots) == 0 {
		roots = []string{"pkg", "cmd", "hack", "test"}
	}
	allowed := exceptions
	if !*useExceptions {
		allowed = nil
	}
	os.Exit(run(os.Stdout, os.Stderr, roots, *maxLines, allowed))
}

// run checks the functions under roots and reports to stdout (offenders) and stderr
// (why it failed); it returns the exit status.
func run(stdout, stderr io.Writer, roots []string, maxLines int, allowed []exception) int {
	var all []funcLength
	for _, root := range roots {
		found, err := measureTree(root)
		if err != nil {
			fmt.Fprintf(stderr, "funclen: %v\n", err)
			return 2
		}
		all = append(all, found...)
	}
	offenders, stale := check(all, maxLines, allowed)
	for _, f := range offenders {
		fmt.Fprintln(stdout, f)
	}
	if len(offenders) > 0 {
		fmt.Fprintf(stderr, "funclen: %d function(s) over %d lines: split each into functions that do one thing their name says\n", len(offenders), maxLines)
	}
	for _, e := range stale {
		fmt.Fprintf(stderr, "funclen: exception %s %s (%d lines) matches no function over %d lines: remove it from hack/funclen/main.go\n", e.dir, e.name, e.maxLines, maxLines)
	}
	if len(offenders) > 0 || len(stale) > 0 {
		return 1
	}
	return 0
}

// check returns the functions over maxLines that no exception allows (longest
// first) and the exceptions that allow nothing (their function is gone or short).
func check(all []funcLength, maxLines int, allowed []exception) (offenders []funcLength, stale []exception) {
	used := make([]bool, len(allowed))
	for _, f := range all {
		if f.lines <= maxLines {
			continue
		}
		i := slices.IndexFunc(allowed, func(e exception) bool {
			return e.dir == pathDir(f.path) && e.name == f.name
		})
		if i >= 0 && f.lines <= allowed[i].maxLines {
			used[i] = true
			continue
		}
		if i >= 0 {
			used[i] = true // it matched, but grew: reported as an offender, not as stale
		}
		offenders = append(offenders, f)
	}
	for i, e := range allowed {
		if !used[i] {
			stale = append(stale, e)
		}
	}
	slices.SortStableFunc(offenders, func(a, b funcLength) int {
		if a.lines != b.lines {
			return b.lines - a.lines
		}
		return strings.Compare(a.String(), b.String())
	})
	return offenders, stale
}

// pathDir is the slash-separated directory of a slash-separated file path.
func pathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i]
	}
	return "."
}

// measureTree measures every function of the hand-written, non-test Go files under
// root that belong to the module root is in.
func measureTree(root string) ([]funcLength, error) {
	var all []funcLength
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(path, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		found, err := measureFile(filepath.ToSlash(path))
		all = append(all, found...)
		return err
	})
	return all, err
}

// skipDir tells whether a directory below a root holds no code of this module to
// measure.
func skipDir(path, name string) bool {
	if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return true
	}
	_, err := os.Stat(filepath.Join(path, "go.mod"))
	return err == nil // another module
}

// measureFile measures the function declarations of one file; a generated file has
// none that count.
func measureFile(path string) ([]funcLength, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(file) {
		return nil, nil
	}
	var found []funcLength
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start := fset.Position(fn.Pos()) // the `func` keyword: the doc comment is not counted
		end := fset.Position(fn.End())
		found = append(found, funcLength{
			path:  path,
			line:  start.Line,
			name:  funcName(fn),
			lines: end.Line - start.Line + 1,
		})
	}
	return found, nil
}

// funcName is "Func" for a function and "Type.Method" for a method, whatever the
// receiver's pointer or type parameters.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.ParenExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}
