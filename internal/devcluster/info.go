package devcluster

// Process is one entry of DIR/dev.json: enough to find, kill and restart
// a process of the dev cluster (tests use Args to restart a killed OSD).
type Process struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Addr string   `json:"addr"`
	Data string   `json:"data"`
	Log  string   `json:"log"`
	Args []string `json:"args"`
	// Metrics is where it serves Prometheus metrics ("": nowhere).
	Metrics string `json:"metrics,omitempty"`
	// Restarts counts how often cairn dev started it again.
	Restarts int `json:"restarts,omitempty"`
}

// Info is the content of DIR/dev.json, which the supervisor rewrites
// (in one rename) whenever a pid changes, and `cairn dev --json` prints.
type Info struct {
	Conf          string    `json:"conf"`
	EtcdEndpoints []string  `json:"etcd_endpoints"`
	Processes     []Process `json:"processes"`
	// Dashboard is the web dashboard's URL, if the mon serves one.
	Dashboard string `json:"dashboard,omitempty"`
}
