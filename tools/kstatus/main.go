// kstatus prints the kstatus of live objects, as Flux computes it: the object is read from the
// API server (client-go's dynamic client, from a kubeconfig) and judged by
// sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute, the library kustomize-controller's
// `wait`/`healthChecks` and `flux` use. A missing object is NotFound, as kstatus' pollers
// report it.
//
//	kstatus --kubeconfig FILE --namespace NS --resource portmappings.v1alpha1.portmapper.dev NAME...
//
// One JSON line per name: {"name", "status", "message", "conditions", "generation",
// "observedGeneration"}; with --watch, a line whenever the result of a name changes, until
// killed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// Line is the output for one object.
type Line struct {
	Name               string             `json:"name"`
	Status             string             `json:"status"`
	Message            string             `json:"message"`
	Conditions         []status.Condition `json:"conditions"`
	Generation         int64              `json:"generation,omitempty"`
	ObservedGeneration *int64             `json:"observedGeneration,omitempty"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "", "namespace of the objects")
	resource := flag.String("resource", "portmappings.v1alpha1.portmapper.dev", "resource.version.group")
	watch := flag.Bool("watch", false, "print a line whenever an object's result changes, every 50 ms, until killed")
	flag.Parse()
	gvr, _ := schema.ParseResourceArg(*resource)
	if gvr == nil || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: kstatus --kubeconfig FILE --namespace NS [--resource resource.version.group] [--watch] NAME...")
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	objects := client.Resource(*gvr).Namespace(*namespace)
	out := json.NewEncoder(os.Stdout)
	last := map[string]string{}
	for {
		for _, name := range flag.Args() {
			line, err := compute(ctx, objects, name)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				fail(err)
			}
			key, _ := json.Marshal(line)
			if last[name] == string(key) {
				continue
			}
			last[name] = string(key)
			if err := out.Encode(line); err != nil {
				fail(err)
			}
		}
		if !*watch {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func compute(ctx context.Context, objects dynamic.ResourceInterface, name string) (Line, error) {
	obj, err := objects.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Line{Name: name, Status: status.NotFoundStatus.String(), Message: "Resource not found", Conditions: []status.Condition{}}, nil
	}
	if err != nil {
		return Line{}, err
	}
	return judge(obj)
}

func judge(obj *unstructured.Unstructured) (Line, error) {
	res, err := status.Compute(obj)
	if err != nil {
		return Line{}, fmt.Errorf("%s: %w", obj.GetName(), err)
	}
	line := Line{
		Name:       obj.GetName(),
		Status:     res.Status.String(),
		Message:    res.Message,
		Conditions: res.Conditions,
		Generation: obj.GetGeneration(),
	}
	if line.Conditions == nil {
		line.Conditions = []status.Condition{}
	}
	if observed, found, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration"); found {
		line.ObservedGeneration = &observed
	}
	return line, nil
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
	os.Exit(1)
}
