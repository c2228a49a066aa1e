package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The kubelet workload: pods with every volume kind a default pod has or commonly adds.
const (
	WorkloadConfigMap = "app-config"
	WorkloadSecret    = "app-secret"
	// WorkloadVolumes names what each workload pod mounts, for the figures' workload lines.
	WorkloadVolumes = "projected ServiceAccount token (+ kube-root-ca.crt, namespace), ConfigMap, Secret volumes; downward-API and ConfigMap env"
)

// CreateWorkloadSources creates the ConfigMap and the Secret the workload pods mount in ns.
func CreateWorkloadSources(ctx context.Context, cs kubernetes.Interface, ns string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: WorkloadConfigMap},
		Data: map[string]string{"greeting": "hello from the cloud", "mode": "edge"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: WorkloadSecret},
		Data: map[string][]byte{"password": []byte("s3cret")}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// WorkloadPod is a pod bound to node (there is no scheduler) with one container that mounts the
// workload's ConfigMap and Secret, takes its name, uid and node from the downward API and a value
// from the ConfigMap as env, and gets the default projected ServiceAccount token volume from the
// apiserver's ServiceAccount admission.
func WorkloadPod(ns, name, node string) *corev1.Pod {
	grace := int64(2)
	field := func(env, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "edge-workload"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				Env: []corev1.EnvVar{field("POD_NAME", "metadata.name"), field("POD_UID", "metadata.uid"), field("NODE_NAME", "spec.nodeName"),
					{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: WorkloadConfigMap}, Key: "greeting"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "secret", MountPath: "/etc/secret"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: WorkloadConfigMap}}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: WorkloadSecret}}},
			},
		},
	}
}

// HasTokenVolume reports whether the apiserver gave p its projected ServiceAccount token volume.
func HasTokenVolume(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// NodeReady returns nil when node's Ready condition is True.
func NodeReady(n *corev1.Node) error {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s Ready=%s (%s: %s)", n.Name, c.Status, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition", n.Name)
}

// PodStarted returns nil when p is Running and each of its containers is running and started at
// or after since (to the second, the API's precision).
func PodStarted(p *corev1.Pod, since time.Time) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
	}
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return fmt.Errorf("pod %s: %d container statuses for %d containers", p.Name, len(p.Status.ContainerStatuses), len(p.Spec.Containers))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return fmt.Errorf("pod %s container %s is not running: %+v", p.Name, cs.Name, cs.State)
		}
		if cs.State.Running.StartedAt.Time.Before(since.Truncate(time.Second)) {
			return fmt.Errorf("pod %s container %s still shows the start at %v (before %v)", p.Name, cs.Name,
				cs.State.Running.StartedAt.Time.Format(time.TimeOnly), since.Format(time.TimeOnly))
		}
	}
	return nil
}

// PodsStarted applies PodStarted to every pod of list named in names (all of them when names is
// nil) and reports the ones that are not.
func PodsStarted(list []corev1.Pod, names []string, since time.Time) error {
	byName := map[string]*corev1.Pod{}
	for i := range list {
		byName[list[i].Name] = &list[i]
	}
	if names == nil {
		for n := range byName {
			names = append(names, n)
		}
	}
	var bad []string
	for _, n := range names {
		p, ok := byName[n]
		if !ok {
			bad = append(bad, "pod "+n+" missing")
			continue
		}
		if err := PodStarted(p, since); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d pods not started: %s", len(bad), len(names), strings.Join(bad, "; "))
	}
	return nil
}
