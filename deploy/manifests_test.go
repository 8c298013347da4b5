package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestManifestsDecodeStrictly decodes every document of deploy/kubernetes
// into its k8s.io/api type, refusing unknown or duplicate fields, and
// checks what the deployment relies on.
func TestManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	kinds := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			var obj any
			switch meta.Kind {
			case "Namespace":
				obj = &corev1.Namespace{}
			case "Service":
				obj = &corev1.Service{}
			case "StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "DaemonSet":
				obj = &appsv1.DaemonSet{}
			default:
				t.Fatalf("%s #%d: kind %q has no check here", f, i, meta.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s #%d (%s): %v", f, i, meta.Kind, err)
			}
			kinds[meta.Kind] = obj
		}
	}
	ds, _ := kinds["DaemonSet"].(*appsv1.DaemonSet)
	ss, _ := kinds["StatefulSet"].(*appsv1.StatefulSet)
	if ds == nil || ss == nil {
		t.Fatalf("want a DaemonSet and a StatefulSet, got %v", kinds)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("the endpoint DaemonSet does not use host networking")
	}
	if len(pod.InitContainers) != 1 || !strings.Contains(strings.Join(pod.InitContainers[0].Args, " "), "endpoint enroll") {
		t.Error("the endpoint DaemonSet does not enroll")
	}
	secret := false
	for _, v := range pod.Volumes {
		secret = secret || (v.Secret != nil && v.Secret.SecretName == "multiplane-enrollment")
	}
	if !secret {
		t.Error("the enrollment token does not come from a Secret")
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Error("fabricd's StatefulSet has no volume for its data")
	}
	for _, c := range append(append([]corev1.Container{}, pod.Containers...), ss.Spec.Template.Spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) == 0 {
			t.Errorf("container %s may escalate or keeps capabilities", c.Name)
		}
	}
}
