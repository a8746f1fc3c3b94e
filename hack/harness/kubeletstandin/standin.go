// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubeletstandin does for DRA what the kubelet does, for a node
// that has no kubelet: it watches the pods bound to its node, registers the
// DRA plugin through the kubelet plugin-registration API, calls the plugin's
// NodePrepareResources over its real gRPC socket for each pod's claims,
// applies the returned CDI device IDs to each container's OCI spec with the
// CDI library's InjectDevices (what containerd does), records the resulting
// environment, device nodes, mounts and hooks, and marks the pod Running. When
// a pod is deleted it calls NodeUnprepareResources and removes the pod.
//
// It never makes up what the plugin did: a claim the plugin fails to prepare
// leaves the pod Pending (ContainerCreating) with the plugin's message in a
// FailedPrepareDynamicResources event, and is retried with backoff, as the
// kubelet does. No container runs; the records are the evidence.
package kubeletstandin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// Config configures a stand-in for one node.
type Config struct {
	NodeName string
	Client   kubernetes.Interface
	// DriverName is the DRA driver whose plugin the stand-in registers;
	// default gpufrac.dev.
	DriverName string
	// RegistrarDir is the kubelet plugin registry directory the plugin
	// was told (--registrar-dir).
	RegistrarDir string
	// CDIRoot is the directory the plugin writes CDI specs to (--cdi-root);
	// the stand-in's CDI cache reads it.
	CDIRoot string
	// RecordDir receives one JSON record per Running pod; empty: none.
	RecordDir string
	// RegistrationTimeout bounds the wait for the plugin's registration
	// socket; default one minute.
	RegistrationTimeout time.Duration
	// Workers is the number of pods handled in parallel; default 4.
	Workers int
	// MPSToolsDir, when set, holds gpufrac-mps-launcher (a build of the
	// plugin image's), and the plugin's MPS daemon Pods run on the host
	// with it (see hostproc.go): it chroots into the node's driver root,
	// where the MPS double plays nvidia-cuda-mps-control and nvidia-smi.
	MPSToolsDir string
}

// StandIn is a running kubelet stand-in.
type StandIn struct {
	cfg      Config
	pluginMu sync.Mutex // guards plugin, replaced by Reregister
	plugin   *pluginClient
	factory  informers.SharedInformerFactory
	pods     corelisters.PodLister
	queue    workqueue.TypedRateLimitingInterface[string]
	// daemons is the MPS daemon Pods' own queue: a kubelet runs every pod
	// on its own worker, and a Prepare that waits for a GPU's daemon must
	// never keep that daemon's Pod from starting.
	daemons     workqueue.TypedRateLimitingInterface[string]
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	// opMu serializes claim bookkeeping with the plugin calls that change
	// it, so that a pod starting and another stopping never race on a
	// claim they share.
	opMu   sync.Mutex
	mu     sync.Mutex // guards the maps below
	state  map[string]*podState
	claims map[types.UID]*claimState
	// unprepared remembers when each claim was last unprepared.
	unprepared map[types.UID]time.Time
	records    map[string]*PodRecord
	hostProcs  map[string]*hostProcess
}

type podState struct {
	uid    types.UID
	claims []*drapb.Claim // claims this pod references, prepared or not
}

type claimState struct {
	claim    *drapb.Claim
	users    sets.Set[types.UID]
	prepared *PreparedClaim
}

// Start registers the plugin and starts watching the node's pods.
func Start(ctx context.Context, cfg Config) (*StandIn, error) {
	if cfg.NodeName == "" || cfg.Client == nil || cfg.RegistrarDir == "" || cfg.CDIRoot == "" {
		return nil, errors.New("kubelet stand-in: node name, client, registrar directory and CDI root are required")
	}
	if cfg.DriverName == "" {
		cfg.DriverName = "gpufrac.dev"
	}
	if cfg.RegistrationTimeout == 0 {
		cfg.RegistrationTimeout = time.Minute
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	logger := klog.FromContext(ctx).WithName("kubelet-standin").WithValues("node", cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)

	plugin, err := registerPlugin(ctx, cfg.RegistrarDir, cfg.DriverName, cfg.RegistrationTimeout)
	if err != nil {
		return nil, fmt.Errorf("kubelet stand-in for node %s: %w", cfg.NodeName, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &StandIn{
		cfg:    cfg,
		plugin: plugin,
		factory: informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + cfg.NodeName })),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubelet-standin-" + cfg.NodeName}),
		daemons: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubelet-standin-daemons-" + cfg.NodeName}),
		broadcaster: record.NewBroadcaster(record.WithContext(ctx)),
		cancel:      cancel,
		state:       map[string]*podState{},
		claims:      map[types.UID]*claimState{},
		unprepared:  map[types.UID]time.Time{},
		records:     map[string]*PodRecord{},
		hostProcs:   map[string]*hostProcess{},
	}
	s.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	s.recorder = s.broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: cfg.NodeName})

	informer := s.factory.Core().V1().Pods()
	s.pods = informer.Lister()
	enqueue := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if p, ok := obj.(*v1.Pod); ok && p.Labels["app.kubernetes.io/component"] == mpsDaemonComponent {
			s.daemons.Add(key)
			return
		}
		s.queue.Add(key)
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		s.Stop()
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	s.factory.Start(ctx.Done())
	for typ, ok := range s.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			s.Stop()
			return nil, fmt.Errorf("kubelet stand-in for node %s: the %v informer did not sync", cfg.NodeName, typ)
		}
	}
	for range cfg.Workers {
		s.wg.Go(func() {
			for s.processNext(ctx, s.queue) {
			}
		})
	}
	s.wg.Go(func() {
		for s.processNext(ctx, s.daemons) {
		}
	})
	logger.Info("Kubelet stand-in started", "driver", cfg.DriverName, "endpoint", plugin.endpoint)
	return s, nil
}

// Stop stops watching and closes the plugin connection. Like a stopped
// kubelet, it leaves prepared claims prepared.
func (s *StandIn) Stop() {
	s.cancel()
	s.queue.ShutDown()
	s.daemons.ShutDown()
	s.wg.Wait()
	s.mu.Lock()
	keys := slices.Collect(maps.Keys(s.hostProcs))
	s.mu.Unlock()
	for _, key := range keys {
		s.stopOnHost(context.Background(), key)
	}
	s.factory.Shutdown()
	s.broadcaster.Shutdown()
	s.client().close()
}

func (s *StandIn) client() *pluginClient {
	s.pluginMu.Lock()
	defer s.pluginMu.Unlock()
	return s.plugin
}

// Reregister does what the kubelet's plugin watcher does when a restarted
// plugin's registration socket appears: register it again and send every
// later call to the new connection. Calls in flight on the old one fail
// and are retried, as the kubelet's are.
func (s *StandIn) Reregister(ctx context.Context) error {
	p, err := registerPlugin(ctx, s.cfg.RegistrarDir, s.cfg.DriverName, s.cfg.RegistrationTimeout)
	if err != nil {
		return fmt.Errorf("kubelet stand-in for node %s: re-registering: %w", s.cfg.NodeName, err)
	}
	s.pluginMu.Lock()
	old := s.plugin
	s.plugin = p
	s.pluginMu.Unlock()
	old.close()
	return nil
}

func (s *StandIn) processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string]) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if err := s.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Pod not ready yet, retrying", "pod", key, "err", err)
			queue.AddRateLimited(key)
		}
		return true
	}
	queue.Forget(key)
	return true
}

// sync brings one pod to where the kubelet would: prepared and Running,
// unprepared and gone, or waiting with a reason.
func (s *StandIn) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := s.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return s.forget(ctx, key) // removed without us (force delete)
	}
	if err != nil {
		return fmt.Errorf("reading pod %s from the cache: %w", key, err)
	}
	s.mu.Lock()
	st := s.state[key]
	s.mu.Unlock()
	if st != nil && st.uid != pod.UID {
		if err := s.forget(ctx, key); err != nil { // an older pod of the same name
			return err
		}
	}
	if pod.DeletionTimestamp != nil {
		return s.terminate(ctx, key, pod)
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return nil
	}
	s.mu.Lock()
	rec := s.records[key]
	s.mu.Unlock()
	if rec != nil && rec.UID == pod.UID {
		if pod.Status.Phase != v1.PodRunning {
			return s.setRunning(ctx, pod, rec)
		}
		return nil
	}

	prepared, err := s.prepare(ctx, pod)
	if ctx.Err() != nil {
		return ctx.Err() // stopping: no events, no status from a dying stand-in
	}
	if err != nil {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: %v", err)
		return errors.Join(err, s.setWaiting(ctx, pod, "ContainerCreating", err.Error()))
	}
	containers, err := injectPod(s.cfg.CDIRoot, pod, prepared)
	if err != nil {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return errors.Join(err, s.setWaiting(ctx, pod, "CreateContainerError", err.Error()))
	}
	rec = &PodRecord{
		Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Node: s.cfg.NodeName,
		Claims:     slices.SortedFunc(maps.Values(prepared), func(a, b PreparedClaim) int { return strings.Compare(a.Name, b.Name) }),
		Containers: containers, StartedAt: time.Now(),
	}
	if s.runsOnHost(pod) {
		if err := s.startOnHost(ctx, key, pod); err != nil {
			s.stopOnHost(ctx, key)
			s.recorder.Eventf(pod, v1.EventTypeWarning, "Unhealthy", "Startup probe failed: %v", err)
			return errors.Join(err, s.setWaiting(ctx, pod, "ContainerCreating", err.Error()))
		}
	}
	if err := writeRecord(s.cfg.RecordDir, rec); err != nil {
		return err
	}
	s.mu.Lock()
	s.records[key] = rec
	s.mu.Unlock()
	return s.setRunning(ctx, pod, rec)
}

// terminate unprepares the pod's claims and then deletes the pod with grace
// period zero, what the kubelet does once a deleted pod's containers stopped.
func (s *StandIn) terminate(ctx context.Context, key string, pod *v1.Pod) error {
	if err := s.forget(ctx, key); err != nil {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedUnprepareDynamicResources", "Failed to unprepare dynamic resources: %v", err)
		return err
	}
	err := s.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s: %w", key, err)
	}
	klog.FromContext(ctx).V(2).Info("Pod terminated", "pod", key)
	return nil
}

// forget unprepares the claims the pod at key referenced that no other pod
// on the node uses, then drops what the stand-in knew about it.
func (s *StandIn) forget(ctx context.Context, key string) error {
	s.stopOnHost(ctx, key)
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	st := s.state[key]
	s.mu.Unlock()
	if st != nil {
		var last []*drapb.Claim
		s.mu.Lock()
		for _, c := range st.claims {
			cs := s.claims[types.UID(c.Uid)]
			if cs == nil {
				continue
			}
			cs.users.Delete(st.uid)
			if cs.users.Len() == 0 {
				last = append(last, c)
			}
		}
		s.mu.Unlock()
		if len(last) > 0 {
			if err := s.unprepareClaims(ctx, last); err != nil {
				s.mu.Lock()
				for _, c := range st.claims { // keep the references for the retry
					if cs := s.claims[types.UID(c.Uid)]; cs != nil {
						cs.users.Insert(st.uid)
					}
				}
				s.mu.Unlock()
				return err
			}
		}
	}
	s.mu.Lock()
	delete(s.state, key)
	rec := s.records[key]
	delete(s.records, key)
	s.mu.Unlock()
	if rec != nil {
		removeRecord(s.cfg.RecordDir, rec.Namespace, rec.Name)
	}
	return nil
}

func (s *StandIn) unprepareClaims(ctx context.Context, claims []*drapb.Claim) error {
	resp, err := s.client().unprepare(ctx, claims)
	if err != nil {
		return err
	}
	var errs []error
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range claims {
		r, ok := resp.Claims[c.Uid]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("NodeUnprepareResources skipped ResourceClaim %s/%s", c.Namespace, c.Name))
		case r.GetError() != "":
			errs = append(errs, fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s/%s: %s", c.Namespace, c.Name, r.Error))
		default:
			delete(s.claims, types.UID(c.Uid))
			s.unprepared[types.UID(c.Uid)] = now
			klog.FromContext(ctx).V(2).Info("Claim unprepared", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.Uid)
		}
	}
	return errors.Join(errs...)
}

// Pod returns the record of a pod the stand-in marked Running.
func (s *StandIn) Pod(namespace, name string) (PodRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[namespace+"/"+name]
	if !ok {
		return PodRecord{}, false
	}
	return *rec, true
}

// Pods returns the records of all pods the stand-in has Running.
func (s *StandIn) Pods() []PodRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PodRecord, 0, len(s.records))
	for _, key := range slices.Sorted(maps.Keys(s.records)) {
		out = append(out, *s.records[key])
	}
	return out
}

// Prepared reports whether a claim is prepared on this node now.
func (s *StandIn) Prepared(claimUID types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.claims[claimUID]
	return cs != nil && cs.prepared != nil
}

// Unprepared reports whether NodeUnprepareResources succeeded for the claim
// since the stand-in started.
func (s *StandIn) Unprepared(claimUID types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.unprepared[claimUID]
	return ok
}
