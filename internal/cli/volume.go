package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/nbd"
	"github.com/cairn-storage/cairn/internal/nbdgw"
	"github.com/cairn-storage/cairn/internal/runtimepolicy"
	"github.com/cairn-storage/cairn/internal/volume"
	"github.com/spf13/cobra"
)

func volumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "volume", Short: "thin block volumes: create, snapshot, clone, send and receive (served by cairn nbd)"}
	var size, objectSize string
	create := &cobra.Command{
		Use:   "create POOL/NAME --size SIZE",
		Short: "create a thin volume (nothing is written until the guest writes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseBytes(size)
			if err != nil {
				return err
			}
			var os uint64
			if objectSize != "" {
				v, err := parseSize(objectSize)
				if err != nil {
					return err
				}
				os = uint64(v)
			}
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				info, err := volume.Create(cmd.Context(), p, name, n, os)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
	create.Flags().StringVar(&size, "size", "", "size, e.g. 100G, 512M or 1T (required)")
	create.Flags().StringVar(&objectSize, "object-size", "", "size of the objects the volume is striped over (default 4M)")
	create.MarkFlagRequired("size")

	ls := &cobra.Command{
		Use:   "ls POOL",
		Short: "list a pool's volumes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := c.Pool(args[0])
			if err != nil {
				return err
			}
			vols, err := volume.List(cmd.Context(), p)
			if err != nil {
				return err
			}
			if g.json {
				if vols == nil {
					vols = []volume.Info{}
				}
				return g.printJSON(vols)
			}
			w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSIZE\tOBJECT SIZE\tSNAPSHOTS\tPARENT\tCREATED")
			for _, v := range vols {
				parent := "-"
				if v.Parent != nil {
					parent = v.Parent.Pool + "/" + v.Parent.Volume + "@" + v.Parent.Snap
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", v.Name, humanBytes(int64(v.Size)), humanBytes(int64(v.ObjectSize)),
					len(v.Snaps), parent, v.Created.Format("2006-01-02 15:04:05"))
			}
			return w.Flush()
		},
	}
	info := &cobra.Command{
		Use:   "info POOL/NAME",
		Short: "show a volume's size, object size and id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				info, err := volume.Stat(cmd.Context(), p, name)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
	var newSize string
	var resizeForce, rmForce bool
	resize := &cobra.Command{
		Use:   "resize POOL/NAME --size SIZE",
		Short: "grow or shrink a volume (shrinking deletes the data past the new end)",
		Long: `Grows or shrinks a volume. Open writers (cairn nbd connections) take the
new size before the command returns; NBD clients keep the size they
connected with, and their IO past the new end fails.

Shrinking deletes the data past the new end (snapshots keep theirs), and
is refused while the volume is open for writing: a guest's file system
would lose its end, and NBD cannot tell a client that its disk shrank.
--force shrinks anyway.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseBytes(newSize)
			if err != nil {
				return err
			}
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				info, err := volume.Resize(cmd.Context(), p, name, n, resizeForce)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
	resize.Flags().StringVar(&newSize, "size", "", "new size, e.g. 200G (required)")
	resize.Flags().BoolVar(&resizeForce, "force", false, "shrink even while clients have the volume open (their IO past the new end fails)")
	resize.MarkFlagRequired("size")
	rm := &cobra.Command{
		Use:   "rm POOL/NAME",
		Short: "remove a volume and all its data (refused while clients have it open, unless --force)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				if err := volume.Remove(cmd.Context(), p, name, rmForce); err != nil {
					return err
				}
				fmt.Fprintf(g.out, "removed %s\n", args[0])
				return nil
			})
		},
	}
	rm.Flags().BoolVar(&rmForce, "force", false, "remove even while clients have the volume open (all their IO then fails)")
	export := &cobra.Command{
		Use:   "export POOL/NAME[@SNAP] FILE|-",
		Short: "write a volume's data (now, or at a snapshot) as a checksummed stream (written parts only), to a file or stdout",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				v, err := volume.OpenSnap(cmd.Context(), p, name, snap)
				if err != nil {
					return err
				}
				return streamOut(g, args[1], "export "+args[0], func(w io.Writer, progress volume.Progress) error {
					return v.Export(cmd.Context(), w, progress)
				})
			})
		},
	}
	var fromSnap string
	exportDiff := &cobra.Command{
		Use:   "export-diff --from-snap A POOL/NAME[@B] FILE|-",
		Short: "write what changed in a volume from snapshot A to snapshot B (or to now) as a checksummed stream",
		Long: `Writes the objects that changed from snapshot A to snapshot B (or to the
volume as it is now, without @B). Unchanged objects are found from their
snapshot state, without reading their data. Apply the stream with
import-diff onto a volume that has snapshot A.

  cairn volume export default/vm1@monday full.cvol
  cairn volume import full.cvol backup/vm1           # backup/vm1@monday exists too
  cairn volume export-diff --from-snap monday default/vm1@tuesday - | cairn volume import-diff - backup/vm1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				return streamOut(g, args[1], "export-diff "+args[0], func(w io.Writer, progress volume.Progress) error {
					return volume.ExportDiff(cmd.Context(), p, name, fromSnap, snap, w, progress)
				})
			})
		},
	}
	exportDiff.Flags().StringVar(&fromSnap, "from-snap", "", "the snapshot the diff starts from (required)")
	exportDiff.MarkFlagRequired("from-snap")
	importDiff := streamInCmd(g, "import-diff FILE|- POOL/NAME",
		"apply a stream made by export-diff; a damaged stream is refused and the volume rolled back to where it was",
		"import-diff", volume.ImportDiff)
	clone := &cobra.Command{
		Use:   "clone POOL/NAME@SNAP POOL/CLONE",
		Short: "make a writable volume from a snapshot; it shares the snapshot's data until written",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				if snap == "" {
					return fmt.Errorf("%q: clone needs a snapshot: POOL/NAME@SNAP", args[0])
				}
				dpool, dname, err := splitVolume(args[1])
				if err != nil {
					return err
				}
				dp, err := p.Client().Pool(dpool)
				if err != nil {
					return err
				}
				info, err := volume.Clone(cmd.Context(), p, name, snap, dp, dname)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
	flatten := &cobra.Command{
		Use:   "flatten POOL/CLONE",
		Short: "copy into a clone the data it still shares with its parent snapshot, and detach it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				bar := newCountBar(g, "flatten "+args[0])
				if err := volume.Flatten(cmd.Context(), p, name, bar.update); err != nil {
					bar.abort()
					return err
				}
				bar.finish()
				fmt.Fprintf(g.out, "flattened %s\n", args[0])
				return nil
			})
		},
	}
	imp := streamInCmd(g, "import FILE|- POOL/NAME",
		"create a volume from a stream made by export; a damaged stream is refused and leaves nothing behind",
		"import", volume.Import)
	cmd.AddCommand(create, ls, info, resize, rm, export, imp, exportDiff, importDiff, clone, flatten, snapCmd(g))
	return cmd
}

// streamOut writes a volume stream to path (a file, or - for stdout) with
// a progress bar; a file is complete or absent, never half written.
func streamOut(g *globals, path, what string, write func(io.Writer, volume.Progress) error) error {
	w, done, err := createOutput(path)
	if err != nil {
		return err
	}
	bar := newByteBar(g, what)
	if err := write(w, bar.update); err != nil {
		bar.abort()
		done(false)
		return err
	}
	bar.finish()
	return done(true)
}

// streamInCmd is a command that applies a volume stream read from a file or
// stdin (import, import-diff).
func streamInCmd(g *globals, use, short, what string,
	apply func(context.Context, *client.Pool, io.Reader, string, volume.Progress) (volume.Info, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := openInput(args[0])
			if err != nil {
				return err
			}
			defer r.Close()
			return withVolumePool(cmd.Context(), g, args[1], func(p *client.Pool, name string) error {
				bar := newByteBar(g, what+" "+args[1])
				info, err := apply(cmd.Context(), p, r, name, bar.update)
				if err != nil {
					bar.abort()
					return err
				}
				bar.finish()
				return printVolume(g, info)
			})
		},
	}
}

// createOutput opens FILE (via a temporary name, renamed on success) or stdout.
func createOutput(path string) (io.Writer, func(ok bool) error, error) {
	if path == "-" {
		return os.Stdout, func(bool) error { return nil }, nil
	}
	tmp := path + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, nil, err
	}
	return f, func(ok bool) error {
		if !ok {
			f.Close()
			os.Remove(tmp)
			return nil
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}, nil
}

func openInput(path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	return os.Open(path)
}

// byteBar draws a progress bar on stderr, at most 4 times a second. It may
// be updated from several goroutines. The work ends with finish (success)
// or abort (failure), which ends the bar's line.
type byteBar struct {
	g       *globals
	what    string
	objects bool // counts objects, not bytes
	mu      sync.Mutex
	start   time.Time
	shown   time.Time
	drawn   bool // the line holds a bar
	done    uint64
	total   uint64
}

func newByteBar(g *globals, what string) *byteBar {
	return &byteBar{g: g, what: what, start: time.Now()}
}

func (b *byteBar) update(done, total uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.total = max(done, b.done), total
	if time.Since(b.shown) < 250*time.Millisecond {
		return
	}
	b.shown = time.Now()
	b.draw()
}

func (b *byteBar) draw() {
	if b.g.json {
		return
	}
	b.drawn = true
	el := time.Since(b.start).Seconds()
	eta := ""
	if b.done > 0 && b.done < b.total {
		eta = " ETA " + (time.Duration(el/float64(b.done)*float64(b.total-b.done)) * time.Second).Round(time.Second).String()
	}
	if b.objects {
		fmt.Fprintf(b.g.err, "\r%s %s %d / %d objects, %.0f/s%s   ", b.what, bar(int(b.done), int(max(b.total, 1)), 30),
			b.done, b.total, float64(b.done)/max(el, 1e-3), eta)
		return
	}
	rate := float64(b.done) / max(el, 1e-3) / 1e6
	fmt.Fprintf(b.g.err, "\r%s %s %s / %s, %.0f MB/s%s   ", b.what, bar(int(b.done>>20), int(max(b.total>>20, 1)), 30),
		humanBytes(int64(b.done)), humanBytes(int64(b.total)), rate, eta)
}

// finish draws the bar complete (the work succeeded, whatever the last
// update said: a diff, say, ends before the volume's end) and ends its line.
func (b *byteBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = max(b.done, b.total)
	b.draw()
	fmt.Fprintln(b.g.err)
}

// abort ends the bar's line as it stands, so an error printed next starts
// a line of its own.
func (b *byteBar) abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.g.err)
		b.drawn = false
	}
}

func printVolume(g *globals, info volume.Info) error {
	if g.json {
		return g.printJSON(info)
	}
	fmt.Fprintf(g.out, "volume %s/%s\n  size:        %s (%d bytes)\n  object size: %s\n  id:          %s\n  created:     %s\n",
		info.Pool, info.Name, humanBytes(int64(info.Size)), info.Size, humanBytes(int64(info.ObjectSize)), info.ID, info.Created.Format("2006-01-02 15:04:05 UTC"))
	if p := info.Parent; p != nil {
		fmt.Fprintf(g.out, "  parent:      %s/%s@%s (overlap %s)\n", p.Pool, p.Volume, p.Snap, humanBytes(int64(p.Overlap)))
	}
	for _, s := range info.Snaps {
		fmt.Fprintf(g.out, "  snapshot:    %s (id %d, %s, %s)\n", s.Name, s.ID, humanBytes(int64(s.Size)), s.Created.Format("2006-01-02 15:04:05 UTC"))
	}
	for _, c := range info.Children {
		fmt.Fprintf(g.out, "  clone:       %s/%s\n", c.Pool, c.Volume)
	}
	return nil
}

// splitVolume parses POOL/NAME (no snapshot).
func splitVolume(s string) (string, string, error) {
	ref, err := volume.ParseRef(s)
	if err != nil {
		return "", "", err
	}
	if ref.Snap != "" {
		return "", "", fmt.Errorf("%q names a snapshot: this command takes a volume, POOL/NAME", s)
	}
	return ref.Pool, ref.Name, nil
}

// withVolumeSnap is withVolumePool for POOL/NAME[@SNAP].
func withVolumeSnap(ctx context.Context, g *globals, arg string, fn func(p *client.Pool, name, snap string) error) error {
	ref, err := volume.ParseRef(arg)
	if err != nil {
		return err
	}
	return withPool(ctx, g, ref.Pool, func(p *client.Pool) error { return fn(p, ref.Name, ref.Snap) })
}

func withVolumePool(ctx context.Context, g *globals, arg string, fn func(*client.Pool, string) error) error {
	poolName, name, err := splitVolume(arg)
	if err != nil {
		return err
	}
	return withPool(ctx, g, poolName, func(p *client.Pool) error { return fn(p, name) })
}

// withPool dials the cluster and runs fn on a pool.
func withPool(ctx context.Context, g *globals, poolName string, fn func(*client.Pool) error) error {
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.Pool(poolName)
	if err != nil {
		return err
	}
	return fn(p)
}

func nbdCmd(g *globals) *cobra.Command {
	var listen, debugListen, tlsCert, tlsKey, tlsClientCA string
	var handshakeTimeout time.Duration
	var maxConns int
	cmd := &cobra.Command{
		Use:   "nbd",
		Short: "serve volumes over NBD: export name POOL/NAME",
		Long: `Serves every volume of the cluster over the NBD protocol (fixed newstyle
handshake; NBD_OPT_LIST, INFO and GO with block sizes; read, write, flush,
trim, write-zeroes, FUA; structured replies with holes for unwritten areas;
block status (base:allocation) so clients skip what was never written; safe
with several connections per export). Writes are acknowledged when
durable on every copy, so FLUSH has nothing left to do.

POOL/NAME@SNAP exports a snapshot, read-only. With --tls-cert and --tls-key
the server requires TLS (NBD_OPT_STARTTLS) before anything else; with
--tls-client-ca it also requires a client certificate signed by that CA.

  nbdinfo 'nbds://127.0.0.1:10809/default/vm1?tls-certificates=/etc/pki/cairn'

  qemu-img info nbd://127.0.0.1:10809/default/vm1
  nbdinfo --list nbd://127.0.0.1:10809`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			load := runtimepolicy.ForGateway(ctx)
			if debugListen != "" {
				if err := serveDebug(debugListen); err != nil {
					return err
				}
			}
			c, err := g.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("nbd: listen on %s: %w", listen, err)
			}
			tc, err := nbdgw.TLSConfig(tlsCert, tlsKey, tlsClientCA)
			if err != nil {
				return err
			}
			if handshakeTimeout <= 0 || maxConns <= 0 {
				return fmt.Errorf("nbd: --handshake-timeout and --max-connections must be positive")
			}
			srv := &nbd.Server{Exports: nbdgw.NewExports(c, logger.Printf), Logf: logger.Printf, TLS: tc, Load: load,
				HandshakeTimeout: handshakeTimeout, MaxConns: maxConns}
			logger.Printf("nbd: serving volumes on %s", ln.Addr())
			go func() {
				<-ctx.Done()
				srv.Close()
			}()
			return srv.Serve(ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:10809", "address to serve NBD on")
	cmd.Flags().StringVar(&debugListen, "debug-listen", "", "serve Go profiling (/debug/pprof) on this address")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "PEM certificate (chain): require TLS")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	cmd.Flags().StringVar(&tlsClientCA, "tls-client-ca", "", "PEM CA certificates: also require a client certificate they signed")
	cmd.Flags().DurationVar(&handshakeTimeout, "handshake-timeout", nbd.DefaultHandshakeTimeout, "close a connection that has not chosen an export within this time")
	cmd.Flags().IntVar(&maxConns, "max-connections", nbd.DefaultMaxConns, "connections served at once; more are refused (and logged)")
	return cmd
}
