package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envTwins sets every flag not given on the command line from its
// environment variable TRUSTPLANE_<NAME>, so the Helm chart can configure
// nodes without templating arguments.
func envTwins(fs *flag.FlagSet) error { return envTwinsWith(fs, envName) }

// envTwinsWith is envTwins with the environment variable named by name.
func envTwinsWith(fs *flag.FlagSet, name func(flagName string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(name(f.Name)); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name(f.Name), v, serr)
			}
		}
	})
	return err
}

func envName(flagName string) string {
	return "TRUSTPLANE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
