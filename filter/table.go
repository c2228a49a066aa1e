package filter

// table is every filter, in the order a chain runs them.
func table(cfg Config) []Filter {
	return []Filter{
		&masterService{host: cfg.MasterServiceHost, port: cfg.MasterServicePort},
		&serviceTopology{node: cfg.NodeName, topo: cfg.Topology},
		&discardCloudService{},
		&nodePortIsolation{pool: cfg.NodePool},
		&forwardKubeSvcTraffic{host: cfg.MasterServiceHost, port: cfg.MasterServicePort},
		&inClusterConfig{},
		&serviceEnvUpdater{host: cfg.MasterServiceHost, port: cfg.MasterServicePort},
	}
}
