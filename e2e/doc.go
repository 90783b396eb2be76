// Package e2e holds end-to-end tests: they build the cairn binary, start
// real dev clusters (a mon and OSD processes on 127.0.0.x), kill and corrupt
// them, and drive them through the CLI and the public client package.
//
// Tests run in parallel (t.Parallel; go test runs as many at once as there
// are CPUs): each starts its own cluster in its own directory on ports no
// other test of the run was given (freePorts). A test stays serial, without
// t.Parallel, when it asserts a bound on time that a loaded machine could
// break (a frozen OSD, a handshake timeout, hardware floors, bench
// figures), when it changes the environment (t.Setenv), or when it watches
// the loopback interface (tcpdump).
package e2e
