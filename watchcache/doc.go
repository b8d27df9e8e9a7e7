// Package watchcache will own each node's window of applied events: watchers
// with namespace, label and field filters, bookmarks at the applied index,
// initial events, and the 410/504 resourceVersion rules. It is fed only from
// the fsm's applied stream (fsm.Listener) and never blocks apply: a slow
// watcher is cut off and resumes from its last resourceVersion.
//
// Nothing is here yet; watch requests answer 405 until it lands.
package watchcache
