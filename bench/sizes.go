package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"nodehub/e2e/harness"
)

func printSizes(dir string) error {
	fmt.Println("## binary size (stripped, CGO_ENABLED=0, -trimpath)")
	for _, a := range []arch{{"amd64", "", "amd64"}, {"arm64", "", "arm64"}, {"arm", "7", "armv7"}} {
		size, err := buildSize(dir, a.goarch, a.goarm)
		if err != nil {
			return err
		}
		fmt.Printf("binary_size_%s\t%.2f MiB\n", a.name, float64(size)/(1<<20))
	}
	return nil
}

type arch struct{ goarch, goarm, name string }

func buildSize(dir, goarch, goarm string) (int64, error) {
	out := filepath.Join(dir, "nodehub-"+goarch+goarm)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = harness.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOARM="+goarm)
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("build %s: %v\n%s", goarch, err, b)
	}
	st, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
