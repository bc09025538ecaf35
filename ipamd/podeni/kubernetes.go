package podeni

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Kubernetes is the Source of a real cluster: it GETs the pod from the API
// server on every call, as the reference does, since the annotation is
// written by the VPC resource controller shortly before the pod's sandbox
// is created and a cache could still lack it.
type Kubernetes struct {
	Client kubernetes.Interface
}

var _ Source = Kubernetes{}

// Lookup implements Source. A pod asks for a branch ENI through a limit
// on its first container; the annotation then says which one.
func (k Kubernetes) Lookup(ctx context.Context, namespace, name string) (*BranchENI, error) {
	if namespace == "" || name == "" {
		return nil, errors.New("podeni: the request names no pod (namespace and name are required)")
	}
	pod, err := k.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s/%s", ErrPodNotFound, namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("podeni: get pod %s/%s: %w", namespace, name, err)
	}
	if !requestsBranchENI(pod) {
		return nil, nil
	}
	value, ok := pod.Annotations[AnnotationKey]
	if !ok {
		return nil, fmt.Errorf("podeni: pod %s/%s has a %s limit but no %s annotation (no branch ENI attached yet)",
			namespace, name, ResourcePrefix, AnnotationKey)
	}
	b, err := ParseAnnotation(value)
	if err != nil {
		return nil, fmt.Errorf("podeni: pod %s/%s: %w", namespace, name, err)
	}
	return b, nil
}

// requestsBranchENI looks at the first container only, like the reference
// (the resource controller's webhook puts the limit there). A pod with no
// containers, which the API server would not admit, is a regular pod.
func requestsBranchENI(pod *corev1.Pod) bool {
	if len(pod.Spec.Containers) == 0 {
		return false
	}
	for res := range pod.Spec.Containers[0].Resources.Limits {
		if strings.HasPrefix(string(res), ResourcePrefix) {
			return true
		}
	}
	return false
}
