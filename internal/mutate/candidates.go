package mutate

// The values a field is tried with: per kind of leaf, and seeds for the
// types an empty value of would be refused.

import (
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	quantityType    = reflect.TypeFor[resource.Quantity]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	timeType        = reflect.TypeFor[metav1.Time]()
)

func leaf(t reflect.Type) bool {
	switch t {
	case quantityType, intOrStringType, timeType:
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint8, reflect.Float64:
		return true
	}
	return false
}

// stringValues are tried for a string field: plain words first, then the
// enumerations the API defines for its string-typed fields, so most fields
// find a value the server's validation accepts.
var stringValues = []string{
	"x", "other", "/x", "1", "x.example", "10.0.0.1", "example.com/x", "default", "Always", "Never", "OnFailure",
	"IfNotPresent", "Exists", "Equal", "NoSchedule",
	"NoExecute", "TCP", "UDP", "RuntimeDefault", "Unconfined", "Localhost", "Default", "None", "ClusterFirstWithHostNet",
	"Directory", "DirectoryOrCreate", "File", "Bidirectional", "HostToContainer", "Enabled", "Disabled", "IfPossible",
	"ReadWriteOnce", "FallbackToLogsOnError", "File", "v1", "metadata.name", "linux", "NotRequired", "RestartContainer",
	"cpu", "memory", "In", "NotIn", "DoesNotExist", "Gt", "kubernetes.io/hostname", "Unmasked", "OnRootMismatch", "Recursive",
	"Ignore", "Honor", "DeleteForeground", "Filesystem", "Block", "MustRunAs", "ReadOnly", "Container", "1Gi", "1/x",
}

func candidates(t reflect.Type, cur any, set bool) []any {
	var out []any
	add := func(v any) {
		if set && reflect.DeepEqual(v, cur) {
			return
		}
		out = append(out, v)
	}
	switch t {
	case quantityType:
		for _, q := range []string{"1", "100m", "1Gi", "3"} {
			add(resource.MustParse(q))
		}
		if set {
			out = filterQuantity(out, cur.(resource.Quantity))
		}
	case intOrStringType:
		add(intstr.FromInt32(8080))
		add(intstr.FromString("http"))
	case timeType:
		return nil // only the server's (creationTimestamp); never the creator's
	default:
		switch t.Kind() {
		case reflect.String:
			if set {
				add(fmt.Sprint(cur) + "x")
			}
			for _, s := range stringValues {
				add(reflect.ValueOf(s).Convert(t).Interface())
			}
		case reflect.Bool:
			if set {
				add(!cur.(bool))
			} else {
				add(true)
				add(false)
			}
		case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint8, reflect.Float64:
			base := []int64{1, 0, 2, 30, 1000, 65534}
			if set {
				n := reflect.ValueOf(cur).Convert(reflect.TypeFor[int64]()).Int()
				base = append([]int64{n + 1}, base...)
			}
			for _, n := range base {
				add(reflect.ValueOf(n).Convert(t).Interface())
			}
		}
	}
	return out
}

func filterQuantity(qs []any, cur resource.Quantity) []any {
	var out []any
	for _, q := range qs {
		if qq := q.(resource.Quantity); qq.Cmp(cur) != 0 {
			out = append(out, q)
		}
	}
	return out
}

// seedOf is a copy of t's seed.
func seedOf(t reflect.Type) (reflect.Value, bool) {
	s, ok := seeds[t]
	if !ok {
		return reflect.Value{}, false
	}
	return deepCopy(reflect.ValueOf(s)), true
}

// seeds are valid first items of lists whose items the API requires
// fields of: a mutation then sets one more field of a valid item.
var seeds = map[reflect.Type]any{}

func seed[T any](v T) { seeds[reflect.TypeFor[T]()] = v }

func init() {
	// Items the API requires fields of, and volume sources and others
	// whose fields it requires together.
	seed(corev1.Container{Name: "x", Image: "x"})
	seed(corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	seed(corev1.EnvVar{Name: "X"})
	seed(corev1.VolumeMount{Name: "host", MountPath: "/x"})
	seed(corev1.ContainerPort{ContainerPort: 8080})
	seed(corev1.PodSchedulingGate{Name: "x"})
	seed(corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "x", WhenUnsatisfiable: corev1.DoNotSchedule})
	seed(metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "1"})
	seed(corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}})
	seed(corev1.VolumeDevice{Name: "host", DevicePath: "/dev/x"})
	seed(corev1.ContainerResizePolicy{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired})
	seed(corev1.PodDNSConfigOption{Name: "x"})
	seed(corev1.Sysctl{Name: "kernel.shm_rmid_forced", Value: "1"})
	seed(corev1.NFSVolumeSource{Server: "x", Path: "/x"})
	seed(corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:x"})
	seed(corev1.RBDVolumeSource{CephMonitors: []string{"x"}, RBDImage: "x"})
	seed(corev1.GlusterfsVolumeSource{EndpointsName: "x", Path: "x"})
	seed(corev1.AzureFileVolumeSource{SecretName: "x", ShareName: "x"})
	seed(corev1.AzureDiskVolumeSource{DiskName: "x", DataDiskURI: "x"})
	seed(corev1.ScaleIOVolumeSource{Gateway: "x", System: "x", SecretRef: &corev1.LocalObjectReference{Name: "x"}})
	seed(corev1.QuobyteVolumeSource{Registry: "x:1", Volume: "x"})
	seed(corev1.DownwardAPIVolumeFile{Path: "x", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}})
	seed(corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}})
	seed(corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}, Key: "x"})
	seed(corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}, Key: "x"})
	seed(corev1.ResourceClaim{Name: "x"})
	seed(corev1.PodResourceClaim{Name: "x", ResourceClaimName: ptrTo("x")})
	seed(corev1.HostAlias{IP: "10.0.0.1", Hostnames: []string{"x"}})
	seed(corev1.NodeSelectorRequirement{Key: "x", Operator: corev1.NodeSelectorOpExists})
	seed(corev1.PodAffinityTerm{TopologyKey: "x", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}})
	seed(corev1.WeightedPodAffinityTerm{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "x",
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}})
	seed(corev1.PreferredSchedulingTerm{Weight: 1, Preference: corev1.NodeSelectorTerm{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "x", Operator: corev1.NodeSelectorOpExists}}}})
}

func ptrTo[T any](v T) *T { return &v }
