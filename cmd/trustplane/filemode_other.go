//go:build !unix

package main

// privateFiles relies on the modes each file is created with.
func privateFiles() {}
