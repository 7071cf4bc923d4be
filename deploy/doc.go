// Package deploy holds what runs memra on a cluster: the Dockerfile's
// image (built by `make image`), the Helm chart deploy/helm/memra and the
// plain manifests deploy/k8s/memra.yaml rendered from it (docs/DEPLOY.md).
//
// Its tests render the chart as `helm template` would (deploy/chart) with
// the default values and with others, decode every object strictly into
// the Kubernetes API types and the CRDs' types (the InferencePool of the
// Gateway API Inference Extension, HTTPRoute, ServiceMonitor; an unknown
// field fails), check the InferencePool against its CRD's schema, check
// that the objects fit together (selectors, ports, names, the drain and
// the grace period), and keep the plain manifests equal to the chart's
// rendering.
package deploy
