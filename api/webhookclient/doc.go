// Package webhookclient owns how a node calls the webhooks its users
// configure (admission webhooks, and the service and client rules every
// webhook client of kube's shares): kube's webhook client manager builds
// each client, and this package hands it the two parts a node must
// decide itself.
//
// The rules it keeps:
//
//   - A webhook is reached at its URL only. trustplane runs no Service
//     proxy and has no endpoints, so a Service reference resolves to an
//     error (Services), which admission also refuses when a configuration
//     is written (registry.WebhookConfigurationResources), with
//     NoServiceReference as the reason.
//   - A webhook's answer is read up to a limit (Limit): kube's client
//     reads whole bodies, and a webhook that answers without end would
//     otherwise hold as much of a node's memory as it sends before its
//     timeout. A longer answer fails the call with ErrResponseTooLarge,
//     which quotes nothing of it.
package webhookclient
