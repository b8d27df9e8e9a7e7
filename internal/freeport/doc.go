// Package freeport picks loopback ports for the nodes that tests and local
// chaos runs start, restart and kill.
//
// The rule it keeps: a port it returns is outside the kernel's ephemeral
// range. A port from ":0" is an ephemeral one, which any outgoing
// connection on the machine may take as its local port while the node is
// down; the node's restart then fails to bind its own address. Below the
// range, only a listener can take it.
package freeport
