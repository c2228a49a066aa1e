package main

import (
	"fmt"
	"os"

	"nodehub/e2e/harness"
)

func printSizes(dir string) error {
	fmt.Println("## binary size (make binary: stripped, static, -trimpath, no inlining in third-party packages)")
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
	out, err := harness.BuildFor(dir, goarch, goarm)
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
