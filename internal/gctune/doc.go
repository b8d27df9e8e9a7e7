// Package gctune sets the Go garbage collector's percentage (GOGC) from the
// live heap after every collection, so that a node holding a small store
// pays no collector CPU for memory it does not need to save, and a node
// holding a large one does not peak at twice its live heap.
//
// Rules it keeps:
//
//   - The heap may grow by Percent of what is live, and by at least Floor
//     bytes: the percentage in force is Percent, raised towards Ceiling
//     (300) while Percent of the live heap is less than Floor. It never
//     goes above max(Percent, Ceiling), and above 100 only while the
//     growth that allows stays under Floor: a small store holds at most
//     Floor more than Go's default would let it, and a large one less.
//   - It only reads the runtime's figures and calls debug.SetGCPercent,
//     which neither stops the world nor triggers a collection; it changes
//     the setting only when the percentage moves by more than a few
//     points.
//   - A GOMEMLIMIT from the environment still applies (the runtime
//     enforces it on top of the percentage).
package gctune
