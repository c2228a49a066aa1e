package cache

// lzDict is the preset dictionary of compressed records (flagDict): the bytes most Kubernetes
// objects repeat — content types, API groups and kinds as the header and the protobuf type meta
// carry them, well-known label keys, the managed fields of the controllers and the kubelet, the
// words of pod and endpoint status. A compressed record's matches may reach into it as if it came
// just before the record, so a small object does not pay for the first occurrence of each of
// them. The dictionary is part of the stored format: it may only be replaced by a new one under a
// new flag, never edited.
const lzDict = "" +
	// Pod and node status and spec words.
	"ClusterFirstDefaultdefault-schedulerPreemptLowerPriorityIfNotPresentAlways/dev/termination-logFile" +
	"BestEffortBurstableGuaranteedRunningPendingSucceededFailedPodScheduledInitializedContainersReady" +
	"PodReadyToStartContainersReadyTrueFalsecontainerd://docker.io/library/registry.k8s.io/sha256:" +
	"kube-api-access-/var/run/secrets/kubernetes.io/serviceaccountkube-root-ca.crtca.crtnamespacetoken" +
	"node.kubernetes.io/not-readynode.kubernetes.io/unreachableNoExecuteNoScheduleExistsEqual" +
	"ReplicaSetapps/v1DaemonSetStatefulSetDeploymentpod-template-hashcontroller-revision-hashk8s-app" +
	"kube-systemkube-proxycorednsKubeletReadyMemoryPressureDiskPressurePIDPressureInternalIPHostname" +
	"kubernetes.io/hostnamekubernetes.io/oskubernetes.io/archlinuxamd64arm64beta.kubernetes.io/" +
	"node.kubernetes.io/instance-typetopology.kubernetes.io/zonetopology.kubernetes.io/region" +
	"app.kubernetes.io/nameapp.kubernetes.io/instanceapp.kubernetes.io/componentapp.kubernetes.io/managed-by" +
	// Services and EndpointSlices.
	"ClusterIPNodePortLoadBalancerExternalNameSingleStackPreferDualStackRequireDualStackClusterLocalNone" +
	"IPv4IPv6FQDNTCPUDPSCTPhttphttpsgrpcmetricsdns-tcpdnsservice.kubernetes.io/headless" +
	"endpoints.kubernetes.io/last-change-trigger-timeendpointslice.kubernetes.io/managed-by" +
	"endpointslice-controller.k8s.ioendpointslicemirroring-controller.k8s.io" +
	`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:annotations":{".":{},"f:endpoints.kubernetes.io/last-change-trigger-time":{}},` +
	`"f:generateName":{},"f:labels":{".":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{}},` +
	`"f:ownerReferences":{".":{},"k:{\"uid\":\"":{}}},"f:ports":{}}` +
	`{"f:metadata":{"f:labels":{".":{},"f:kubernetes.io/service-name":{}}},"f:spec":{"f:internalTrafficPolicy":{},"f:ports":{".":{},` +
	`"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:selector":{},"f:sessionAffinity":{},"f:type":{}}}` +
	`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},` +
	`"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"":{".":{},"f:ip":{}}},"f:startTime":{}}}` +
	"kube-controller-managerkube-schedulerkubeletUpdateApplyFieldsV1status" +
	"\n\x02v1\x12\x04Node\n\x02v1\x12\x07Service\n\x02v1\x12\x03Pod\x12" +
	"\n\x07apps/v1\x12\nReplicaSet\n\x13discovery.k8s.io/v1\x12\rEndpointSlice\x12" +
	// The header (header.go): content type, apiVersion and kind as its first strings, then the
	// protobuf envelope of the body that follows it.
	"\x10application/json\x02v1\x07Service\x02v1\x04Node\x02v1\x03Pod" +
	"\x1akubernetes.io/service-name\x12" +
	"#application/vnd.kubernetes.protobuf\x13discovery.k8s.io/v1\rEndpointSlice" +
	"k8s\x00\n$\n\x13discovery.k8s.io/v1\x12\rEndpointSlice\x12"

// lzDictBytes is lzDict, and lzDictTable the encoder's hash table once it has seen it (every
// encode with the dictionary starts from a copy). Neither is ever written after start.
var (
	lzDictBytes = []byte(lzDict)
	lzDictTable = func() *[1 << lzHashBits]int32 {
		t := new([1 << lzHashBits]int32)
		lzHashes(t, lzDictBytes)
		return t
	}()
)

// lzEncodeDict compresses src[len(lzDict):], whose first bytes are lzDict.
func lzEncodeDict(dst, src []byte) []byte {
	table := lzTables.Get().(*[1 << lzHashBits]int32)
	defer lzTables.Put(table)
	*table = *lzDictTable
	return lzEncodeFrom(dst, src, len(lzDict), table)
}
