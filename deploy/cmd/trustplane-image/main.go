// Command trustplane-image builds trustplane's container image from a
// static binary, without a Docker engine (make image).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/trustplane/trustplane/deploy/image"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "trustplane-image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("trustplane-image", flag.ContinueOnError)
	binary := fs.String("binary", "", "static Linux trustplane binary (CGO_ENABLED=0)")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH the binary was built for")
	version := fs.String("version", "dev", "image version label")
	tag := fs.String("tag", "trustplane:dev", "image reference written into the tarball and layout")
	tarPath := fs.String("tar", "", "write a docker-load tarball here")
	ociDir := fs.String("oci", "", "write an OCI image layout into this new directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || (*tarPath == "" && *ociDir == "") {
		return fmt.Errorf("usage: trustplane-image --binary FILE [--tar FILE] [--oci DIR] [--tag REF]")
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	// SOURCE_DATE_EPOCH is the reproducible-builds convention; without it
	// the epoch keeps the digest a function of the binary alone.
	var created time.Time
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
		}
		created = time.Unix(sec, 0)
	}
	img, err := image.Build(image.Options{Binary: bin, Arch: *arch, Version: *version, Created: created})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if *tarPath != "" {
		if err := image.WriteTarball(*tarPath, *tag, img); err != nil {
			return err
		}
		fmt.Printf("wrote %s (%s, %s)\n", *tarPath, *tag, digest)
	}
	if *ociDir != "" {
		if err := image.WriteLayout(*ociDir, *tag, img); err != nil {
			return err
		}
		fmt.Printf("wrote OCI layout %s (%s, %s)\n", *ociDir, *tag, digest)
	}
	return nil
}
