// Command cairn is the one binary of cairn: daemons (mon, osd), the local
// dev cluster, and every admin and data command.
package main

import (
	"os"

	"github.com/cairn-storage/cairn/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
