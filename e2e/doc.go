// Package e2e holds end-to-end tests: they build the cairn binary, start
// real dev clusters (a mon and OSD processes on 127.0.0.x), kill and corrupt
// them, and drive them through the CLI and the public client package.
package e2e
