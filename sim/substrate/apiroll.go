package substrate

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// EraAnnotation on the api Deployment's pod template is the API era its
// pods serve: the sim's stand-in for the ate-api-server image a release
// ships. Changing it (`sim ate-setup deploy-apiserver`) rolls the fake
// server to that era.
const EraAnnotation = "sim.rollbook.dev/api-era"

// HiddenAtespacesAnnotation on the api Deployment lists (comma-separated)
// the atespaces the authorization policy keeps from ClientPrincipal, the
// sim's stand-in for the embedded OpenFGA policy (rpcauthz) the server is
// configured with. Its actor calls there are PermissionDenied, and a list
// over every atespace leaves those actors out.
const HiddenAtespacesAnnotation = "sim.rollbook.dev/hidden-atespaces"

// RefusedMethodsAnnotation on the api Deployment lists (comma-separated)
// the control API methods (short names: DrainWorker, SuspendActor, …) the
// authorization policy refuses ClientPrincipal wherever they point: the
// sim's stand-in for a policy that grants reads but not a worker's drain.
const RefusedMethodsAnnotation = "sim.rollbook.dev/refused-methods"

// ClientPrincipal is the identity of an ate-client token.
const ClientPrincipal = "system:serviceaccount:" + Namespace + ":" + ClientSA

// DefaultAPIRollDowntime is how long nothing answers while the API server
// rolls (the old pod is gone, the new one not Ready yet).
const DefaultAPIRollDowntime = 5 * time.Second

// DeployAPIServer plays `ate-setup deploy apiserver` (runbook step 6, or
// its rollback from the old checkout): the api Deployment's pods move to
// another release, whose API is of era.
func DeployAPIServer(ctx context.Context, cs kubernetes.Interface, era fakesubstrate.Era) error {
	if !validEra(era) {
		return fmt.Errorf("era %q: want one of %v", era, fakesubstrate.Eras())
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}},"spec":{"containers":[{"name":"ate-api-server",`+
		`"image":"ghcr.io/agent-substrate/substrate/ateapi:sim-era-%s"}]}}}}`, EraAnnotation, era, era)
	_, err := cs.AppsV1().Deployments(Namespace).Patch(ctx, APIDeployment, types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// watchAPIRolls rolls the fake server whenever the api Deployment asks for
// another era than it serves.
func (s *Substrate) watchAPIRolls(ctx context.Context) error {
	f := kubeinformers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0, kubeinformers.WithNamespace(Namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + APIDeployment }))
	inf := f.Apps().V1().Deployments().Informer()
	rolls := make(chan fakesubstrate.Era, 1)
	seen := func(obj any) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		s.Server.SetHiddenAtespaces(ClientPrincipal, splitList(d.Annotations[HiddenAtespacesAnnotation]))
		s.Server.SetRefusedMethods(ClientPrincipal, splitList(d.Annotations[RefusedMethodsAnnotation]))
		era := fakesubstrate.Era(d.Spec.Template.Annotations[EraAnnotation])
		if era == "" || !validEra(era) {
			return
		}
		select {
		case <-rolls: // only the latest ask matters
		default:
		}
		rolls <- era
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("api deployment cache did not sync: %w", ctx.Err())
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case era := <-rolls:
				if era == s.Server.Era() {
					continue
				}
				from := s.Server.Era()
				s.cfg.Logf("substrate: ate-api-server rolls from era %s to era %s (%s without an API server)", from, era,
					s.cfg.APIRollDowntime)
				if err := s.Server.Roll(era, s.cfg.APIRollDowntime); err != nil {
					s.cfg.Logf("substrate: API roll to era %s failed: %v", era, err)
					continue
				}
				s.cfg.Logf("substrate: ateapi.Control era %s serves again at %s", era, s.Server.Addr())
				s.changed.fire()
			}
		}
	}()
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
