package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// nonDefault changes nearly every value.
const nonDefault = `
replicaCount: 3
fullnameOverride: llama
image: {repository: registry.example/memra, tag: v9}
model: {spec: "hf:meta/llama@v2:Q8_0", name: llama}
hf: {endpoint: "http://mirror:8080", tokenSecret: {name: hf, key: token}}
cache: {mountPath: /models, persistence: {enabled: true, storageClass: fast, size: 200Gi}}
compiled: {dir: /compiled/llama, existingClaim: artifacts}
apiKeys: {existingSecret: keys, secretKey: k}
server:
  port: 8000
  metricsPort: 9400
  drainTimeoutSeconds: 120
  preStopSeconds: 20
  startupSeconds: 600
  extraArgs: [--no-prefix-cache]
  extraEnv: [{name: MEMRA_KV_CACHE, value: "q8_0"}]
autoscaling: {enabled: false}
pdb: {enabled: false}
metrics: {podAnnotations: false, serviceMonitor: {enabled: true, interval: 30s, labels: {release: prom}}}
inferencePool:
  endpointPicker: {create: false, name: shared-epp, port: 9100}
  httpRoute: {enabled: true, gateway: {name: gw, namespace: infra}, path: /v1}
nodeSelector: {gpu: h100}
`

func TestChartNonDefaults(t *testing.T) {
	o := render(t, nonDefault)
	require.Equal(t, []string{"Deployment/llama", "HTTPRoute/llama", "InferencePool/llama", "PersistentVolumeClaim/llama-cache",
		"Service/llama", "ServiceMonitor/llama"}, o.keys, "no autoscaler, budget, Secret or picker")
	dep := o.get(t, "Deployment", "llama").(*appsv1.Deployment)
	pod := dep.Spec.Template
	require.Equal(t, int32(3), *dep.Spec.Replicas)
	require.Equal(t, int64(20+120+10), *pod.Spec.TerminationGracePeriodSeconds)
	require.Empty(t, pod.Annotations["prometheus.io/scrape"])
	require.Equal(t, map[string]string{"gpu": "h100"}, pod.Spec.NodeSelector)
	c := container(t, pod.Spec, "memra", false)
	require.Equal(t, "registry.example/memra:v9", c.Image)
	for _, a := range []string{"--model=llama=hf:meta/llama@v2:Q8_0", "--port=8000", "--metrics-port=9400", "--compiled=/compiled/llama",
		"--api-keys-file=/etc/memra/api-keys/k", "--drain-timeout=120s", "--no-prefix-cache"} {
		require.Contains(t, c.Args, a)
	}
	for _, a := range c.Args {
		require.False(t, strings.HasPrefix(a, "--max-running"), "the artifact sets the sequences")
	}
	require.Equal(t, int32(60), c.StartupProbe.FailureThreshold)
	require.Equal(t, "/compiled", mount(c, "compiled"))
	require.Equal(t, "artifacts", volume(pod.Spec, "compiled").PersistentVolumeClaim.ClaimName)
	require.Equal(t, "keys", volume(pod.Spec, "api-keys").Secret.SecretName)
	require.Equal(t, "llama-cache", volume(pod.Spec, "cache").PersistentVolumeClaim.ClaimName)
	kvc, _ := env(c, "MEMRA_KV_CACHE")
	require.Equal(t, "q8_0", kvc.Value)
	home, _ := env(c, "HF_HOME")
	require.Equal(t, "/models/huggingface", home.Value)
	pull := container(t, pod.Spec, "pull", true)
	tok, ok := env(pull, "HF_TOKEN")
	require.True(t, ok)
	require.Equal(t, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "hf"}, Key: "token"}, *tok.ValueFrom.SecretKeyRef)
	_, ok = env(c, "HF_TOKEN")
	require.False(t, ok, "the server never sees the hub's token")
	ep, _ := env(pull, "HF_ENDPOINT")
	require.Equal(t, "http://mirror:8080", ep.Value)

	pvc := o.get(t, "PersistentVolumeClaim", "llama-cache").(*corev1.PersistentVolumeClaim)
	require.Equal(t, "fast", *pvc.Spec.StorageClassName)
	require.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, pvc.Spec.AccessModes)
	require.Equal(t, "200Gi", pvc.Spec.Resources.Requests.Storage().String())

	sm := o.get(t, "ServiceMonitor", "llama").(*monitoringv1.ServiceMonitor)
	svc := o.get(t, "Service", "llama").(*corev1.Service)
	require.True(t, selects(sm.Spec.Selector.MatchLabels, svc.Labels), "the monitor selects the Service")
	require.Equal(t, "metrics", sm.Spec.Endpoints[0].Port)
	require.Equal(t, "prom", sm.Labels["release"])
	require.Equal(t, int32(9400), svc.Spec.Ports[1].Port)

	pool := o.get(t, "InferencePool", "llama").(*inferencev1.InferencePool)
	require.Equal(t, "shared-epp", string(pool.Spec.EndpointPickerRef.Name))
	require.Equal(t, int32(9100), int32(pool.Spec.EndpointPickerRef.Port.Number))
	require.Equal(t, int32(8000), int32(pool.Spec.TargetPorts[0].Number))
	require.NoError(t, validatePoolSchema(o.yaml["InferencePool/llama"]))

	route := o.get(t, "HTTPRoute", "llama").(*gatewayv1.HTTPRoute)
	require.Equal(t, gatewayv1.ObjectName("gw"), route.Spec.ParentRefs[0].Name)
	require.Equal(t, gatewayv1.Namespace("infra"), *route.Spec.ParentRefs[0].Namespace)
	b := route.Spec.Rules[0].BackendRefs[0]
	require.Equal(t, "inference.networking.k8s.io", string(*b.Group))
	require.Equal(t, "InferencePool", string(*b.Kind))
	require.Equal(t, pool.Name, string(b.Name))
	require.Equal(t, "/v1", *route.Spec.Rules[0].Matches[0].Path.Value)
}

func TestChartWithoutPool(t *testing.T) {
	o := render(t, minimal+`
inferencePool: {enabled: false}
cache: {persistence: {enabled: true, existingClaim: shared}}
`)
	for _, k := range o.keys {
		require.NotContains(t, k, "InferencePool")
		require.NotContains(t, k, "epp")
		require.NotContains(t, k, "PersistentVolumeClaim", "an existing claim is not made")
	}
	dep := o.get(t, "Deployment", "memra").(*appsv1.Deployment)
	require.Equal(t, "shared", volume(dep.Spec.Template.Spec, "cache").PersistentVolumeClaim.ClaimName)
}

// TestChartStrictDecodingFails shows the decoding is strict: a field the
// API types do not have fails, as a misspelt one would.
func TestChartStrictDecodingFails(t *testing.T) {
	o := render(t, minimal)
	bad := strings.Replace(o.yaml["InferencePool/memra"], "targetPorts:", "targetPortz:", 1)
	require.Error(t, yaml.UnmarshalStrict([]byte(bad), &inferencev1.InferencePool{}))
	bad = strings.Replace(o.yaml["Deployment/memra"], "readinessProbe:", "readynessProbe:", 1)
	require.Error(t, yaml.UnmarshalStrict([]byte(bad), &appsv1.Deployment{}))
	require.Error(t, validatePoolSchema(strings.Replace(o.yaml["InferencePool/memra"], "failureMode: FailClose", "failureMode: Sometimes", 1)),
		"the CRD's schema holds the enums the Go types do not")
}

// validatePoolSchema validates an InferencePool's YAML against the
// openAPIV3Schema of the CRD the inference extension's module ships
// (required fields, enums, bounds, patterns).
func validatePoolSchema(doc string) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml"))
	if err != nil {
		return err
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return err
	}
	var schema map[string]any
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1" {
			schema = v.Schema.OpenAPIV3Schema
		}
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("inferencepool.json", schema); err != nil {
		return err
	}
	sch, err := c.Compile("inferencepool.json")
	if err != nil {
		return err
	}
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// TestPlainManifests keeps deploy/k8s/memra.yaml the chart's rendering
// with deploy/k8s/values.yaml (go test ./deploy -run PlainManifests -update
// rewrites it), and decodes it strictly like the chart's.
func TestPlainManifests(t *testing.T) {
	vals, err := os.ReadFile("k8s/values.yaml")
	require.NoError(t, err)
	docs, err := renderDocs(string(vals), "memra", "default")
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString("# Generated from the Helm chart deploy/helm/memra with deploy/k8s/values.yaml; DO NOT EDIT.\n")
	b.WriteString("# Regenerate: go test ./deploy -run PlainManifests -update. Before applying, set the model\n")
	b.WriteString("# (hf:OWNER/REPO:Q4_K_M below) and create the API keys' Secret (docs/DEPLOY.md).\n")
	for _, d := range docs {
		b.WriteString("---\n# Source: " + d.Template + "\n" + d.YAML)
	}
	want := b.String()
	if *update {
		require.NoError(t, os.WriteFile("k8s/memra.yaml", []byte(want), 0o644))
	}
	got, err := os.ReadFile("k8s/memra.yaml")
	require.NoError(t, err)
	require.Equal(t, want, string(got), "deploy/k8s/memra.yaml is out of date: go test ./deploy -run PlainManifests -update")
	o := decodeAll(t, docs)
	require.True(t, o.has("InferencePool", "memra"))
	require.True(t, o.has("HorizontalPodAutoscaler", "memra"))
}
