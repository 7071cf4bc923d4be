package deploy

import (
	"flag"
	"slices"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/memra-ai/memra/deploy/chart"
)

var update = flag.Bool("update", false, "rewrite deploy/k8s/memra.yaml from the chart")

const chartDir = "helm/memra"

// types are the objects the chart may render, by apiVersion and kind.
var types = map[string]func() any{
	"v1/Service":                                   func() any { return &corev1.Service{} },
	"v1/Secret":                                    func() any { return &corev1.Secret{} },
	"v1/ServiceAccount":                            func() any { return &corev1.ServiceAccount{} },
	"v1/PersistentVolumeClaim":                     func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                           func() any { return &appsv1.Deployment{} },
	"autoscaling/v2/HorizontalPodAutoscaler":       func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1/PodDisruptionBudget":                func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1/Role":            func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":     func() any { return &rbacv1.RoleBinding{} },
	"inference.networking.k8s.io/v1/InferencePool": func() any { return &inferencev1.InferencePool{} },
	"gateway.networking.k8s.io/v1/HTTPRoute":       func() any { return &gatewayv1.HTTPRoute{} },
	"monitoring.coreos.com/v1/ServiceMonitor":      func() any { return &monitoringv1.ServiceMonitor{} },
}

// objects are a rendering's objects by "Kind/name", decoded strictly.
type objects struct {
	byKey map[string]any
	yaml  map[string]string
	keys  []string
}

func (o objects) get(t *testing.T, kind, name string) any {
	t.Helper()
	v, ok := o.byKey[kind+"/"+name]
	require.True(t, ok, "no %s/%s among %v", kind, name, o.keys)
	return v
}

func (o objects) has(kind, name string) bool { _, ok := o.byKey[kind+"/"+name]; return ok }

// render renders the chart as release "memra" in namespace "ai" with
// overrides (YAML) and decodes every document strictly.
func render(t *testing.T, overrides string) objects {
	t.Helper()
	docs, err := renderDocs(overrides, "memra", "ai")
	require.NoError(t, err)
	return decodeAll(t, docs)
}

func renderDocs(overrides, release, namespace string) ([]chart.Document, error) {
	c, err := chart.Load(chartDir)
	if err != nil {
		return nil, err
	}
	over, err := chart.ParseValues([]byte(overrides))
	if err != nil {
		return nil, err
	}
	return c.Render(chart.Release{Name: release, Namespace: namespace}, over)
}

func decodeAll(t *testing.T, docs []chart.Document) objects {
	t.Helper()
	o := objects{byKey: map[string]any{}, yaml: map[string]string{}}
	for _, d := range docs {
		var head struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(d.YAML), &head), "%s:\n%s", d.Template, d.YAML)
		mk, ok := types[head.APIVersion+"/"+head.Kind]
		require.True(t, ok, "%s renders %s %s, which the test does not know", d.Template, head.APIVersion, head.Kind)
		obj := mk()
		require.NoError(t, yaml.UnmarshalStrict([]byte(d.YAML), obj), "%s (%s/%s):\n%s", d.Template, head.Kind, head.Metadata.Name, d.YAML)
		require.NotEmpty(t, head.Metadata.Name, d.Template)
		require.NotEmpty(t, head.Metadata.Namespace, "%s/%s has a namespace", head.Kind, head.Metadata.Name)
		require.Equal(t, "memra", head.Metadata.Labels["app.kubernetes.io/name"], "%s/%s carries the chart's labels", head.Kind, head.Metadata.Name)
		key := head.Kind + "/" + head.Metadata.Name
		require.NotContains(t, o.byKey, key, "rendered twice")
		o.byKey[key], o.yaml[key] = obj, d.YAML
		o.keys = append(o.keys, key)
	}
	slices.Sort(o.keys)
	return o
}

// selects reports whether every label of sel is on labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func container(t *testing.T, spec corev1.PodSpec, name string, init bool) corev1.Container {
	t.Helper()
	cs := spec.Containers
	if init {
		cs = spec.InitContainers
	}
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func port(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return -1
}

func mount(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

func volume(spec corev1.PodSpec, name string) corev1.Volume {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return corev1.Volume{}
}

// minimal are the values the chart requires.
const minimal = `
model: {spec: "hf:owner/stories:Q4_K_M"}
apiKeys: {keys: [sk-one, sk-two]}
`

// TestChartDefaults renders the default values (with the two required
// ones) and checks the objects and how they fit together.
func TestChartDefaults(t *testing.T) {
	o := render(t, minimal)
	require.Equal(t, []string{
		"Deployment/memra", "Deployment/memra-epp", "HorizontalPodAutoscaler/memra", "InferencePool/memra",
		"PodDisruptionBudget/memra", "Role/memra-epp", "RoleBinding/memra-epp", "Secret/memra-api-keys",
		"Service/memra", "Service/memra-epp", "ServiceAccount/memra-epp",
	}, o.keys)

	dep := o.get(t, "Deployment", "memra").(*appsv1.Deployment)
	pod := dep.Spec.Template
	require.Nil(t, dep.Spec.Replicas, "the autoscaler owns the replica count")
	require.True(t, selects(dep.Spec.Selector.MatchLabels, pod.Labels))
	require.Equal(t, int32(0), dep.Spec.Strategy.RollingUpdate.MaxSurge.IntVal, "no spare GPU asked for")

	c := container(t, pod.Spec, "memra", false)
	require.Equal(t, "memra:0.1.0", c.Image)
	require.Equal(t, "serve", c.Args[0])
	for _, a := range []string{"--model=hf:owner/stories:Q4_K_M", "--host=0.0.0.0", "--port=8080", "--metrics-port=9090",
		"--api-keys-file=/etc/memra/api-keys/api-keys", "--device=cuda", "--max-running=8", "--max-queue=64", "--drain-timeout=30s"} {
		require.Contains(t, c.Args, a)
	}
	require.Equal(t, "1", c.Resources.Limits.Name("nvidia.com/gpu", "").String(), "one GPU a replica")
	require.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/health", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/health", c.StartupProbe.HTTPGet.Path)
	require.Equal(t, int32(180), c.StartupProbe.FailureThreshold, "30 minutes to load a model")
	require.Equal(t, int64(10), c.Lifecycle.PreStop.Sleep.Seconds)
	require.Equal(t, int64(10+30+10), *pod.Spec.TerminationGracePeriodSeconds, "preStop + --drain-timeout + a margin")
	require.Equal(t, int32(8080), port(c, "http"))
	require.Equal(t, int32(9090), port(c, "metrics"))
	off, _ := env(c, "HF_HUB_OFFLINE")
	require.Equal(t, "1", off.Value, "serving asks the hub nothing")
	home, _ := env(c, "HF_HOME")
	require.Equal(t, "/cache/huggingface", home.Value)
	require.Equal(t, "/cache", mount(c, "cache"))
	require.Equal(t, "/etc/memra/api-keys", mount(c, "api-keys"))
	require.Equal(t, "9090", pod.Annotations["prometheus.io/port"])
	require.Equal(t, "true", pod.Annotations["prometheus.io/scrape"])
	require.True(t, *pod.Spec.SecurityContext.RunAsNonRoot)

	pull := container(t, pod.Spec, "pull", true)
	require.Equal(t, []string{"pull", "hf:owner/stories:Q4_K_M"}, pull.Args)
	require.Equal(t, "/cache", mount(pull, "cache"))
	_, hasToken := env(pull, "HF_TOKEN")
	require.False(t, hasToken)
	require.NotNil(t, volume(pod.Spec, "cache").EmptyDir, "no claim: a cache per pod")

	sec := o.get(t, "Secret", "memra-api-keys").(*corev1.Secret)
	require.Equal(t, "sk-one\nsk-two", sec.StringData["api-keys"])
	require.Equal(t, sec.Name, volume(pod.Spec, "api-keys").Secret.SecretName)

	svc := o.get(t, "Service", "memra").(*corev1.Service)
	require.True(t, selects(svc.Spec.Selector, pod.Labels))
	require.Equal(t, []string{"http", "metrics"}, []string{svc.Spec.Ports[0].TargetPort.StrVal, svc.Spec.Ports[1].TargetPort.StrVal})

	hpa := o.get(t, "HorizontalPodAutoscaler", "memra").(*autoscalingv2.HorizontalPodAutoscaler)
	require.Equal(t, autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name}, hpa.Spec.ScaleTargetRef)
	require.Equal(t, int32(8), hpa.Spec.MaxReplicas)
	m := hpa.Spec.Metrics[0]
	require.Equal(t, autoscalingv2.PodsMetricSourceType, m.Type)
	require.Equal(t, "memra_requests_queued", m.Pods.Metric.Name, "the queue depth memra exports")
	require.Equal(t, "4", m.Pods.Target.AverageValue.String())

	pdb := o.get(t, "PodDisruptionBudget", "memra").(*policyv1.PodDisruptionBudget)
	require.True(t, selects(pdb.Spec.Selector.MatchLabels, pod.Labels))

	checkPool(t, o, pod, "memra-epp", 9002)
	epp := o.get(t, "Deployment", "memra-epp").(*appsv1.Deployment)
	ec := container(t, epp.Spec.Template.Spec, "epp", false)
	for _, a := range []string{"--pool-name=memra", "--pool-namespace=ai", "--grpc-port=9002", "--model-server-metrics-port=9090"} {
		require.Contains(t, ec.Args, a, "the picker reads memra's keyless metrics port")
	}
	require.Equal(t, "memra-epp", epp.Spec.Template.Spec.ServiceAccountName)
	eppSvc := o.get(t, "Service", "memra-epp").(*corev1.Service)
	require.True(t, selects(eppSvc.Spec.Selector, epp.Spec.Template.Labels))
	require.False(t, selects(eppSvc.Spec.Selector, pod.Labels), "the picker's Service does not select memra")
	rb := o.get(t, "RoleBinding", "memra-epp").(*rbacv1.RoleBinding)
	require.Equal(t, "memra-epp", rb.RoleRef.Name)
	require.Equal(t, "memra-epp", rb.Subjects[0].Name)
	role := o.get(t, "Role", "memra-epp").(*rbacv1.Role)
	require.Contains(t, role.Rules[1].Resources, "inferencepools")
}

// checkPool checks the InferencePool against the memra pods and the
// endpoint picker it names.
func checkPool(t *testing.T, o objects, pod corev1.PodTemplateSpec, picker string, pickerPort int32) {
	t.Helper()
	pool := o.get(t, "InferencePool", "memra").(*inferencev1.InferencePool)
	if o.has("InferencePool", "memra") && pool.Name == "" {
		t.Fatal("unnamed pool")
	}
	labels := map[string]string{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		labels[string(k)] = string(v)
	}
	require.True(t, selects(labels, pod.Labels), "the pool selects the memra pods")
	c := container(t, pod.Spec, "memra", false)
	require.Len(t, pool.Spec.TargetPorts, 1)
	require.Equal(t, port(c, "http"), int32(pool.Spec.TargetPorts[0].Number), "requests go to memra's API port")
	ref := pool.Spec.EndpointPickerRef
	require.Equal(t, picker, string(ref.Name))
	require.Equal(t, pickerPort, int32(ref.Port.Number))
	require.Equal(t, inferencev1.EndpointPickerFailClose, ref.FailureMode)
	if o.has("Service", picker) {
		svc := o.get(t, "Service", picker).(*corev1.Service)
		require.Equal(t, pickerPort, svc.Spec.Ports[0].Port)
	}
	require.NoError(t, validatePoolSchema(o.yaml["InferencePool/"+pool.Name]))
}

func TestChartRequiredValues(t *testing.T) {
	_, err := renderDocs(`apiKeys: {keys: [k]}`, "memra", "ai")
	require.ErrorContains(t, err, "model.spec is required")
	_, err = renderDocs(`model: {spec: "hf:o/r"}`, "memra", "ai")
	require.ErrorContains(t, err, "apiKeys.existingSecret or apiKeys.keys is required")
	_, err = renderDocs(`model: {spec: "hf:o/r"}`+"\napiKeys: {existingSecret: mine}", "memra", "ai")
	require.NoError(t, err)
}
